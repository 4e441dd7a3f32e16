#!/usr/bin/env bash
# Build the browser image sandboxd/browser:<Debian chromium version> (also
# tagged :latest) without any container registry. Called by `make image`,
# which builds the driver (cmd/sandboxd-browser) first.
#
#   1. Base sandboxd/bookworm-browser:<base-hash12>: the sandbox base rootfs
#      (images/base/) plus images/browser/packages (chromium, poppler-utils,
#      qpdf, a font), made by mmdebstrap from the Debian entries of the
#      host's apt configuration and imported with `docker import`.
#   2. Final image: images/browser/Dockerfile FROM that base, plus the static
#      driver sandboxd-browser.
#
# Idempotent like images/build.sh: the images carry their recipe hash in the
# label sandboxd.recipe (base: images/base/* and the package list; final: the
# base hash, the Dockerfile, this script and the driver's sha256), and
# nothing whose hash matches is rebuilt. A new driver rebuilds only the last
# layer.
#
# Environment:
#   DRIVER     static driver binary (default: <repo>/bin/sandboxd-browser)
#   REPO       image repository (default: sandboxd/browser)
#   BASE_REPO  base image repository (default: sandboxd/bookworm-browser)
#   FORCE=1    rebuild base and final image (picks up Debian updates)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
images_dir="$(cd "$here/.." && pwd)"
repo_dir="$(cd "$images_dir/.." && pwd)"

REPO="${REPO:-sandboxd/browser}"
BASE_REPO="${BASE_REPO:-sandboxd/bookworm-browser}"
DRIVER="${DRIVER:-$repo_dir/bin/sandboxd-browser}"
FORCE="${FORCE:-}"
[[ "$FORCE" == 0 || "$FORCE" == false ]] && FORCE=
export EXTRA_PACKAGES="$here/packages"

cleanup=()
STATUS_IMAGE="$REPO:latest"
# shellcheck source=images/status.sh
source "$images_dir/status.sh"
trap 'build_status_trap; rc=$?; rm -rf "${cleanup[@]}"; exit $rc' EXIT
log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'browser/build.sh: ERROR: %s\n' "$*" >&2; exit 1; }
sha256() { sha256sum "$1" | cut -d' ' -f1; }
image_label() {
	docker image inspect --format "{{ index .Config.Labels \"$2\" }}" "$1" 2>/dev/null | sed 's/^<no value>$//' || true
}
image_id() { docker image inspect --format '{{.Id}}' "$1" 2>/dev/null || true; }

command -v docker >/dev/null 2>&1 || die "docker CLI not found"
[[ -f "$DRIVER" ]] || die "driver binary '$DRIVER' not found; build it with 'make image'"
if ldd "$DRIVER" >/dev/null 2>&1; then die "driver '$DRIVER' is dynamically linked; build it with CGO_ENABLED=0"; fi

# One image build at a time on this machine (the same lock as images/build.sh).
lock=/tmp/sandboxd-image-build.lock
if command -v flock >/dev/null 2>&1 && { exec 9>>"$lock"; } 2>/dev/null; then
	if ! flock -n 9; then
		log "another image build is running; waiting for it"
		build_status building 0 3 "waiting for another image build to finish"
		flock 9
	fi
fi

# The same base recipe hash as images/build.sh computes for this package list.
base_hash="$(
	cd "$images_dir/base"
	{
		echo "sandboxd-base-recipe v1"
		find . -type f ! -name '*~' ! -name '.*' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
		echo "extra $(sha256sum <"$EXTRA_PACKAGES")"
	} | sha256sum | cut -d' ' -f1
)"
base_ref="$BASE_REPO:${base_hash:0:12}"
driver_sha="$(sha256 "$DRIVER")"
final_hash="$(
	printf 'sandboxd-browser-recipe v1\nbase %s\ndockerfile %s\nbuild.sh %s\ndriver %s\n' \
		"$base_hash" "$(sha256 "$here/Dockerfile")" "$(sha256 "$here/build.sh")" "$driver_sha" |
		sha256sum | cut -d' ' -f1
)"

if [[ -z "$FORCE" && "$(image_label "$REPO:latest" sandboxd.recipe)" == "$final_hash" ]]; then
	log "$REPO:latest is up to date (recipe ${final_hash:0:12}, chromium $(image_label "$REPO:latest" sandboxd.chromium-version)); nothing to do"
	exit 0
fi

if [[ -z "$FORCE" && "$(image_label "$base_ref" sandboxd.recipe)" == "$base_hash" ]]; then
	log "base $base_ref is up to date"
