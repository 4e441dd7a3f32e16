#!/usr/bin/env bash
# Build one image of the development fleet (deploy/fleet/) without any
# container registry. Called by `make fleet-images` (through `make fleet`).
#
#   KIND       image                       what is in it
#   postgres   sandboxd/fleet-postgres:dev Debian's postgresql, an entrypoint
#                                          that initialises the cluster once
#   haproxy    sandboxd/fleet-haproxy:dev  Debian's haproxy
#   s3         sandboxd/fleet-s3:dev       the SeaweedFS `weed` binary built on
#                                          the host (go run ./internal/s3test/build)
#
# The sandboxd service image itself is `make docker` (top-level Dockerfile).
#
# How, the way images/build.sh makes the sandbox base:
#   1. Rootfs sandboxd/fleet-KIND-rootfs:<hash12>: mmdebstrap of Debian's
#      essential set plus images/fleet/KIND/packages, from the Debian bookworm
#      entries of the HOST's apt configuration, piped into `docker import`.
#      The scripts of images/base/ are reused unchanged (debian-sources.sh,
#      mkrootfs.sh, customize.sh): mkrootfs.sh runs from a temporary directory
#      holding a link to it, this KIND's package list, and a hook that runs
#      images/base/customize.sh and then KIND/customize.sh if there is one.
#   2. Final image: KIND/Dockerfile FROM that rootfs plus KIND's files (and
#      the weed binary for s3), built with the classic builder when BuildKit
#      is not available, with --network none, smoke-tested, then tagged.
#
# Idempotent: the rootfs carries a hash of its recipe (the images/base
# scripts, KIND/packages, KIND/customize.sh) and the final image a hash of
# the rootfs recipe, every file in KIND/, this script and the weed binary's
# sha256, in the label sandboxd.recipe; nothing is rebuilt when it matches.
#
# Usage: images/fleet/build.sh [--force] KIND
# Environment:
#   IMAGE        final image reference (default sandboxd/fleet-KIND:dev)
#   ROOTFS_REPO  rootfs repository (default sandboxd/fleet-KIND-rootfs)
#   WEED         s3: the weed binary (default: `go run ./internal/s3test/build`,
#                which builds it once into a cache outside the repository)
#   FORCE=1      rebuild rootfs and image even if up to date (also the way
#                to pick up Debian security updates)
set -euo pipefail

fleet_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
images_dir="$(cd "$fleet_dir/.." && pwd)"
repo_dir="$(cd "$images_dir/.." && pwd)"

FORCE="${FORCE:-}"
kind=
for a in "$@"; do
	case "$a" in
		--force) FORCE=1 ;;
		-h | --help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
		postgres | haproxy | s3) kind="$a" ;;
		*) echo "usage: $0 [--force] postgres|haproxy|s3" >&2; exit 2 ;;
	esac
done
[[ -n "$kind" ]] || { echo "usage: $0 [--force] postgres|haproxy|s3" >&2; exit 2; }
[[ "$FORCE" == 0 || "$FORCE" == false ]] && FORCE=

recipe="$fleet_dir/$kind"
IMAGE="${IMAGE:-sandboxd/fleet-$kind:dev}"
ROOTFS_REPO="${ROOTFS_REPO:-sandboxd/fleet-$kind-rootfs}"

cleanup=()
trap 'rm -rf "${cleanup[@]}"' EXIT

log() { printf '==> %s: %s\n' "$kind" "$*" >&2; }
die() { printf 'images/fleet/build.sh: %s: ERROR: %s\n' "$kind" "$*" >&2; exit 1; }
sha256() { sha256sum "$1" | cut -d' ' -f1; }
image_label() { # image label -> value ('' if the image or label is missing)
	docker image inspect --format "{{ index .Config.Labels \"$2\" }}" "$1" 2>/dev/null | sed 's/^<no value>$//' || true
}
image_id() { docker image inspect --format '{{.Id}}' "$1" 2>/dev/null || true; }

command -v docker >/dev/null 2>&1 || die "docker CLI not found"
docker version --format '{{.Server.Version}}' >/dev/null 2>&1 ||
	die "cannot talk to the Docker engine (is it running, may $(id -un) use /var/run/docker.sock?)"

# The s3 image carries the weed binary, stripped of its debug information
# (a third of its size); its sha256 is part of the recipe.
weed=
if [[ "$kind" == s3 ]]; then
	if [[ -z "${WEED:-}" ]]; then
		log "building (or finding in its cache) the SeaweedFS binary: go run ./internal/s3test/build"
		WEED="$(cd "$repo_dir" && "${GO:-go}" run ./internal/s3test/build | cut -d' ' -f1)"
	fi
	[[ -x "$WEED" ]] || die "weed binary '$WEED' not found"
	weed="$WEED"
