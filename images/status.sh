# Sourced by the image build scripts (images/build.sh, images/browser/build.sh).
# With STATUS_FILE set, build_status writes how far the build of STATUS_IMAGE
# is, as JSON that sandboxd reads (internal/imagebuild) to tell callers of a
# profile whose image is not there yet; `make run` sets it for the images it
# builds in the background. Without STATUS_FILE it does nothing.
#
#   build_status STATE STEP_NUMBER STEPS STEP   STATE: building, failed, done
#   build_status_trap                           on EXIT: done, or failed at the last step
#   status_file_name IMAGE                      the status file's name (imagebuild.FileName)

status_started="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
status_step="" status_n=0 status_steps=0

json_string() { # string -> JSON string literal (the inputs are ours: escape \ and ")
	local s="${1//\\/\\\\}"
	printf '"%s"' "${s//\"/\\\"}"
}

build_status() {
	local state="$1"
	if [[ "$state" == building ]]; then
		status_n="$2" status_steps="$3" status_step="$4"
	fi
	[[ -n "${STATUS_FILE:-}" ]] || return 0
	local tmp="$STATUS_FILE.tmp.$$"
	printf '{"image":%s,"state":%s,"step":%s,"step_number":%d,"steps":%d,"started":"%s","updated":"%s","log":%s}\n' \
		"$(json_string "$STATUS_IMAGE")" "$(json_string "$state")" "$(json_string "$status_step")" \
		"$status_n" "$status_steps" "$status_started" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
		"$(json_string "${STATUS_LOG:-}")" >"$tmp" 2>/dev/null && mv -f "$tmp" "$STATUS_FILE" || true
}

build_status_trap() {
	local rc=$?
	if [[ $rc -eq 0 ]]; then build_status done; else build_status failed; fi
	return $rc
}

status_file_name() { printf '%s.json' "$(printf '%s' "$1" | tr -c 'A-Za-z0-9._-' '_')"; }
