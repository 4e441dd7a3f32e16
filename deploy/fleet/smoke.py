#!/usr/bin/env python3
"""Smoke test of the development fleet, through its balancer.

Run by `make fleet-test` between `make fleet` and `make fleet-down
--strict`; on its own against a running fleet:

    python3 deploy/fleet/smoke.py

Checks, with the keys of deploy/fleet/.secrets/keys.env:
  - execs through http://127.0.0.1:8088 run, and their answers name every
    replica in X-Sandboxd-Replica (round robin);
  - a session keeps its state over calls that reach every replica: the
    calls that reach another replica are forwarded to the session's
    (X-Sandboxd-Forwarded-By), and its answers all name the owner;
  - the captures of those execs are listed and their bodies read back from
    the S3 server (admin key);
  - the audit log holds records of all three replicas, and its one chain
    verifies: `sandboxd audit verify --state` in a replica container,
    against the fleet's PostgreSQL;
  - draining a replica for an upgrade, as docs/fleet.md describes it, under
    a steady stream of execs: out of the balancer (HAProxy's runtime API),
    SIGTERM (docker-compose stop: its session ends with SESSION_ENDED), a
    new container (docker-compose up --force-recreate), back into the
    balancer; not one exec of the stream fails.

Python's standard library only. Exit status 0 when every check passed.
"""

import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
URL = "http://127.0.0.1:" + os.environ.get("FLEET_PORT", "8088")
REPLICAS = {"r1", "r2", "r3"}


def read_keys():
    path = os.path.join(HERE, ".secrets", "keys.env")
    keys = {}
    with open(path) as f:
        for line in f:
            if "=" in line and not line.startswith("#"):
                k, v = line.strip().split("=", 1)
                keys[k] = v
    return keys["SANDBOXD_ADMIN_KEY"], keys["SANDBOXD_AGENT_KEY"]


class Answer:
    def __init__(self, status, headers, body):
        self.status, self.headers, self.raw = status, headers, body

    def json(self):
        return json.loads(self.raw)

    @property
    def replica(self):
        return self.headers.get("X-Sandboxd-Replica", "")


def call(method, path, key, body=None, want=(200,)):
    """One request; waits out 429 BUSY (Retry-After). Fails on another status."""
    data = json.dumps(body).encode() if body is not None else None
    for _ in range(30):
        req = urllib.request.Request(URL + path, data=data, method=method)
        req.add_header("Authorization", "Bearer " + key)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                a = Answer(r.status, r.headers, r.read())
        except urllib.error.HTTPError as e:
            a = Answer(e.code, e.headers, e.read())
        if a.status == 429:
            time.sleep(float(a.headers.get("Retry-After", "1")))
            continue
        if a.status not in want:
            fail(f"{method} {path}: {a.status} from {a.replica or '?'}: {a.raw[:500]!r}")
        return a
    fail(f"{method} {path}: still 429 after 30 tries")