else
	command -v mmdebstrap >/dev/null 2>&1 || {
		[[ "$(id -u)" == 0 ]] || die "mmdebstrap is not installed; run: sudo apt-get install -y mmdebstrap"
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends mmdebstrap
	}
	tmp="$(mktemp -d "${TMPDIR:-/tmp}/sandboxd-browser-base.XXXXXX")"
	cleanup+=("$tmp")
	bash "$images_dir/base/debian-sources.sh" bookworm >"$tmp/debian.sources"
	build_status building 1 3 "installing Debian packages into a root file system"
	log "building the browser rootfs with mmdebstrap and importing it as $base_ref (takes minutes)"
	set +e
	id="$(
		bash "$images_dir/base/mkrootfs.sh" "$tmp/debian.sources" |
			docker import \
				--message "sandboxd browser base: Debian bookworm + chromium, poppler-utils, qpdf (mmdebstrap)" \
				--change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' \
				--change 'ENV LANG=C.UTF-8' \
				--change 'LABEL sandboxd.managed-image=true' \
				--change 'LABEL sandboxd.image-kind=browser-base' \
				--change "LABEL sandboxd.recipe=$base_hash" \
				-
	)"
	rc=$?
	set -e
	if [[ $rc -ne 0 || -z "$id" ]]; then
		[[ -z "$id" ]] || docker image rm "$id" >/dev/null 2>&1 || true
		die "building the browser rootfs failed (exit status $rc)"
	fi
	docker tag "$id" "$base_ref"
	log "imported $base_ref ($(docker image inspect --format '{{.Size}}' "$base_ref" | numfmt --to=si))"
	while IFS= read -r old; do
		[[ -n "$old" && "$old" != "$base_ref" ]] || continue
		docker image rm "$old" >/dev/null 2>&1 || true
	done < <(docker image ls --filter label=sandboxd.image-kind=browser-base --format '{{.Repository}}:{{.Tag}}' "$BASE_REPO")
fi

chromium_version="$(docker run --rm --network none --entrypoint dpkg-query "$base_ref" -W -f '${Version}' chromium)" ||
	die "reading chromium's version in $base_ref failed"
# A tag allows [A-Za-z0-9_.-]: Debian's "~" becomes "_".
tag="$REPO:$(printf '%s' "$chromium_version" | tr -c 'A-Za-z0-9_.-' '_')"

if [[ -z "${DOCKER_BUILDKIT:-}" ]]; then
	if docker buildx version >/dev/null 2>&1; then export DOCKER_BUILDKIT=1; else export DOCKER_BUILDKIT=0; fi
fi
ctx="$(mktemp -d "${TMPDIR:-/tmp}/sandboxd-browser.XXXXXX")"
cleanup+=("$ctx" "$ctx.iid")
cp "$here/Dockerfile" "$ctx/Dockerfile"
cp "$DRIVER" "$ctx/sandboxd-browser"
chmod 0755 "$ctx/sandboxd-browser"
build_status building 2 3 "building the image"
log "building $tag from $base_ref (driver sha256 ${driver_sha:0:12})"
docker build --network none --iidfile "$ctx.iid" \
	--build-arg "BASE_IMAGE=$base_ref" \
	--build-arg "SANDBOXD_RECIPE=$final_hash" \
	--build-arg "SANDBOXD_BASE_IMAGE=$base_ref" \
	--build-arg "SANDBOXD_BASE_RECIPE=$base_hash" \
	--build-arg "SANDBOXD_DRIVER_SHA256=$driver_sha" \
	--build-arg "SANDBOXD_CHROMIUM_VERSION=$chromium_version" \
	"$ctx" >&2
new_id="$(cat "$ctx.iid")"
[[ -n "$new_id" ]] || die "docker build did not report an image ID"
reject() { docker image rm "$new_id" >/dev/null 2>&1 || true; die "$*"; }

build_status building 3 3 "smoke-testing the image"
# Smoke test as the sandbox user, no network, read-only root: the tools
# answer, the driver runs, and no setuid/setgid file exists (Chromium's
# setuid sandbox helper included: the container is the boundary).
out="$(docker run --rm --network none --read-only --user 65534:65534 --entrypoint sh "$new_id" -c \
	'chromium --version >/dev/null && pdftotext -v 2>/dev/null; qpdf --version >/dev/null && /usr/local/bin/sandboxd-browser --version' 2>&1)" ||
	reject "smoke test failed: $out"
setid="$(docker run --rm --network none --read-only --user 0:0 --entrypoint find "$new_id" / -xdev -perm /6000 2>&1)" ||
	reject "setuid/setgid scan failed: $setid"
[[ -z "$setid" ]] || reject "image contains setuid/setgid paths: $setid"

old_id="$(image_id "$REPO:latest")"
docker tag "$new_id" "$tag"
docker tag "$new_id" "$REPO:latest"
if [[ -n "$old_id" && "$old_id" != "$new_id" ]]; then
	docker image rm "$old_id" >/dev/null 2>&1 && log "removed previous image ${old_id#sha256:}" || true
fi
log "built $tag and $REPO:latest (recipe ${final_hash:0:12}, $(docker image inspect --format '{{.Size}}' "$tag" | numfmt --to=si))"
