"""`pip install ./clients/python` works: the standard pyproject.toml builds
with setuptools and installs a package that imports on its own."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1]


def test_pip_install(tmp_path):
    if subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode != 0:
        pytest.fail("pip is missing: apt-get install python3-pip (make test-deps does)")
    # A copy: pip builds in the source tree, which stays clean.
    src = tmp_path / "src"
    shutil.copytree(PKG, src, ignore=shutil.ignore_patterns("tests", "build", "*.egg-info", "__pycache__", ".pytest_cache"))
    site = tmp_path / "site"
    p = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps", "--no-index",
                        "--target", str(site), str(src)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert (site / "sandboxd" / "py.typed").exists()
    env = dict(os.environ, PYTHONPATH=str(site))
    p = subprocess.run([sys.executable, "-c", "import sandboxd, sys; print(sandboxd.__file__, sandboxd.__version__)"],
                       cwd=tmp_path, env=env, capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.startswith(str(site)), p.stdout + p.stderr
    dist = next(site.glob("sandboxd-*.dist-info"))
    meta = (dist / "METADATA").read_text()
    assert "Requires-Python: >=3.11" in meta and "Requires-Dist: httpx" in meta
