#!/usr/bin/env bash
# Build the sandbox image (default sandboxd/python:3.11) without any container
# registry. Called by `make image`, which builds the launcher first.
#
#   1. Base image sandboxd/bookworm-python:<base-hash12>: a Debian bookworm
#      rootfs (essential set + python3 + tzdata) made by mmdebstrap from the
#      Debian entries of the HOST's apt configuration, piped into
#      `docker import`. Recipe: everything under images/base/.
#   2. Final image: images/python/Dockerfile FROM that base, plus the static
#      sandboxd-launcher, built with the classic builder if BuildKit/buildx is
#      not available.
#
# Idempotent: every image carries its recipe hash in the label
# sandboxd.recipe. The base hash covers the files in images/base/ (the rootfs
# script, hook, sources extraction and package list); the final hash covers
# the base hash, images/python/Dockerfile, this script and the launcher's
# sha256. Nothing is rebuilt when the hash matches; a new launcher only
# rebuilds the final image.
#
# Usage: images/build.sh [--force]
# Environment:
#   LAUNCHER         static launcher binary (default: <repo>/bin/sandboxd-launcher)
#   IMAGE            final image reference (default: sandboxd/python:3.11)
#   BASE_REPO        base image repository (default: sandboxd/bookworm-python)
#   EXTRA_PACKAGES   a second package list for a larger image (make image
#                    builds sandboxd/python-data:3.11 with images/data/packages)
#   EXTRA_SMOKE      Python code the smoke test also runs (e.g. the imports)
#   FORCE=1          rebuild base and final image even if up to date (also
#                    the way to pick up new Debian security updates)
#   MMDEBSTRAP_MODE  mmdebstrap --mode (default: unshare as root, see base/mkrootfs.sh)
set -euo pipefail

images_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo_dir="$(cd "$images_dir/.." && pwd)"

IMAGE="${IMAGE:-sandboxd/python:3.11}"
EXTRA_PACKAGES="${EXTRA_PACKAGES:-}"
EXTRA_SMOKE="${EXTRA_SMOKE:-}"
if [[ -n "$EXTRA_PACKAGES" ]]; then
	EXTRA_PACKAGES="$(cd "$(dirname "$EXTRA_PACKAGES")" && pwd)/$(basename "$EXTRA_PACKAGES")"
	[[ -f "$EXTRA_PACKAGES" ]] || { echo "build.sh: EXTRA_PACKAGES file $EXTRA_PACKAGES not found" >&2; exit 1; }
	export EXTRA_PACKAGES
fi
BASE_REPO="${BASE_REPO:-sandboxd/bookworm-python}"
LAUNCHER="${LAUNCHER:-$repo_dir/bin/sandboxd-launcher}"
FORCE="${FORCE:-}"

case "${1:-}" in
	"") ;;
	--force) FORCE=1 ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "usage: $0 [--force]" >&2; exit 2 ;;
esac
[[ "$FORCE" == 0 || "$FORCE" == false ]] && FORCE=

cleanup=()
STATUS_IMAGE="$IMAGE"
# shellcheck source=images/status.sh
source "$images_dir/status.sh"
trap 'build_status_trap; rc=$?; rm -rf "${cleanup[@]}"; exit $rc' EXIT

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'build.sh: ERROR: %s\n' "$*" >&2; exit 1; }

sha256() { sha256sum "$1" | cut -d' ' -f1; }

image_label() { # image label -> value ('' if the image or label is missing)
	docker image inspect --format "{{ index .Config.Labels \"$2\" }}" "$1" 2>/dev/null | sed 's/^<no value>$//' || true
}

image_id() { docker image inspect --format '{{.Id}}' "$1" 2>/dev/null || true; }

# --- Preconditions ---------------------------------------------------------
command -v docker >/dev/null 2>&1 || die "docker CLI not found"
docker version --format '{{.Server.Version}}' >/dev/null 2>&1 ||
	die "cannot talk to the Docker engine (is it running, may $(id -un) use /var/run/docker.sock?)"

[[ -f "$LAUNCHER" ]] || die "launcher binary '$LAUNCHER' not found; build it with 'make image' (or 'make launcher')"
if ldd "$LAUNCHER" >/dev/null 2>&1; then
	die "launcher '$LAUNCHER' is dynamically linked; build it with CGO_ENABLED=0"
fi

