"""The parts that need no server: the retry policy, idempotency keys,
server-sent events, the schema validator and the result shapes."""

import base64
import json

import httpx
import pytest

import sandboxd
from sandboxd import _http, tools
from sandboxd._http import Request, RetryPolicy, SSEParser, idempotency_key
from sandboxd._schema import validate

ROOT_SCHEMAS = __import__("pathlib").Path(__file__).resolve().parents[3] / "api" / "schemas"


def err(code, status=429, retry_after=None):
    return sandboxd.errors.error_class(code)("m", code=code, status=status, retry_after=retry_after)


def policy(**kw):
    # No randomness: the jitter's upper end.
    return RetryPolicy(rand=lambda: 1.0, **kw)


def test_refusals_that_ran_nothing_are_retried_whatever_the_request():
    p = policy()
    unsafe = Request("POST", "/sessions/s/exec", json={})
    for code in ("BUSY", "RATE_LIMITED", "IN_PROGRESS", "SESSION_BUSY"):
        assert p.after_error(0, unsafe, err(code)) is not None, code


def test_errors_that_cannot_succeed_later_are_never_retried():
    p = policy()
    safe = Request("POST", "/exec", json={}, replay_safe=True)
    for code, status in (("VALIDATION", 400), ("BUDGET_EXCEEDED", 429), ("LOOP_DETECTED", 409), ("FROZEN", 503),
                         ("AUDIT_UNAVAILABLE", 503), ("AUTH", 401), ("EGRESS_DENIED", 403), ("INTERNAL", 500)):
        assert p.after_error(0, safe, err(code, status)) is None, code


def test_unavailable_is_retried_only_when_replay_safe():
    p = policy()
    assert p.after_error(0, Request("POST", "/exec", json={}, replay_safe=True), err("UNAVAILABLE", 503)) is not None
    assert p.after_error(0, Request("POST", "/sessions/s/exec", json={}), err("UNAVAILABLE", 503)) is None
    proxy = sandboxd.APIError("bad gateway", status=502)
    assert p.after_error(0, Request("GET", "/x", replay_safe=True), proxy) is not None
    assert p.after_error(0, Request("POST", "/sessions", json={}), proxy) is None


def test_retry_after_is_honoured_and_a_long_one_is_left_to_the_caller():
    p = policy(max_retry_after=30)
    req = Request("POST", "/exec", json={}, replay_safe=True)
    d = p.after_error(0, req, err("RATE_LIMITED", retry_after=5))
    assert 5 <= d <= 5.6
    assert p.after_error(0, req, err("RATE_LIMITED", retry_after=31)) is None


def test_backoff_grows_is_capped_and_has_jitter():
    p = policy(backoff_base=0.25, backoff_max=2)
    waits = [p.backoff(a) for a in range(6)]
    assert waits == [0.25, 0.5, 1.0, 2.0, 2.0, 2.0]
    low = RetryPolicy(rand=lambda: 0.0, backoff_base=0.25, backoff_max=2)
    assert [low.backoff(a) for a in range(3)] == [0.125, 0.25, 0.5]


def test_retries_stop_after_max_retries():
    p = policy(max_retries=2)
    req = Request("POST", "/exec", json={}, replay_safe=True)
    assert p.after_error(1, req, err("BUSY")) is not None
    assert p.after_error(2, req, err("BUSY")) is None


def test_connection_errors_after_sending_are_retried_only_when_replay_safe():
    p = policy()
    unsafe, safe = Request("POST", "/sessions/s/exec", json={}), Request("POST", "/exec", json={}, replay_safe=True)
    assert p.after_transport_error(0, unsafe, httpx.ConnectError("refused")) is not None
    assert p.after_transport_error(0, unsafe, httpx.RemoteProtocolError("dropped")) is None
    assert p.after_transport_error(0, safe, httpx.RemoteProtocolError("dropped")) is not None
    assert p.after_transport_error(0, safe, httpx.ReadTimeout("slow")) is None


def test_idempotency_key_is_derived_from_run_id_and_step():
    a = idempotency_key("exec", run_id="run-7", step=3)
    assert a == idempotency_key("exec", run_id="run-7", step=3)
    assert a != idempotency_key("exec", run_id="run-7", step=4)
    assert a != idempotency_key("fetch", run_id="run-7", step=3)
    assert a != idempotency_key("exec", run_id="run-8", step=3)
    assert len(a) <= 255 and all(0x21 <= ord(c) <= 0x7E for c in a)
    assert idempotency_key("exec") != idempotency_key("exec")
    assert idempotency_key("exec", key="mine-1") == "mine-1"
    for bad in (dict(run_id="r"), dict(step=1), dict(key="has space"), dict(key=""), dict(key="k", run_id="r", step=1)):
        with pytest.raises(ValueError):
            idempotency_key("exec", **bad)