fi

# --- Recipe hashes -----------------------------------------------------------
rootfs_hash="$(
	{
		echo "sandboxd-fleet-rootfs-recipe v1 $kind"
		for f in "$images_dir/base/debian-sources.sh" "$images_dir/base/mkrootfs.sh" "$images_dir/base/customize.sh" \
			"$recipe/packages" "$recipe/customize.sh"; do
			if [[ -f "$f" ]]; then echo "${f#"$images_dir/"} $(sha256 "$f")"; fi
		done
	} | sha256sum | cut -d' ' -f1
)"
rootfs_ref="$ROOTFS_REPO:${rootfs_hash:0:12}"
final_hash="$(
	{
		echo "sandboxd-fleet-image-recipe v1 $kind"
		echo "rootfs $rootfs_hash"
		echo "build.sh $(sha256 "$fleet_dir/build.sh")"
		(cd "$recipe" && find . -type f ! -name '*~' ! -name '.*' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
		if [[ -n "$weed" ]]; then echo "weed $(sha256 "$weed")"; fi
	} | sha256sum | cut -d' ' -f1
)"

up_to_date() {
	[[ -z "$FORCE" && "$(image_label "$IMAGE" sandboxd.recipe)" == "$final_hash" ]] || return 1
	log "$IMAGE is up to date (recipe ${final_hash:0:12}); nothing to do"
}
up_to_date && exit 0

# One image build at a time on this machine: the lock images/build.sh
# takes. A build that waited checks again: the image may be built now.
lock=/tmp/sandboxd-image-build.lock
if command -v flock >/dev/null 2>&1 && { exec 9>>"$lock"; } 2>/dev/null; then
	if ! flock -n 9; then
		log "another image build is running; waiting for it"
		flock 9
		up_to_date && exit 0
	fi
fi

# --- Rootfs ------------------------------------------------------------------
build_rootfs() {
	command -v mmdebstrap >/dev/null 2>&1 ||
		die "mmdebstrap is not installed (make image installs it; or: apt-get install -y mmdebstrap)"
	local tmp id rc hook
	tmp="$(mktemp -d "${TMPDIR:-/tmp}/sandboxd-fleet-$kind.XXXXXX")"
	cleanup+=("$tmp")
	mkdir "$tmp/recipe"
	ln -s "$images_dir/base/mkrootfs.sh" "$tmp/recipe/mkrootfs.sh"
	cp "$recipe/packages" "$tmp/recipe/packages"
	hook="$tmp/recipe/customize.sh"
	{
		echo '#!/usr/bin/env bash'
		echo 'set -euo pipefail'
		printf 'bash %q "$1"\n' "$images_dir/base/customize.sh"
		[[ ! -f "$recipe/customize.sh" ]] || printf 'bash %q "$1"\n' "$recipe/customize.sh"
	} >"$hook"
	chmod 0755 "$hook"

	log "collecting the Debian bookworm entries of the host's apt configuration"
	bash "$images_dir/base/debian-sources.sh" bookworm >"$tmp/debian.sources"

	log "building the rootfs with mmdebstrap ($(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$recipe/packages" | paste -sd' ' -)) and importing it as $rootfs_ref"
	set +e
	id="$(
		bash "$tmp/recipe/mkrootfs.sh" "$tmp/debian.sources" |
			docker import \
				--message "sandboxd fleet $kind rootfs: Debian bookworm (mmdebstrap)" \
				--change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' \
				--change 'ENV LANG=C.UTF-8' \
				--change 'LABEL sandboxd.managed-image=false' \
				--change "LABEL sandboxd.image-kind=fleet-$kind-rootfs" \
				--change "LABEL sandboxd.recipe=$rootfs_hash" \
				-
	)"
	rc=$?
	set -e
	if [[ $rc -ne 0 || -z "$id" ]]; then
		[[ -z "$id" ]] || docker image rm "$id" >/dev/null 2>&1 || true
		die "building the rootfs failed (exit status $rc); see the mmdebstrap output above"
	fi
	docker tag "$id" "$rootfs_ref"
	log "imported $rootfs_ref ($(docker image inspect --format '{{.Size}}' "$rootfs_ref" | numfmt --to=si))"
	local old
	while IFS= read -r old; do
		[[ -n "$old" && "$old" != "$rootfs_ref" ]] || continue
		log "removing stale rootfs tag $old"
		docker image rm "$old" >/dev/null 2>&1 || true
	done < <(docker image ls --filter "label=sandboxd.image-kind=fleet-$kind-rootfs" --format '{{.Repository}}:{{.Tag}}' "$ROOTFS_REPO")
}

