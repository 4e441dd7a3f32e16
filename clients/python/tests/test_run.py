"""Runs against the real sandboxd: results, streaming, async runs, typed
errors and retries."""

import hashlib
import secrets
import time

import pytest

import sandboxd
from proxy import DroppingProxy


def test_run_result_with_files_stdin_env_and_limits(client):
    code = (
        "import os, sys\n"
        "data = open('in/data.txt').read()\n"
        "os.makedirs('out', exist_ok=True)\n"
        "open('out/result.bin', 'wb').write(bytes(range(4)) + data.encode())\n"
        "print(sys.stdin.read().upper(), os.environ['GREETING'])\n"
        "print('warned', file=sys.stderr)\n"
        "sys.exit(3)\n"
    )
    r = client.run(code, files={"in/data.txt": "abc"}, stdin="hi", env={"GREETING": "hello"},
                   limits=sandboxd.Limits(timeout_ms=5000, memory_mb=128), profile="default")
    assert (r.status, r.exit_code, r.ok) == ("error", 3, False)
    assert r.stdout == "HI hello\n" and r.stderr == "warned\n"
    assert r.file("result.bin").content == b"\x00\x01\x02\x03abc"
    assert r.limits.timeout_ms == 5000 and r.limits.memory_mb == 128
    assert r.profile.name == "default" and len(r.profile.version) == 64
    assert r.id.startswith("ex_") and r.request_id and not r.replayed
    assert r.usage.user_cpu_ms + r.usage.sys_cpu_ms >= 0 and r.duration_ms > 0
    with pytest.raises(KeyError):
        r.file("nope")


def test_truncation_redaction_and_timeout(client):
    r = client.run("print('x' * 5000)", limits={"output_bytes": 100})
    assert r.stdout_truncated and r.truncated and len(r.stdout) <= 100
    r = client.run("print('token: ghp_' + ('aB3dE6gH9jK2' * 3)[:36])")
    assert r.stdout == "token: [REDACTED:github_pat]\n" and r.redactions == {"github_pat": 1}, r
    r = client.run("import time\ntime.sleep(5)", limits={"timeout_ms": 300})
    assert r.status == "timeout" and r.message


def test_streaming_delivers_output_while_the_code_runs(client):
    seen = []
    code = "import sys, time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(0.5)\nprint('done', file=sys.stderr)\n"
    r = client.run(code, on_stdout=lambda t: seen.append(("out", t, time.monotonic())),
                   on_stderr=lambda t: seen.append(("err", t, time.monotonic())))
    end = time.monotonic()
    assert r.status == "ok" and r.stdout == "0\n1\n2\n"
    out = [s for s in seen if s[0] == "out"]
    assert "".join(t for _, t, _ in out) == "0\n1\n2\n"
    assert len(out) >= 2, seen
    assert out[0][2] < end - 0.7, "the first output came only at the end"
    assert "".join(t for k, t, _ in seen if k == "err") == "done\n"
    with pytest.raises(ValueError):
        client.run("print(1)", on_stdout=print, run_id="r", step=1)


def test_submit_wait_and_cancel(client):
    ex = client.submit("print(sum(range(10)))")
    assert ex.id.startswith("ex_") and ex.last_state.status == "queued"
    r = ex.wait(timeout=60)
    assert r.status == "ok" and r.stdout == "45\n" and r.id == ex.id
    assert client.execution(ex.id).state().result.stdout == "45\n"

    slow = client.submit("import time\ntime.sleep(30)")
    with pytest.raises(TimeoutError):
        slow.wait(timeout=0.3)
    state = slow.cancel()
    assert state.status == "killed", state
    assert slow.wait(timeout=30).status == "killed"
    with pytest.raises(sandboxd.NotFound):
        client.get_exec("ex_" + "0" * 20)


def test_validation_error_names_the_field_and_is_never_retried(server, counting):
    with server.client(transport=counting) as c:
        with pytest.raises(sandboxd.ValidationError) as ei:
            c.run("print(1)", limits={"memory_mb": 999999})
    e = ei.value
    assert (e.status, e.code, e.field) == (400, "VALIDATION", "limits.memory_mb")
    assert "ceiling" in e.message and e.request_id
    assert len(counting.requests) == 1


def test_loop_detected(client):
    session = "loop-" + secrets.token_hex(4)
    for _ in range(2):
        assert client.run("print('same')", agent_session=session).status == "ok"
    with pytest.raises(sandboxd.LoopDetected) as ei:
        client.run("print('same')", agent_session=session)
    assert ei.value.status == 409