def fleet(*args, timeout=180):
    """deploy/fleet/fleet.sh ARGS; its output, or a failure."""
    p = subprocess.run(["bash", os.path.join(HERE, "fleet.sh"), *args],
                       capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        fail(f"fleet.sh {' '.join(args)}: exit {p.returncode}\n{p.stdout}{p.stderr}")
    return p.stdout


def health(replica):
    cid = fleet("compose", "ps", "-q", replica).strip()
    p = subprocess.run(["docker", "inspect", "--format", "{{.State.Health.Status}}", cid],
                       capture_output=True, text=True)
    return p.stdout.strip()


def drain(admin, agent, victim="r2"):
    """Drain victim for an upgrade while execs keep coming."""
    # A session on the victim, which the drain ends.
    for _ in range(9):
        a = call("POST", "/sessions", agent, {"profile": "default"}, want=(201,))
        if a.replica == victim:
            sid = a.json()["id"]
            break
        call("DELETE", f"/sessions/{a.json()['id']}", agent)
    else:
        fail(f"9 sessions started, none on {victim}")

    stop, results = threading.Event(), []

    def stream():
        i = 0
        while not stop.is_set():
            i += 1
            try:
                a = call("POST", "/exec", agent, {"language": "python", "code": f"print({i})"},
                         want=(200, 400, 409, 500, 502, 503, 504))
            except Exception as e:  # a connection the balancer dropped
                results.append((time.monotonic(), "?", repr(e), b""))
                continue
            ok_ = a.status == 200 and a.json().get("stdout") == f"{i}\n"
            results.append((time.monotonic(), a.replica, "ok" if ok_ else a.status, a.raw[:200]))
            time.sleep(0.05)

    t = threading.Thread(target=stream, daemon=True)
    t.start()
    time.sleep(2)
    t0 = time.monotonic()
    fleet("lb", f"set server replicas/{victim} state maint")
    time.sleep(1)
    t_out = time.monotonic()
    fleet("compose", "stop", victim)  # SIGTERM; waits for the replica to exit
    t_stopped = time.monotonic()
    a = call("POST", f"/sessions/{sid}/exec", agent, {"code": "1"}, want=(409,))
    if a.json()["error"]["code"] != "SESSION_ENDED":
        fail(f"the drained replica's session: {a.raw!r}")
    fleet("compose", "up", "-d", "--no-deps", "--force-recreate", victim)
    for _ in range(120):
        if health(victim) == "healthy":
            break
        time.sleep(0.5)
    else:
        fail(f"{victim} is not healthy after its restart")
    fleet("lb", f"set server replicas/{victim} state ready")
    t_back = time.monotonic()
    time.sleep(6)
    stop.set()
    t.join(timeout=150)

    bad = [r for r in results if r[2] != "ok"]
    if bad:
        fail(f"{len(bad)} of {len(results)} execs failed during the drain: {bad[:3]}")
    during = {r[1] for r in results if t_out <= r[0] <= t_back}
    if victim in during:
        fail(f"{victim} answered while out of the balancer")
    after = {r[1] for r in results if r[0] > t_back + 3}
    if victim not in after:
        fail(f"{victim} answered nothing after it came back ({after})")
    ok(f"drained {victim}: {len(results)} execs, none failed; out of the balancer "
       f"{t_back - t0:.1f} s (SIGTERM to exit {t_stopped - t_out:.1f} s); its session ended with SESSION_ENDED; back in rotation")


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def ok(msg):
    print("ok    " + msg, flush=True)


def main():
    admin, agent = read_keys()
    start = time.monotonic()

    with urllib.request.urlopen(URL + "/healthz", timeout=10) as r:
        if r.status != 200:
            fail(f"/healthz: {r.status}")
    ok(f"{URL}/healthz answers")

    # Execs, spread over the replicas.
    seen = []
    for i in range(9):
        a = call("POST", "/exec", agent, {"language": "python", "code": f"print({i} * 7)"})
        ans = a.json()
        if ans.get("status") != "ok" or ans.get("stdout") != f"{i * 7}\n":
            fail(f"exec {i}: {ans}")
        seen.append(a.replica)
    if set(seen) != REPLICAS:
        fail(f"9 execs were answered by {seen}, not by all of {sorted(REPLICAS)}")
    ok(f"9 execs ran; X-Sandboxd-Replica: {' '.join(seen)}")

    # A session: its state stays, wherever the calls land.
    a = call("POST", "/sessions", agent, {"profile": "default", "idle_timeout_s": 120}, want=(201,))
    sid, owner = a.json()["id"], a.replica
    forwarded_by = []
    for n in range(1, 7):
        a = call("POST", f"/sessions/{sid}/exec", agent, {"code": "n = globals().get('n', 0) + 1\nn"})
        ans = a.json()
        got = [r.get("text") for r in ans.get("results", [])]
        if ans.get("status") != "ok" or got != [str(n)] or ans.get("state_lost"):
            fail(f"session call {n}: {ans}")
        if a.replica != owner:
            fail(f"session call {n} answered by {a.replica}, the session lives on {owner}")
        forwarded_by.append(a.headers.get("X-Sandboxd-Forwarded-By") or "-")
    if all(f == "-" for f in forwarded_by):
        fail(f"no session call was forwarded (all reached {owner})")
    a = call("DELETE", f"/sessions/{sid}", agent)
    if a.json().get("state") != "ended":
        fail(f"DELETE /sessions/{sid}: {a.json()}")
    ok(f"session {sid} on {owner}: 6 calls kept its state; forwarded by: {' '.join(forwarded_by)}")

    # Captures: metadata in PostgreSQL, bodies in the bucket.
    caps = call("GET", "/captures?tenant=dev&kind=exec&limit=20", admin).json()["captures"]
    if len(caps) < 9:
        fail(f"{len(caps)} exec captures listed, want at least 9")
    raw = call("GET", f"/captures/{caps[0]['id']}/raw", admin)
    if not raw.raw:
        fail(f"capture {caps[0]['id']}: empty body")
    ok(f"{len(caps)} exec captures listed; {caps[0]['id']}'s body read back ({len(raw.raw)} bytes)")

    # The audit log: one chain, written by all three replicas.
    recs = call("GET", "/audit?tenant=dev&limit=100", admin).json()["records"]
    writers = {r.get("replica") for r in recs}
    if not REPLICAS <= writers:
        fail(f"audit records written by {sorted(w for w in writers if w)}, want all of {sorted(REPLICAS)}")
    ok(f"{len(recs)} audit records of tenant dev, written by {', '.join(sorted(w for w in writers if w))}")
    verify = subprocess.run(
        ["bash", os.path.join(HERE, "fleet.sh"), "compose", "exec", "-T", "r1",
         "sh", "-c", 'exec sandboxd audit verify --state "$SANDBOXD_STATE"'],
        capture_output=True, text=True, timeout=120)
    if verify.returncode != 0:
        fail(f"sandboxd audit verify: exit {verify.returncode}\n{verify.stdout}{verify.stderr}")
    ok("sandboxd audit verify --state (in r1): " + (verify.stdout + verify.stderr).strip().replace("\n", " | "))

    if os.environ.get("FLEET_SMOKE_DRAIN", "1") != "0":
        drain(admin, agent)

    print(f"PASS  ({time.monotonic() - start:.1f} s)")


if __name__ == "__main__":
    main()
