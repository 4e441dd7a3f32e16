"""examples/python/agent_loop.py runs against the real sandboxd."""

import os
import subprocess
import sys

from conftest import ROOT


def test_agent_loop_example(server):
    env = dict(os.environ, SANDBOXD_KEY=server.agent_key)
    env.pop("PYTHONPATH", None)
    p = subprocess.run([sys.executable, str(ROOT / "examples/python/agent_loop.py"), "--url", server.url,
                        "--page", server.page_url, "--profile", "pytest"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    # "Weather Sunny degrees Light wind from west More footer text": 10 words of four letters or more.
    assert p.stdout.startswith("The page has 10 words; most common: [("), (p.stdout, p.stderr)
    log = p.stderr.splitlines()
    assert log[0].startswith("[fetch_url] Fetched the page: HTTP 200.")
    assert log[1].startswith("[run_python] Refused: VALIDATION (field language): language is required")
    assert log[2].startswith("[run_python] status: ok (exit code 0)")
