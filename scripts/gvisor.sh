#!/usr/bin/env bash
# Install gVisor and register it with the Docker Engine as the runtime
# "runsc", which exec profiles name with `runtime: runsc` (profiles/exec/
# strict.yaml). Called by `make gvisor`; run it on the engine's host, as root
# or with sudo.
#
#   1. Installs Debian's runsc package from the host's apt sources when the
#      runsc command is missing.
#   2. Merges a "runtimes" entry into the engine's daemon.json with python3:
#      every other key, and every other runtime, is kept as it is; the file
#      is replaced atomically and the previous one kept as daemon.json.bak.
#      The entry runs runsc with
#        --network=none       no network stack in the sandbox, whatever the
#                             container config says (sandboxes have none)
#        --oci-seccomp        enforce the container's seccomp filter inside
#                             gVisor too (runsc ignores it without this flag;
#                             this runsc ignores errnoRet, hence
#                             profiles/seccomp/gvisor.json)
#        --cpu-num-from-quota size the sandbox by the container's CPU quota
#                             (at least 2 CPUs) rather than the host's CPUs
#        --platform=ptrace    how gVisor intercepts syscalls (GVISOR_PLATFORM)
#   3. Only when the file changed: SIGHUP to dockerd, which reloads its
#      runtimes without restarting anything, then waits until `docker info`
#      lists runsc. On failure the previous daemon.json is put back.
#   4. Smoke test: runs `python3 -c 'print(1)'` in the sandbox image ($IMAGE)
#      under runsc and checks that the kernel it sees is gVisor's, not the
#      host's. Skipped (with a note) when the image is not built yet.
#
# Idempotent: a second run installs nothing, leaves daemon.json untouched and
# does not signal the engine.
#
# Debian bookworm's runsc (0.0~20221219) has the ptrace and kvm platforms
# (systrap came in 2023). ptrace works anywhere, including VMs without
# nested virtualisation; kvm is faster but needs a usable /dev/kvm.
#
# Environment:
#   DOCKER_DAEMON_JSON  the engine's config file (default /etc/docker/daemon.json)
#   GVISOR_PLATFORM     ptrace (default) or kvm
#   IMAGE               image for the smoke test (default sandboxd/python:3.11)
set -euo pipefail

DOCKER_DAEMON_JSON="${DOCKER_DAEMON_JSON:-/etc/docker/daemon.json}"
GVISOR_PLATFORM="${GVISOR_PLATFORM:-ptrace}"
IMAGE="${IMAGE:-sandboxd/python:3.11}"
RUNTIME=runsc

log() { printf '==> gvisor: %s\n' "$*" >&2; }
die() { printf 'gvisor.sh: ERROR: %s\n' "$*" >&2; exit 1; }

case "${1:-}" in
	"") ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "usage: $0" >&2; exit 2 ;;
esac

case "$GVISOR_PLATFORM" in
	ptrace | kvm) ;;
	*) die "GVISOR_PLATFORM=$GVISOR_PLATFORM: this runsc supports ptrace and kvm" ;;
esac

as_root() {
	if [[ $(id -u) -eq 0 ]]; then
		"$@"
	elif command -v sudo >/dev/null; then
		sudo "$@"
	else
		die "need root (or sudo) for: $*"
	fi
}

command -v docker >/dev/null || die "the docker command is missing"
docker info >/dev/null 2>&1 || die "the Docker Engine does not answer; start it first"
command -v python3 >/dev/null || die "python3 is needed to edit $DOCKER_DAEMON_JSON"


# --- 1. runsc --------------------------------------------------------------
if ! command -v runsc >/dev/null; then
	log "installing Debian's runsc package"
	export DEBIAN_FRONTEND=noninteractive
	if ! as_root apt-get install -y -q runsc; then
		as_root apt-get update -q
		as_root apt-get install -y -q runsc
	fi
fi
runsc_path="$(command -v runsc)"
runsc_path="$(readlink -f "$runsc_path")"
log "$("$runsc_path" --version | head -n1) at $runsc_path"

# --- 2. daemon.json --------------------------------------------------------
args_json="[\"--network=none\", \"--oci-seccomp\", \"--cpu-num-from-quota\", \"--platform=$GVISOR_PLATFORM\"]"

# merge CONFIG NAME PATH ARGS_JSON: prints "unchanged" or "changed"; never
# writes a file it could not parse, and never touches other keys.
merge_py='
import json, os, sys, tempfile

conf_path, name, rt_path, args = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
want = {"path": rt_path, "runtimeArgs": args}

def no_dups(pairs):
    keys = [k for k, _ in pairs]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    if dup:
        raise ValueError("repeated key(s) %s" % ", ".join(dup))
    return dict(pairs)

try:
    with open(conf_path) as f:
        text = f.read()
    existed = True
except FileNotFoundError:
    text, existed = "", False
try:
    conf = json.loads(text, object_pairs_hook=no_dups) if text.strip() else {}
except ValueError as e:
    sys.exit("%s is not valid JSON (%s); fix it by hand, nothing was changed" % (conf_path, e))
if not isinstance(conf, dict):
    sys.exit("%s does not hold a JSON object; nothing was changed" % conf_path)