def test_budget_exceeded_is_not_retried(server, counting):
    with server.client(server.limited_key, transport=counting, agent_session="one-exec") as c:
        assert c.run("print(1)").ok
        with pytest.raises(sandboxd.BudgetExceeded) as ei:
            c.run("print(2)")
        assert ei.value.budget == "session.max_execs" and ei.value.limit == 1
        assert len(counting.requests) == 2
        report = c.usage(session="one-exec")
        assert report.session == "one-exec" and report.used.execs == 1
        assert report.budget("session.max_execs").limit == 1


def test_rate_limited_carries_retry_after(server, counting):
    with server.client(server.limited_key, transport=counting) as c:
        assert c.fetch(server.page_url).status == 200  # the one token of the minute
        with pytest.raises(sandboxd.RateLimited) as ei:
            c.fetch(server.page_url)
    e = ei.value
    assert e.budget == "tenant.fetch_per_minute" and e.retry_after is not None and e.retry_after > 30
    # Longer than the policy's max_retry_after (30 s): left to the caller, not slept.
    assert len(counting.requests) == 2


def test_unavailable_is_retried_with_the_same_key(server, counting):
    policy = sandboxd.RetryPolicy(max_retries=2, backoff_base=0.05)
    with server.client(transport=counting, retry=policy) as c:
        with pytest.raises(sandboxd.Unavailable) as ei:
            c.run("print(1)", profile="missing", run_id="run-unavailable", step=1)
    assert ei.value.status == 503 and "image" in ei.value.message
    keys = [r.headers["Idempotency-Key"] for r in counting.requests]
    assert len(keys) == 3 and len(set(keys)) == 1
    assert keys[0] == sandboxd._http.idempotency_key("exec", run_id="run-unavailable", step=1)


def test_dropped_connection_is_retried_with_the_same_key_and_runs_once(server, reviewer):
    proxy = DroppingProxy(("127.0.0.1", int(server.url.rsplit(":", 1)[1])), drop=1)
    token = secrets.token_hex(8)
    code = f"import time\ntime.sleep(1)\nprint('{token}')\n"
    try:
        with sandboxd.Client(proxy.url, server.agent_key, retry=sandboxd.RetryPolicy(backoff_base=0.05)) as c:
            r = c.run(code)
    finally:
        proxy.close()
    assert r.status == "ok" and r.stdout == token + "\n"
    assert r.replayed, "the retry's answer is the stored answer of the first request"
    assert len(proxy.heads) == 2
    k0, k1 = proxy.header(0, "Idempotency-Key"), proxy.header(1, "Idempotency-Key")
    assert k0 and k0 == k1
    records = reviewer.audit(kind="exec", code_sha256=hashlib.sha256(code.encode()).hexdigest()).records
    assert len(records) == 1, records
    assert records[0].subject == r.id


def test_a_dropped_session_call_is_not_sent_again(server):
    with server.client() as c, c.session() as s:
        proxy = DroppingProxy(("127.0.0.1", int(server.url.rsplit(":", 1)[1])), drop=1)
        try:
            with sandboxd.Client(proxy.url, server.agent_key) as pc:
                with pytest.raises(sandboxd.ConnectionFailed) as ei:
                    pc._drive(pc._core.op_session_run(s.id, "x = 1", stdin=None, files=None, timeout_ms=None,
                                                      agent_session=None, timeout=None))
        finally:
            proxy.close()
        assert ei.value.attempts == 1 and len(proxy.heads) == 1


def test_auth_and_health(server):
    with server.client("sbx_wrong") as c:
        with pytest.raises(sandboxd.AuthError) as ei:
            c.run("print(1)")
        assert ei.value.status == 401
        assert c.health() is True
        ready = c.ready()
    assert ready.checks and any(ch.name == "engine" and ch.ok for ch in ready.checks)
    # The missing image of the retry tests' profile leaves the service ready
    # and that profile unavailable, its check failed and optional.
    assert ready.ready and "missing" in ready.unavailable_profiles, ready
    assert any("no-such-image" in ch.name and not ch.ok and ch.optional for ch in ready.checks), ready
    with sandboxd.Client("http://127.0.0.1:1", "k", retry=sandboxd.RetryPolicy(max_retries=1, backoff_base=0.01)) as c:
        with pytest.raises(sandboxd.ConnectionFailed) as ei:
            c.run("print(1)", idempotency_key="k-1")
    assert ei.value.attempts == 2 and ei.value.idempotency_key == "k-1"
