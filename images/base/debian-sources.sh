#!/usr/bin/env bash
# Print, in deb822 format, the Debian bookworm entries (bookworm,
# bookworm-updates, bookworm-security; binary "deb" only) of the HOST's apt
# configuration, for use as mmdebstrap's mirror list.
#
# No mirror is hard-coded here on purpose: the entries come from whatever the
# host's /etc/apt/sources.list, sources.list.d/*.list and *.sources say, as
# interpreted by apt itself (`apt-get indextargets`), so one-line and deb822
# files, "Enabled: no" and per-entry options are all handled by apt. Only
# entries whose downloaded Release file says "Origin: Debian", whose codename
# is bookworm(-updates|-security) and that apt considers trusted are kept, so
# third-party repositories (nodesource, cloud-sdk, docker, ...) never leak into
# the image, even if they use "bookworm" as their suite name. The output is
# pinned to the Debian archive keyring.
#
# Requires up-to-date apt lists on the host (the Release files are what tell
# us the origin); if no entry is found, `apt-get update` is run once.
#
# Usage: debian-sources.sh [CODENAME]   (default: bookworm)
set -euo pipefail

codename="${1:-bookworm}"
keyring="/usr/share/keyrings/debian-archive-keyring.gpg"

log() { printf 'debian-sources: %s\n' "$*" >&2; }

entries() {
	# One line per (repo URI, codename, component) of a trusted Debian repo.
	# shellcheck disable=SC2016 # $(...) are apt's format fields, not shell
	apt-get indextargets \
		--format '$(TARGET_OF)|$(IDENTIFIER)|$(ORIGIN)|$(TRUSTED)|$(CODENAME)|$(REPO_URI)|$(COMPONENT)' |
		awk -F'|' -v cn="$codename" '
			$1 == "deb" && $2 == "Packages" && $3 == "Debian" && $4 == "yes" &&
			($5 == cn || $5 == cn "-updates" || $5 == cn "-security") &&
			$6 != "" && $7 != "" { print $6 "|" $5 "|" $7 }' |
		sort -u
}

list="$(entries)"
if [[ -z "$list" ]]; then
	log "no trusted Debian ${codename} entry found in the apt lists; running apt-get update once"
	apt-get update >&2
	list="$(entries)"
fi
if [[ -z "$list" ]]; then
	log "ERROR: the host's apt configuration has no trusted Debian ${codename} repository."
	log "Add one to /etc/apt/sources.list.d/ (e.g. a debian.sources file), run apt-get update, retry."
	exit 1
fi
if ! grep -q "|${codename}|" <<<"$list"; then
	log "ERROR: found only ${codename}-updates/-security entries, but no ${codename} main suite:"
	log "$list"
	exit 1
fi
if [[ ! -r "$keyring" ]]; then
	log "ERROR: $keyring is missing; install debian-archive-keyring"
	exit 1
fi

# Group the components of each (URI, suite) pair into one deb822 stanza.
awk -F'|' -v keyring="$keyring" '
	{
		k = $1 "|" $2
		if (!(k in comps)) { order[n++] = k; comps[k] = $3 }
		else if (index(" " comps[k] " ", " " $3 " ") == 0) { comps[k] = comps[k] " " $3 }
	}
	END {
		for (i = 0; i < n; i++) {
			split(order[i], a, "|")
			printf "Types: deb\nURIs: %s\nSuites: %s\nComponents: %s\nSigned-By: %s\n\n", a[1], a[2], comps[order[i]], keyring
		}
	}' <<<"$list"