# One image build at a time on this machine (images are global to the
# engine; `make test` runs `make image`). A waiting build re-checks the recipe
# afterwards and normally finds the image up to date.
lock=/tmp/sandboxd-image-build.lock
if command -v flock >/dev/null 2>&1 && { exec 9>>"$lock"; } 2>/dev/null; then
	if ! flock -n 9; then
		log "another image build is running; waiting for it"
		build_status building 0 3 "waiting for another image build to finish"
		flock 9
	fi
fi

# --- Recipe hashes -----------------------------------------------------------
# Hash of the base recipe: names and contents of all files in images/base.
base_hash="$(
	cd "$images_dir/base"
	{
		echo "sandboxd-base-recipe v1"
		find . -type f ! -name '*~' ! -name '.*' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
		if [[ -n "$EXTRA_PACKAGES" ]]; then echo "extra $(sha256sum <"$EXTRA_PACKAGES")"; fi
	} | sha256sum | cut -d' ' -f1
)"
base_ref="$BASE_REPO:${base_hash:0:12}"

launcher_sha="$(sha256 "$LAUNCHER")"
dockerfile="$images_dir/python/Dockerfile"
final_hash="$(
	printf 'sandboxd-python-recipe v1\nbase %s\ndockerfile %s\nbuild.sh %s\nlauncher %s\nsmoke %s\n' \
		"$base_hash" "$(sha256 "$dockerfile")" "$(sha256 "$images_dir/build.sh")" "$launcher_sha" "$EXTRA_SMOKE" |
		sha256sum | cut -d' ' -f1
)"

# $BASE_REPO:latest follows the current base; the top-level Dockerfile (the
# sandboxd service image) uses it as its default BASE.
tag_latest() {
	local id
	id="$(image_id "$base_ref")"
	[[ -n "$id" && "$(image_id "$BASE_REPO:latest")" != "$id" ]] || return 0
	docker tag "$base_ref" "$BASE_REPO:latest"
	log "tagged $base_ref as $BASE_REPO:latest"
}

if [[ -z "$FORCE" && "$(image_label "$IMAGE" sandboxd.recipe)" == "$final_hash" ]]; then
	tag_latest
	log "$IMAGE is up to date (recipe ${final_hash:0:12}, base $base_ref); nothing to do"
	exit 0
fi

# --- Base image ----------------------------------------------------------------
ensure_mmdebstrap() {
	command -v mmdebstrap >/dev/null 2>&1 && return 0
	[[ "$(id -u)" == 0 ]] || die "mmdebstrap is not installed; run: sudo apt-get update && sudo apt-get install -y mmdebstrap"
	log "mmdebstrap not found; installing it with apt-get"
	apt-get update
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends mmdebstrap
}

build_base() {
	ensure_mmdebstrap
	local tmp sources id rc
	tmp="$(mktemp -d "${TMPDIR:-/tmp}/sandboxd-base.XXXXXX")"
	cleanup+=("$tmp")

	log "collecting the Debian bookworm entries of the host's apt configuration"
	sources="$tmp/debian.sources"
	bash "$images_dir/base/debian-sources.sh" bookworm >"$sources"
	sed -n 's/^\(URIs\|Suites\|Components\): /    \1: /p' "$sources" >&2

	log "building rootfs with mmdebstrap and importing it as $base_ref (takes a minute)"
	build_status building 1 3 "installing Debian packages into a root file system"
	# docker import without a repository argument prints the new image ID but
	# tags nothing, so a failed or truncated mmdebstrap run never ends up
	# under the real name.
	set +e
	id="$(
		bash "$images_dir/base/mkrootfs.sh" "$sources" |
			docker import \
				--message "sandboxd base: Debian bookworm + python3 (mmdebstrap)" \
				--change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' \
				--change 'ENV LANG=C.UTF-8' \
				--change 'CMD ["python3"]' \
				--change 'LABEL sandboxd.managed-image=true' \
				--change 'LABEL sandboxd.image-kind=base' \
				--change "LABEL sandboxd.recipe=$base_hash" \
				--change 'LABEL org.opencontainers.image.title="sandboxd Debian bookworm python3 base"' \
				-
	)"
	rc=$?
	set -e
	if [[ $rc -ne 0 || -z "$id" ]]; then
		if [[ -n "$id" ]]; then docker image rm "$id" >/dev/null 2>&1 || true; fi
		die "building the base rootfs failed (exit status $rc); see the mmdebstrap output above"
	fi
	docker tag "$id" "$base_ref"
	log "imported $base_ref ($(docker image inspect --format '{{.Size}}' "$base_ref" | numfmt --to=si))"

	# Untag base images of older recipes (their layers stay as long as an
	# image built on them exists).
	local old
	while IFS= read -r old; do
		[[ -n "$old" && "$old" != "$base_ref" && "$old" != "$BASE_REPO:latest" ]] || continue
		log "removing stale base tag $old"
		docker image rm "$old" >/dev/null 2>&1 || true
	done < <(docker image ls --filter label=sandboxd.image-kind=base --format '{{.Repository}}:{{.Tag}}' "$BASE_REPO")
}

