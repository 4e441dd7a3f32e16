"""Audit and captures for reviewers, and usage, against the real
sandboxd."""

import hashlib
import secrets
from datetime import datetime, timedelta, timezone

import pytest

import sandboxd


def test_audit_and_captures(client, reviewer):
    token = secrets.token_hex(6)
    code = f"print('{token}')"
    r = client.run(code, stdin="some input")
    since = datetime.now(timezone.utc) - timedelta(minutes=10)

    page = reviewer.audit(kind="exec", code_sha256=hashlib.sha256(code.encode()).hexdigest(), since=since)
    assert len(page.records) == 1 and page.next_cursor == ""
    rec = page.records[0]
    assert (rec.kind, rec.subject, rec.status, rec.exit_code, rec.tenant) == ("exec", r.id, "ok", 0, "py")
    assert rec.exec_profile.name == "default" and rec.hash and rec.time is not None
    assert {o.name for o in rec.inputs} >= {"stdin"} and {o.name for o in rec.outputs} >= {"stdout"}
    assert reviewer.audit_record(rec.id).hash == rec.hash

    # Paging: limit 1 and the cursor walk more than one page, newest first.
    later = [client.run(f"print({i})").id for i in range(2)]
    walked = []
    for x in reviewer.audit_records(kind="exec", limit=1):
        walked.append(x)
        if len(walked) == 3:
            break
    assert [x.subject for x in walked] == [later[1], later[0], r.id]

    (cid,) = rec.capture_ids
    cap = reviewer.capture(cid)
    assert cap.kind == "exec" and cap.tenant == "py" and {p.name for p in cap.parts} >= {"code", "stdin", "stdout"}
    assert cap.text["code"] == code and cap.text["stdout"] == token + "\n"
    assert reviewer.capture_raw(cid, part="stdin") == b"some input"
    assert any(c.id == cid for c in reviewer.captures(kind="exec", limit=100).captures)

    held = reviewer.hold_capture(cid, "case 7")
    assert held.hold is not None and held.hold.reason == "case 7"
    with pytest.raises(sandboxd.Held):
        reviewer.erase_capture(cid, "erasure request")
    assert reviewer.hold_capture(cid, "case closed", on=False).hold is None
    gone = reviewer.erase_capture(cid, "erasure request")
    assert gone.erased is not None and gone.erased.reason == "erasure request"
    with pytest.raises(sandboxd.Erased) as ei:
        reviewer.capture_raw(cid)
    assert ei.value.status == 410
    assert reviewer.hold_tenant("py", "litigation").hold is True
    assert reviewer.hold_tenant("py", "settled", on=False).hold is False


def test_agents_cannot_read_the_audit_log(client):
    with pytest.raises(sandboxd.Forbidden) as ei:
        client.audit(kind="exec")
    assert ei.value.status == 403


def test_usage(client):
    client.run("print(1)", agent_session="usage-1")
    report = client.usage(session="usage-1")
    assert (report.tenant, report.session, report.used.execs) == ("py", "usage-1", 1)
    assert client.usage(tenant="py").day
    with pytest.raises(ValueError):
        client.usage()
