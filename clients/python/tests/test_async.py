"""The async client against the real sandboxd: the same core, its own
I/O."""

import asyncio

import pytest

import sandboxd


def test_async_client(server):
    async def main():
        async with sandboxd.AsyncClient(server.url, server.agent_key) as c:
            r = await c.run("print(2 ** 10)", run_id="async-run", step=1)
            assert r.ok and r.stdout == "1024\n"
            assert (await c.run("print(2 ** 10)", run_id="async-run", step=1)).replayed

            chunks = []

            async def on_stdout(text):
                chunks.append(text)

            r = await c.run("import time\nprint('a', flush=True)\ntime.sleep(0.5)\nprint('b')", on_stdout=on_stdout)
            assert r.stdout == "a\nb\n" and "".join(chunks) == "a\nb\n" and len(chunks) == 2

            ex = await c.submit("print('bg')")
            assert (await ex.wait(timeout=60)).stdout == "bg\n"

            async with c.session() as s:
                await s.upload({"n.txt": "41"})
                assert (await s.run("int(open('n.txt').read()) + 1")).value == "42"
            assert (await c.get_session(s.id)).ended
            s2 = await c.session()
            assert s2.info.state == "ready" and (await s2.end()).ended

            page = await c.fetch(server.page_url)
            assert "Sunny" in page.content

            out = await c.handle_tool_call("run_python", {"language": "python", "code": "print('tool')"}, format="mcp")
            assert not out["isError"] and "tool" in out["content"][0]["text"]

            with pytest.raises(sandboxd.ValidationError) as ei:
                await c.run("print(1)", limits={"cpus": 0})
            assert ei.value.field == "limits.cpus"
            assert [t["name"] for t in await c.tools("openai-responses")] == ["run_python", "fetch_url"]

    asyncio.run(main())