if [[ -z "$FORCE" && "$(image_label "$rootfs_ref" sandboxd.recipe)" == "$rootfs_hash" ]]; then
	log "rootfs $rootfs_ref is up to date"
else
	build_rootfs
fi

# --- Final image ---------------------------------------------------------------
if [[ -z "${DOCKER_BUILDKIT:-}" ]]; then
	if docker buildx version >/dev/null 2>&1; then export DOCKER_BUILDKIT=1; else export DOCKER_BUILDKIT=0; fi
fi
ctx="$(mktemp -d "${TMPDIR:-/tmp}/sandboxd-fleet-ctx.XXXXXX")"
cleanup+=("$ctx" "$ctx.iid")
cp -R "$recipe/." "$ctx/"
rm -f "$ctx/packages" "$ctx/customize.sh"
if [[ -n "$weed" ]]; then
	strip -o "$ctx/weed" "$weed" 2>/dev/null || cp "$weed" "$ctx/weed"
	chmod 0755 "$ctx/weed"
fi

log "building $IMAGE from $rootfs_ref (DOCKER_BUILDKIT=$DOCKER_BUILDKIT)"
docker build \
	--network none \
	--iidfile "$ctx.iid" \
	--build-arg "BASE_IMAGE=$rootfs_ref" \
	--build-arg "SANDBOXD_RECIPE=$final_hash" \
	"$ctx"
new_id="$(cat "$ctx.iid")"
[[ -n "$new_id" ]] || die "docker build did not report an image ID"
[[ "$(image_label "$new_id" sandboxd.recipe)" == "$final_hash" ]] || die "built image $new_id lacks the recipe label"

reject() {
	docker image rm "$new_id" >/dev/null 2>&1 || true
	die "$*"
}

# --- Smoke test: the server starts its version, as the image's user, with
# no network; no setuid/setgid file anywhere.
log "smoke-testing ${new_id#sha256:}"
case "$kind" in
	postgres)
		# A throwaway cluster in the container's /tmp, through the entrypoint: initdb, the
		# role and database, a query over TCP with the password.
		smoke='set -e; export PGDATA=/tmp/pgdata POSTGRES_PASSWORD_FILE=/tmp/pw; echo smoke >/tmp/pw
			entrypoint.sh postgres -c listen_addresses=127.0.0.1 >/tmp/log 2>&1 &
			i=0; until pg_isready -q -h 127.0.0.1 -U sandboxd -d sandboxd; do i=$((i+1)); [ $i -lt 100 ] || { cat /tmp/log; exit 1; }; sleep 0.2; done
			PGPASSWORD=smoke psql -X -At -h 127.0.0.1 -U sandboxd -d sandboxd -c "CREATE TABLE t (n int); SELECT current_user || version()" | grep -q "^sandboxdPostgreSQL" || { cat /tmp/log; exit 1; }
			pg_ctl stop -D "$PGDATA" -m fast >/dev/null; echo ok'
		out="$(docker run --rm --network none --entrypoint sh "$new_id" -c "$smoke" 2>&1)" || reject "smoke test failed: $out"
		;;
	haproxy)
		out="$(docker run --rm --network none --entrypoint sh "$new_id" -c '/usr/sbin/haproxy -vv | grep -q "^HAProxy version" && /usr/sbin/haproxy -c -f /etc/haproxy/haproxy.cfg >/dev/null && echo ok' 2>&1)" ||
			reject "smoke test failed: $out"
		;;
	s3)
		out="$(docker run --rm --network none --entrypoint sh "$new_id" -c 'weed version 2>&1 | grep -q "^version" && echo ok' 2>&1)" ||
			reject "smoke test failed: $out"
		;;
esac
[[ "$out" == ok ]] || reject "smoke test printed unexpected output: $out"
setid="$(docker run --rm --network none --user 0:0 --entrypoint find "$new_id" / -xdev -perm /6000 2>&1)" ||
	reject "setuid/setgid scan failed: $setid"
[[ -z "$setid" ]] || reject "image contains setuid/setgid paths: $setid"

old_id="$(image_id "$IMAGE")"
docker tag "$new_id" "$IMAGE"
if [[ -n "$old_id" && "$old_id" != "$new_id" ]]; then
	if docker image rm "$old_id" >/dev/null 2>&1; then
		log "removed previous image ${old_id#sha256:}"
	else
		log "previous image ${old_id#sha256:} is still in use; left in place"
	fi
fi
log "built $IMAGE (recipe ${final_hash:0:12}, $(docker image inspect --format '{{.Size}}' "$IMAGE" | numfmt --to=si))"
