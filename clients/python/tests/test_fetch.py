"""POST /fetch against the real sandboxd and the test's page server."""

import pytest

import sandboxd


def test_fetch_returns_the_page_as_untrusted_text(client, server):
    r = client.fetch(server.page_url, run_id="fetch-test", step=1)
    assert (r.status, r.title, r.untrusted, r.truncated) == (200, "Weather in Paris", True, False)
    assert r.final_url == server.page_url and r.profile.name == "pytest" and r.capture_id.startswith("cap_")
    assert r.content.startswith(f'<untrusted-content source="{server.page_url}" nonce="{r.nonce}">\n')
    assert r.content.endswith(f'</untrusted-content nonce="{r.nonce}">')
    assert "Sunny, 21 degrees" in r.content and "IGNORE PREVIOUS" not in r.content
    again = client.fetch(server.page_url, run_id="fetch-test", step=1)
    assert again.replayed and again.id == r.id and again.nonce == r.nonce


def test_fetch_options(client, server):
    r = client.fetch(server.page_url, format="markdown", links="full", selector="main")
    assert "# Weather" in r.content and "[More](" in r.content and "footer text" not in r.content
    r = client.fetch(server.page_url, max_bytes=50)
    assert r.truncated and "Sunny" not in r.content
    r = client.fetch(server.page_url.replace("/weather", "/gone"))
    assert r.status == 404


def test_fetch_refusals(client, server):
    with pytest.raises(sandboxd.EgressDenied) as ei:
        client.fetch("http://127.0.0.1:9/", profile="pytest")
    assert ei.value.status == 403
    with pytest.raises(sandboxd.ValidationError) as ei:
        client.fetch(server.page_url, links="all")
    assert ei.value.field == "links"