def test_a_request_body_is_serialised_once():
    req = Request("POST", "/exec", json={"code": "print('é')"})
    assert req.body == '{"code":"print(\'é\')"}'.encode()
    assert req.headers["Content-Type"] == "application/json"


def test_error_from_response_types_the_code_and_reads_retry_after():
    e = _http.error_from_response(429, httpx.Headers({"Retry-After": "7", "X-Request-Id": "r1"}),
                                  b'{"error":{"code":"BUDGET_EXCEEDED","message":"spent","budget":"session.max_execs","limit":1,"used":1}}')
    assert isinstance(e, sandboxd.BudgetExceeded)
    assert (e.status, e.retry_after, e.budget, e.limit, e.used, e.request_id) == (429, 7.0, "session.max_execs", 1.0, 1.0, "r1")
    e = _http.error_from_response(503, httpx.Headers(), b"<html>proxy down</html>")
    assert type(e) is sandboxd.APIError and e.status == 503 and "proxy down" in e.message
    e = _http.error_from_response(400, httpx.Headers(), b'{"error":{"code":"NEW_CODE","message":"m"}}')
    assert type(e) is sandboxd.APIError and e.code == "NEW_CODE"


def test_sse_parser():
    p = SSEParser()
    lines = [": comment", "event: stdout", 'data: {"text":', 'data: "a"}', "", "event: result", "data:{}", ""]
    events = [ev for ev in map(p.feed, lines) if ev is not None]
    assert events == [("stdout", '{"text":\n"a"}'), ("result", "{}")]
    p.feed("data: tail")
    assert p.finish() == ("message", "tail")


@pytest.fixture(scope="module")
def exec_schema():
    schema = json.loads((ROOT_SCHEMAS / "exec_request.json").read_text())
    del schema["properties"]["async"]  # run_python's schema
    return schema


def test_schema_validator_words_refusals_as_the_api(exec_schema):
    ok = {"language": "python", "code": "print(1)", "limits": {"cpus": 0.5}, "env": {"A_1": "x"}}
    assert validate(exec_schema, ok) is None
    assert validate(exec_schema, dict(ok, stdin=None)) is None  # null is absent
    cases = [
        (dict(ok, limits={"cpus": 0}), "limits.cpus", "limits.cpus is 0, below the minimum of 0.01. CPUs, as a fraction"),
        (dict(ok, env={"lower": "x"}), "env", 'env has the name "lower", which is not allowed: names must match'),
        (dict(ok, files=[{"path": ""}]), "files[0].path", "files[0].path must not be empty."),
        (dict(ok, limits={"timeout_ms": 1.5}), "limits.timeout_ms", "limits.timeout_ms must be integer, not number"),
        ({"language": "python"}, "code", "code is required. The complete Python 3 program"),
        (dict(ok, language="ruby"), "language", 'language is "ruby"; allowed: "python"'),
        (dict(ok, datasets=["a", "a"]), "datasets", "datasets has the same value twice (items 0 and 1)"),
    ]
    for inst, field, msg in cases:
        e = validate(exec_schema, inst)
        assert e is not None and e.field == field and e.message.startswith(msg), (inst, e)
    # An unknown field is reported before what it explains.
    e = validate(exec_schema, {"language": "python", "Code": "x", "async": True})
    assert e.field == "Code" and e.message.startswith('unknown field "Code"; the fields allowed there are: language, code, stdin')


def test_tool_arguments_parse_strictly():
    assert tools.parse_arguments('{"code": "x"}') == {"code": "x"}
    assert tools.parse_arguments({"code": "x"}) == {"code": "x"}
    assert tools.parse_arguments("") == {}
    for bad in ('{"code": "x", "CODE": "y"}', "[1]", "{nope"):
        with pytest.raises(tools.ArgumentsError):
            tools.parse_arguments(bad)


def test_result_shapes():
    png = b"\x89PNG\r\n\x1a\nrest"
    out = tools.ToolOutput("hello", images=[png], structured={"id": "ex_1"})
    b64 = base64.b64encode(png).decode()
    assert out.shape("openai", "c1") == {"role": "tool", "tool_call_id": "c1", "content": "hello"}
    assert out.shape("openai-responses", "c1") == {"type": "function_call_output", "call_id": "c1", "output": [
        {"type": "input_text", "text": "hello"}, {"type": "input_image", "image_url": "data:image/png;base64," + b64}]}
    assert tools.ToolOutput("t").shape("openai-responses", "c1")["output"] == "t"
    assert out.shape("anthropic", "tu_1") == {"type": "tool_result", "tool_use_id": "tu_1", "is_error": False, "content": [
        {"type": "text", "text": "hello"}, {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64}}]}
    assert out.shape("mcp", None) == {"content": [{"type": "text", "text": "hello"}, {"type": "image", "data": b64, "mimeType": "image/png"}],
                                      "isError": False, "structuredContent": {"id": "ex_1"}}
    with pytest.raises(ValueError):
        out.shape("anthropic", None)
    with pytest.raises(ValueError):
        out.shape("langchain", "c1")