if [[ -z "$FORCE" && "$(image_label "$base_ref" sandboxd.recipe)" == "$base_hash" ]]; then
	log "base $base_ref is up to date"
else
	build_base
fi
tag_latest

# --- Final image -----------------------------------------------------------------
# BuildKit needs the buildx plugin with a current docker CLI; fall back to the
# classic builder (engine 20.10 has it) unless the caller chose explicitly.
if [[ -z "${DOCKER_BUILDKIT:-}" ]]; then
	if docker buildx version >/dev/null 2>&1; then export DOCKER_BUILDKIT=1; else export DOCKER_BUILDKIT=0; fi
fi

ctx="$(mktemp -d "${TMPDIR:-/tmp}/sandboxd-image.XXXXXX")"
cleanup+=("$ctx")
cp "$dockerfile" "$ctx/Dockerfile"
cp "$LAUNCHER" "$ctx/sandboxd-launcher"
chmod 0755 "$ctx/sandboxd-launcher"

build_status building 2 3 "building the image"
log "building $IMAGE from $base_ref (launcher sha256 ${launcher_sha:0:12}, DOCKER_BUILDKIT=$DOCKER_BUILDKIT)"
# Built untagged (--iidfile); tagged only after the smoke test passed, so a
# broken build never carries the "up to date" recipe label under $IMAGE.
docker build \
	--network none \
	--iidfile "$ctx.iid" \
	--build-arg "BASE_IMAGE=$base_ref" \
	--build-arg "SANDBOXD_RECIPE=$final_hash" \
	--build-arg "SANDBOXD_BASE_IMAGE=$base_ref" \
	--build-arg "SANDBOXD_BASE_RECIPE=$base_hash" \
	--build-arg "SANDBOXD_LAUNCHER_SHA256=$launcher_sha" \
	"$ctx"
cleanup+=("$ctx.iid")
new_id="$(cat "$ctx.iid")"
[[ -n "$new_id" ]] || die "docker build did not report an image ID"
[[ "$(image_label "$new_id" sandboxd.recipe)" == "$final_hash" ]] || die "built image $new_id lacks the recipe label"

reject() { # the built image failed a check: delete it, then fail
	docker image rm "$new_id" >/dev/null 2>&1 || true
	die "$*"
}

# --- Smoke test: the stdlib the service relies on, as the sandbox user, with
# no network and a read-only rootfs; and no setuid/setgid file anywhere.
log "smoke-testing ${new_id#sha256:}"
build_status building 3 3 "smoke-testing the image"
smoke='import json, csv, sqlite3, hashlib, ssl, decimal, zlib, base64, bz2, lzma, zoneinfo, os
assert os.getuid() == 65534 and os.getcwd() == "/sandbox", (os.getuid(), os.getcwd())
assert os.access("/usr/local/bin/sandboxd-launcher", os.X_OK), "launcher not executable"
assert os.access("/usr/bin/bwrap", os.X_OK), "bubblewrap missing"
zoneinfo.ZoneInfo("UTC")
'"$EXTRA_SMOKE"'
print("ok")'
out="$(docker run --rm --network none --read-only --user 65534:65534 "$new_id" python3 -c "$smoke" 2>&1)" ||
	reject "smoke test failed: $out"
[[ "$out" == ok ]] || reject "smoke test printed unexpected output: $out"
setid="$(docker run --rm --network none --read-only --user 0:0 --entrypoint find "$new_id" / -xdev -perm /6000 2>&1)" ||
	reject "setuid/setgid scan failed: $setid"
[[ -z "$setid" ]] || reject "image contains setuid/setgid paths: $setid"

old_id="$(image_id "$IMAGE")"
docker tag "$new_id" "$IMAGE"

# Drop the previous image if nothing else uses it.
if [[ -n "$old_id" && "$old_id" != "$new_id" ]]; then
	if docker image rm "$old_id" >/dev/null 2>&1; then
		log "removed previous image ${old_id#sha256:}"
	else
		log "previous image ${old_id#sha256:} is still in use (running sandboxes?); left in place"
	fi
fi

log "built $IMAGE (recipe ${final_hash:0:12}, $(docker image inspect --format '{{.Size}}' "$IMAGE" | numfmt --to=si))"