runtimes = conf.get("runtimes", {})
if not isinstance(runtimes, dict):
    sys.exit("%s: \"runtimes\" is not an object; nothing was changed" % conf_path)
if runtimes.get(name) == want:
    print("unchanged")
    sys.exit(0)
if name in runtimes:
    print("replacing the existing %r runtime entry %s" % (name, json.dumps(runtimes[name])), file=sys.stderr)
runtimes[name] = want
conf["runtimes"] = runtimes

d = os.path.dirname(os.path.abspath(conf_path))
os.makedirs(d, exist_ok=True)
mode = os.stat(conf_path).st_mode & 0o7777 if existed else 0o644
fd, tmp = tempfile.mkstemp(prefix=".daemon.json.", dir=d)
try:
    with os.fdopen(fd, "w") as f:
        json.dump(conf, f, indent=2)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, mode)
    if existed:
        with open(conf_path, "rb") as src, open(conf_path + ".bak", "wb") as dst:
            dst.write(src.read())
        os.chmod(conf_path + ".bak", mode)
    os.replace(tmp, conf_path)
except BaseException:
    os.unlink(tmp)
    raise
print("changed")
'
conf_existed=; [[ -e "$DOCKER_DAEMON_JSON" ]] && conf_existed=1
state="$(as_root python3 -c "$merge_py" "$DOCKER_DAEMON_JSON" "$RUNTIME" "$runsc_path" "$args_json")" ||
	die "could not update $DOCKER_DAEMON_JSON"

# --- 3. reload ---------------------------------------------------------------
# engine_has_runtime: the engine lists $RUNTIME with exactly the path and
# arguments wanted (so a reload that did not happen yet is not mistaken for
# one that did).
engine_has_runtime() {
	local got
	got="$(docker info --format "{{json (index .Runtimes \"$RUNTIME\")}}" 2>/dev/null)" || return 1
	python3 -c '
import json, sys
got = json.loads(sys.argv[1] or "null") or {}
sys.exit(0 if got.get("path") == sys.argv[2] and got.get("runtimeArgs") == json.loads(sys.argv[3]) else 1)
' "$got" "$runsc_path" "$args_json"
}

dockerd_pid() {
	local pid=""
	[[ -r /var/run/docker.pid ]] && pid="$(cat /var/run/docker.pid 2>/dev/null || true)"
	if [[ -z "$pid" ]] || ! as_root kill -0 "$pid" 2>/dev/null; then
		pid="$(pidof dockerd 2>/dev/null | awk '{print $1}' || true)"
	fi
	[[ -n "$pid" ]] || die "cannot find dockerd's pid (is the engine on this host?)"
	echo "$pid"
}

wait_runtime() {
	for _ in $(seq 50); do
		engine_has_runtime && return 0
		sleep 0.2
	done
	return 1
}

if [[ "$state" == unchanged ]]; then
	log "$DOCKER_DAEMON_JSON already registers $RUNTIME as wanted; not reloading the engine"
	engine_has_runtime || die "$DOCKER_DAEMON_JSON has the wanted $RUNTIME entry but the engine does not list it so: was dockerd started with another --config-file, or did a reload fail? (journalctl -u docker)"
else
	log "registered $RUNTIME in $DOCKER_DAEMON_JSON (previous file: $DOCKER_DAEMON_JSON.bak); reloading dockerd"
	as_root kill -HUP "$(dockerd_pid)"
	if ! wait_runtime; then
		log "the engine did not pick up $RUNTIME; restoring the previous $DOCKER_DAEMON_JSON"
		if [[ -n "$conf_existed" ]]; then
			as_root cp -p "$DOCKER_DAEMON_JSON.bak" "$DOCKER_DAEMON_JSON"
		else
			as_root rm -f "$DOCKER_DAEMON_JSON"
		fi
		as_root kill -HUP "$(dockerd_pid)" || true
		die "dockerd did not list $RUNTIME after the reload; see its log (journalctl -u docker)"
	fi
fi
log "engine runtimes: $(docker info --format '{{range $name, $_ := .Runtimes}}{{$name}} {{end}}')"

# --- 4. smoke test ---------------------------------------------------------
if ! docker image inspect "$IMAGE" >/dev/null 2>&1; then
	log "$IMAGE is not built yet (make image); skipped the smoke test"
	exit 0
fi
host_kernel="$(uname -r)"
if ! out="$(timeout 120 docker run --rm --runtime="$RUNTIME" --network=none --entrypoint= "$IMAGE" \
	python3 -c 'import platform; print(1); print(platform.release())' 2>&1)"; then
	die "runsc is registered but cannot run a container here:
$out"
fi
if [[ "$(sed -n 1p <<<"$out")" != 1 ]]; then
	die "unexpected output from a runsc container: $out"
fi
sandbox_kernel="$(sed -n 2p <<<"$out")"
if [[ "$sandbox_kernel" == "$host_kernel" ]]; then
	die "a container with --runtime=$RUNTIME sees the host kernel $host_kernel: $RUNTIME is not gVisor"
fi
log "ok: python3 ran under gVisor (its kernel says $sandbox_kernel; the host's is $host_kernel)"
