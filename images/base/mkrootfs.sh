#!/usr/bin/env bash
# Build the sandbox base rootfs with mmdebstrap and write it as an
# uncompressed tarball to stdout (meant to be piped into `docker import`).
#
# Usage: mkrootfs.sh SOURCES_FILE > rootfs.tar
#   SOURCES_FILE  deb822 apt sources for Debian bookworm (see debian-sources.sh;
#                 never hard-code a mirror here).
# Env:
#   MMDEBSTRAP_MODE  mmdebstrap --mode (default: unshare as root if the
#                    kernel allows it, else root; auto for other users).
#
# Everything that defines the rootfs content lives in this directory
# (mkrootfs.sh, customize.sh, packages); its hash is the base recipe hash.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
sources="${1:?usage: mkrootfs.sh SOURCES_FILE}"
[[ -s "$sources" ]] || { echo "mkrootfs: sources file '$sources' is empty or missing" >&2; exit 1; }
[[ ! -t 1 ]] || { echo "mkrootfs: refusing to write a tarball to a terminal" >&2; exit 1; }

suite=bookworm
# Mode: as root, "unshare" runs mmdebstrap in its own mount/pid namespace (no
# user namespace), so the /proc, /sys and /dev mounts inside the temporary
# chroot can never leak onto the host if the build is interrupted; it needs
# unshare(2) for those namespaces, else plain "root" mode is used. Both give
# the same tarball. Non-root: "auto" (unshare with subuids, or fakechroot).
if [[ -z "${MMDEBSTRAP_MODE:-}" ]]; then
	if [[ "$(id -u)" != 0 ]]; then
		MMDEBSTRAP_MODE=auto
	elif unshare --mount --pid --uts --ipc --fork true 2>/dev/null; then
		MMDEBSTRAP_MODE=unshare
	else
		MMDEBSTRAP_MODE=root
	fi
fi
echo "mkrootfs: mmdebstrap mode $MMDEBSTRAP_MODE" >&2

# Package list: strip comments/blank lines, join with commas.
# EXTRA_PACKAGES names a second list (e.g. images/data/packages) for a
# larger image built the same way.
include="$(cat "$here/packages" ${EXTRA_PACKAGES:+"$EXTRA_PACKAGES"} | sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' | paste -sd, -)"
[[ -n "$include" ]] || { echo "mkrootfs: empty package list" >&2; exit 1; }

# Carry over the few host apt settings that decide whether the host's own
# mirrors are reachable/acceptable at all (a proxy, snapshot mirrors with an
# expired Valid-Until). They are read from the host at build time, never
# stored in the repository, and customize.sh deletes them from the image.
host_aptopts=()
eval "$(apt-config shell \
	cvu Acquire::Check-Valid-Until cdate Acquire::Check-Date \
	hproxy Acquire::http::Proxy sproxy Acquire::https::Proxy)"
[[ "${cvu:-}" == false ]] && host_aptopts+=(--aptopt='Acquire::Check-Valid-Until "false"')
[[ "${cdate:-}" == false ]] && host_aptopts+=(--aptopt='Acquire::Check-Date "false"')
[[ -n "${hproxy:-}" ]] && host_aptopts+=(--aptopt="Acquire::http::Proxy \"$hproxy\"")
[[ -n "${sproxy:-}" ]] && host_aptopts+=(--aptopt="Acquire::https::Proxy \"$sproxy\"")

# One download of each Debian package for every image: the .deb files are
# kept in a cache directory outside the build (SANDBOXD_APT_CACHE; default
# /var/cache/sandboxd/apt as root, else ~/.cache/sandboxd/apt), copied into
# the chroot before apt runs and back out before the customize hook empties
# apt's cache, the way mmdebstrap(1) shows for builds without a caching
# proxy. apt downloads only what the cache lacks or has in another version,
# so the data and browser images do not fetch the base packages again.
cache="${SANDBOXD_APT_CACHE:-}"
if [[ -z "$cache" ]]; then
	if [[ "$(id -u)" == 0 ]]; then cache=/var/cache/sandboxd/apt; else cache="${XDG_CACHE_HOME:-$HOME/.cache}/sandboxd/apt"; fi
fi
[[ "$cache" != *[[:space:]]* ]] || { echo "mkrootfs: the apt cache path '$cache' contains white space" >&2; exit 1; }
mkdir -p "$cache"
cache="$(cd "$cache" && pwd)"
echo "mkrootfs: Debian packages cached in $cache ($(find "$cache" -maxdepth 1 -name '*.deb' | wc -l) there)" >&2

# The hook is given via an environment variable so that paths with spaces or
# quotes cannot break the shell snippet mmdebstrap runs.
export SANDBOXD_CUSTOMIZE_HOOK="$here/customize.sh"

# --variant=essential: only Essential:yes packages (no apt, no gpgv, no
#   e2fsprogs, ...) plus our --include list and its dependencies; smaller than
#   minbase and nothing in the sandbox needs apt.
# merged-usr hook: bookworm is merged-/usr; without it apt would satisfy
#   init-system-helpers' "usrmerge | usr-is-merged" with usrmerge (+ perl).
# dpkg path-exclude: never unpack docs/man/info/locales (copyright kept).
# shellcheck disable=SC2016 # the hook snippet is expanded by mmdebstrap's sh
exec mmdebstrap \
	--mode="$MMDEBSTRAP_MODE" \
	--variant=essential \
	--format=tar \
	--include="$include" \
	--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
	--aptopt='Acquire::Languages "none"' \
	--aptopt='APT::Install-Recommends "false"' \
	"${host_aptopts[@]}" \
	--dpkgopt='path-exclude=/usr/share/doc/*' \
	--dpkgopt='path-include=/usr/share/doc/*/copyright' \
	--dpkgopt='path-exclude=/usr/share/man/*' \
	--dpkgopt='path-exclude=/usr/share/info/*' \
	--dpkgopt='path-exclude=/usr/share/locale/*' \
	--dpkgopt='path-include=/usr/share/locale/locale.alias' \
	--dpkgopt='path-exclude=/usr/share/lintian/*' \
	--skip=essential/unlink \
	--setup-hook='mkdir -p "$1"/var/cache/apt/archives/' \
	--setup-hook="sync-in $cache /var/cache/apt/archives/" \
	--customize-hook="sync-out /var/cache/apt/archives $cache" \
	--customize-hook='bash "$SANDBOXD_CUSTOMIZE_HOOK" "$1"' \
	"$suite" - "$sources"
