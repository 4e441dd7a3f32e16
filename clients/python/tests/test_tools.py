"""Tool definitions and tool calls in each framework's format, against the
real sandboxd."""

import base64
import json
import re

import pytest

import sandboxd

# A program that writes a 1x1 PNG to /sandbox/out with the standard library.
PNG_CODE = r'''
import os, struct, zlib
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)) \
    + chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00")) + chunk(b"IEND", b"")
os.makedirs("out", exist_ok=True)
open("out/dot.png", "wb").write(png)
open("out/note.txt", "w").write("a note")
print("drew a dot")
'''


def test_tool_definitions_in_each_format(client):
    for fmt in sandboxd.TOOL_FORMATS:
        tools = client.tools(fmt)
        assert len(tools) == 2, fmt
        if fmt in ("generic", "anthropic"):
            assert [t["name"] for t in tools] == ["run_python", "fetch_url"]
            assert tools[0]["input_schema"]["required"] == ["language", "code"]
        elif fmt == "openai":
            assert [t["function"]["name"] for t in tools] == ["run_python", "fetch_url"]
            assert all(t["type"] == "function" and "$schema" not in t["function"]["parameters"] for t in tools)
        elif fmt == "openai-responses":
            assert [t["name"] for t in tools] == ["run_python", "fetch_url"]
            assert all(t["type"] == "function" and t["strict"] is False and "function" not in t for t in tools)
            assert "async" not in tools[0]["parameters"]["properties"]
        else:
            assert [t["name"] for t in tools] == ["run_python", "fetch_url"] and "inputSchema" in tools[0]
    with pytest.raises(ValueError):
        client.tools("yaml")


def test_run_python_call_in_each_format_runs_once(client):
    args = json.dumps({"language": "python", "code": PNG_CODE})
    png = None
    texts = {}
    for fmt in sandboxd.RESULT_FORMATS:
        # The same call id: one logical call, so one run and three replays.
        out = client.handle_tool_call("run_python", args, format=fmt, call_id="call_png_1")
        if fmt == "openai":
            assert out["role"] == "tool" and out["tool_call_id"] == "call_png_1"
            texts[fmt] = out["content"]
            assert "dot.png (" in out["content"] and "PNG image, not shown" in out["content"]
        elif fmt == "openai-responses":
            assert out["type"] == "function_call_output" and out["call_id"] == "call_png_1"
            text, image = out["output"]
            texts[fmt] = text["text"]
            assert image["type"] == "input_image" and image["image_url"].startswith("data:image/png;base64,")
            png = base64.b64decode(image["image_url"].split(",", 1)[1])
        elif fmt == "anthropic":
            assert out["type"] == "tool_result" and out["tool_use_id"] == "call_png_1" and out["is_error"] is False
            text, image = out["content"]
            texts[fmt] = text["text"]
            assert image["source"]["media_type"] == "image/png" and base64.b64decode(image["source"]["data"]) == png
        else:
            assert out["isError"] is False and out["structuredContent"]["status"] == "ok"
            text, image = out["content"]
            texts[fmt] = text["text"]
            assert image == {"type": "image", "data": base64.b64encode(png).decode(), "mimeType": "image/png"}
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    for text in texts.values():
        assert text.startswith("status: ok (exit code 0)") and "drew a dot" in text and "note.txt (6 bytes):\na note" in text
    ids = {re.search(r"exec (ex_\w+)", t).group(1) for t in texts.values()}
    assert len(ids) == 1, f"one call id must be one run: {ids}"


def test_refusals_are_results_for_the_model(server, counting):
    with server.client(transport=counting) as c:
        out = c.handle_tool_call("run_python", {"language": "python", "code": "print(1)", "async": True},
                                 format="anthropic", call_id="toolu_1")
        assert out["is_error"] is True
        assert out["content"][0]["text"].startswith('Refused: VALIDATION (field async): unknown field "async"')
        out = c.handle_tool_call("run_python", '{"language": "python", "code": "x", "CODE": "y"}', format="mcp")
        assert out["isError"] and "appears twice" in out["content"][0]["text"]
        out = c.handle_tool_call("delete_files", "{}", format="openai", call_id="call_2")
        assert "There is no tool 'delete_files'" in out["content"]
        # None of them reached /exec (only GET /tools, once).
        assert [r.url.path for r in counting.requests] == ["/tools"]

        # What only the service can check: the profile's ceiling.
        out = c.handle_tool_call("run_python", {"language": "python", "code": "print(1)", "limits": {"memory_mb": 999999}},
                                 format="openai-responses", call_id="call_3")
        assert out["output"].startswith("Refused: VALIDATION (field limits.memory_mb):")
        assert out["output"].endswith("Fix the arguments and call again.")
        with pytest.raises(ValueError):
            c.handle_tool_call("run_python", "{}", format="openai")  # no call_id


def test_fetch_url_call(client, server):
    out = client.handle_tool_call("fetch_url", {"url": server.page_url}, format="mcp")
    text = out["content"][0]["text"]
    nonce = out["structuredContent"]["nonce"]
    assert not out["isError"] and text.startswith("Fetched the page: HTTP 200. UNTRUSTED:")
    assert f"nonce {nonce}" in text and "Sunny, 21 degrees" in text and text.endswith(f'</untrusted-content nonce="{nonce}">')
    out = client.handle_tool_call("fetch_url", {"url": "http://127.0.0.1:9/"}, format="anthropic", call_id="tu_9")
    assert out["is_error"] and out["content"][0]["text"].startswith("Refused: EGRESS_DENIED")
