#!/usr/bin/env bash
# Build the images of the profiles other than the default (the data image,
# then the browser image) in the background, for `make run`: the service
# starts serving the default profile while they build, and each build
# reports its progress to DIR/<image>.json (images/status.sh), which
# sandboxd repeats in the 503 UNAVAILABLE answers and /readyz checks of the
# profiles that wait for it. Each build's output goes to DIR/<image>.log.
# Builds that are up to date finish at once; a build already running (an
# earlier `make run`) is waited for, not repeated (images/build.sh's lock).
#
# Usage: scripts/images-background.sh DIR MAKE_TARGET=IMAGE_REF...
#   e.g. scripts/images-background.sh data/image-builds image-data=sandboxd/python-data:3.11
# Runs `make MAKE_TARGET` for each, one after another, detached from the
# caller's terminal and process group (it goes on when the service stops).
set -euo pipefail
worker=
if [[ "${1:-}" == --worker ]]; then worker=1; shift; fi
dir="${1:?usage: images-background.sh DIR TARGET=IMAGE...}"
shift
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
repo_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# shellcheck source=images/status.sh
source "$repo_dir/images/status.sh" # status_file_name, build_status

if [[ -n "$worker" ]]; then
	for spec in "$@"; do
		target="${spec%%=*}" image="${spec#*=}" name="$(status_file_name "$image")"; name="${name%.json}"
		if STATUS_FILE="$dir/$name.json" STATUS_LOG="$dir/$name.log" \
			make -C "$repo_dir" --no-print-directory "$target" >"$dir/$name.log" 2>&1; then
			echo "$(date -u +%H:%M:%S) $image is ready" >>"$dir/background.log"
		else
			echo "$(date -u +%H:%M:%S) building $image failed; see $dir/$name.log" >>"$dir/background.log"
			# make failed before the build script could say so (a
			# compile error, say): the status must not stay "building".
			if grep -q '"state":"building"' "$dir/$name.json" 2>/dev/null; then
				(
					STATUS_FILE="$dir/$name.json" STATUS_IMAGE="$image" STATUS_LOG="$dir/$name.log" status_step="make $target"
					build_status failed
				)
			fi
		fi
	done
	exit 0
fi

for spec in "$@"; do
	image="${spec#*=}" name="$(status_file_name "$image")"; name="${name%.json}"
	# Written at once, so that a request that comes before the build starts
	# already hears that the image is on its way.
	(
		STATUS_FILE="$dir/$name.json" STATUS_IMAGE="$image" STATUS_LOG="$dir/$name.log"
		build_status building 0 3 "waiting for another image build to finish"
	)
	echo "==> building $image in the background; its profiles answer 503 until it is ready (progress: $dir/$name.log)"
done
# A session of its own: an interrupt of `make run` stops the service, not
# the builds, which the next `make run` then finds done.
setsid "${BASH_SOURCE[0]}" --worker "$dir" "$@" </dev/null >/dev/null 2>&1 &
