#!/usr/bin/env bash
# mmdebstrap --customize-hook for the sandbox base rootfs.
# Runs on the host (root/unshare mode) with the chroot directory as $1, after
# all packages are installed and before mmdebstrap packs the tarball.
set -euo pipefail

root="${1:?usage: customize.sh CHROOT_DIR}"
[[ -d "$root/usr" && "$root" != "/" ]] || { echo "customize.sh: refusing to work on '$root'" >&2; exit 1; }

log() { printf 'customize: %s\n' "$*" >&2; }

# --- Remove setuid/setgid bits everywhere (files and directories). ---------
# Defense in depth: the sandbox runs as 65534 with no-new-privileges and no
# capabilities anyway, but there is no reason to ship su/newgrp/unix_chkpwd
# with privilege-raising bits. -xdev keeps us out of the /proc, /sys and /dev
# mounts mmdebstrap set up inside the chroot.
n=0
while IFS= read -r -d '' f; do
	chmod u-s,g-s -- "$f"
	log "stripped setuid/setgid: ${f#"$root"}"
	n=$((n + 1))
done < <(find "$root" -xdev \( -type f -o -type d \) -perm /6000 -print0)
if [[ -n "$(find "$root" -xdev \( -type f -o -type d \) -perm /6000 -print -quit)" ]]; then
	log "ERROR: setuid/setgid files remain"
	exit 1
fi
log "removed setuid/setgid bits from $n paths"

# --- Drop file capabilities (security.capability xattrs), if any. ----------
if command -v getcap >/dev/null 2>&1 && command -v setcap >/dev/null 2>&1; then
	while IFS= read -r line; do
		f="${line%% *}"
		[[ -n "$f" && -e "$f" ]] || continue
		setcap -r "$f"
		log "removed file capabilities: ${f#"$root"}"
	done < <(getcap -r "$root" 2>/dev/null || true)
fi

# --- Size: docs, man pages, locales, caches, logs. --------------------------
# (dpkg path-exclude already keeps most of this out; this catches the rest,
# e.g. files created by maintainer scripts.) Copyright files are kept.
find "$root/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete 2>/dev/null || true
find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete 2>/dev/null || true
rm -rf "$root"/usr/share/man/* "$root"/usr/share/info/* \
	"$root"/usr/share/lintian "$root"/usr/share/linda \
	"$root"/usr/share/bash-completion "$root"/usr/share/common-licenses/*.gz
find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} + 2>/dev/null || true
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/var/cache/debconf/*-old \
	"$root"/var/lib/dpkg/*-old
find "$root/var/log" -type f -delete

# --- Host identity leaking in via mmdebstrap's setup step. ------------------
# Docker bind-mounts its own /etc/hostname, /etc/hosts and /etc/resolv.conf;
# the image must not carry the build host's values.
printf 'sandbox\n' >"$root/etc/hostname"
: >"$root/etc/resolv.conf"
chmod 0644 "$root/etc/hostname" "$root/etc/resolv.conf"

# --- No build-host apt configuration in the image. --------------------------
# The image has no apt (essential variant) and no network; drop the mirror
# list and the apt options mmdebstrap copied in (they may carry the build
# host's mirror/proxy). dpkg's path-exclude config is kept on purpose.
rm -f "$root"/etc/apt/sources.list "$root"/etc/apt/sources.list.d/* "$root"/etc/apt/apt.conf.d/99mmdebstrap