def test_refusal_text_says_what_to_do():
    out = tools.refusal("RATE_LIMITED", None, "over the rate", 3)
    assert out.is_error and out.text == "Refused: RATE_LIMITED: over the rate. Call again after 3 s with the same arguments."
    out = tools.refusal("VALIDATION", "limits.cpus", "limits.cpus is 0.")
    assert out.text == "Refused: VALIDATION (field limits.cpus): limits.cpus is 0. Fix the arguments and call again."


def test_fetch_text_requires_one_envelope_with_its_nonce():
    content = '<untrusted-content source="https://x/" nonce="n1">\npage\n</untrusted-content nonce="n1">'
    good = {"untrusted": True, "nonce": "n1", "content": content, "status": 200}
    out = tools.render_fetch(good)
    assert not out.is_error and out.text.endswith(content) and "nonce n1" in out.text
    for bad in (dict(good, nonce="n2"), dict(good, untrusted=False), dict(good, content=content + '</untrusted-content nonce="n1">')):
        assert tools.render_fetch(bad).is_error


def _scripted(answers):
    """A mock transport answering from a list, recording what it got."""
    seen = []

    def handler(request):
        seen.append((request, __import__("time").monotonic()))
        status, headers, body = answers[min(len(seen), len(answers)) - 1]
        return httpx.Response(status, headers=headers, content=json.dumps(body).encode())

    return seen, handler


RESULT = {"id": "ex_1", "status": "ok", "exit_code": 0, "stdout": "1\n"}
BUSY = (429, {"Retry-After": "1"}, {"error": {"code": "BUSY", "message": "every run slot is taken"}})


def test_the_driver_waits_retry_after_and_keeps_the_key():
    seen, handler = _scripted([BUSY, (200, {}, RESULT)])
    with sandboxd.Client("http://sbx.test", "k", transport=httpx.MockTransport(handler)) as c:
        r = c.run("print(1)")
    assert r.stdout == "1\n" and len(seen) == 2
    assert seen[1][1] - seen[0][1] >= 1.0
    keys = {req.headers["Idempotency-Key"] for req, _ in seen}
    assert len(keys) == 1 and seen[0][0].headers["Authorization"] == "Bearer k"


def test_the_async_driver_retries_the_same_way():
    import asyncio

    seen, handler = _scripted([BUSY, (200, {}, RESULT)])

    async def main():
        async with sandboxd.AsyncClient("http://sbx.test", "k", transport=httpx.MockTransport(handler)) as c:
            return await c.run("print(1)", run_id="r", step=2)

    assert asyncio.run(main()).stdout == "1\n"
    assert [req.headers["Idempotency-Key"] for req, _ in seen] == [idempotency_key("exec", run_id="r", step=2)] * 2
    assert seen[1][1] - seen[0][1] >= 1.0


def test_a_stream_refused_before_output_is_retried():
    events = b'event: stdout\ndata: {"text":"1\\n"}\n\nevent: result\ndata: ' + json.dumps(RESULT).encode() + b"\n\n"
    calls = []

    def handler(request):
        calls.append(request)
        if len(calls) == 1:
            return httpx.Response(429, headers={"Retry-After": "0"}, json=BUSY[2])
        return httpx.Response(200, headers={"Content-Type": "text/event-stream"}, content=events)

    out = []
    with sandboxd.Client("http://sbx.test", "k", transport=httpx.MockTransport(handler)) as c:
        r = c.run("print(1)", on_stdout=out.append)
    assert r.stdout == "1\n" and out == ["1\n"] and len(calls) == 2
    assert all(req.headers["Accept"] == "text/event-stream" and "Idempotency-Key" not in req.headers for req in calls)


def test_an_error_event_after_output_is_raised():
    events = (b'event: stdout\ndata: {"text":"partial"}\n\n'
              b'event: error\ndata: {"error":{"code":"AUDIT_UNAVAILABLE","message":"the audit log failed"}}\n\n')

    def handler(request):
        return httpx.Response(200, headers={"Content-Type": "text/event-stream"}, content=events)

    with sandboxd.Client("http://sbx.test", "k", transport=httpx.MockTransport(handler)) as c:
        with pytest.raises(sandboxd.AuditUnavailable):
            c.run("print(1)", on_stdout=lambda t: None)
