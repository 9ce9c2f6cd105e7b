"""An environment the reader brought is never changed: `make ... PYTHON=...` checks it and stops
with one line if something is missing, and installs nothing (only the project's own .venv is
installed into). The whole suite's own environment is compared before and after the run by
pagerun.plugin (pytest_sessionfinish)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from pagerun import envcheck, pages


def _contents(env: Path) -> list[str]:
    return sorted(p.relative_to(env).as_posix() for p in env.rglob("*"))


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
@pytest.mark.parametrize("target", ["install", "serve", "test"])
def test_make_never_installs_into_a_readers_environment(tmp_path, target):
    env = tmp_path / "readers-env"
    venv.create(env, with_pip=False)  # an environment without the project's packages
    before = _contents(env)
    proc = subprocess.run(["make", target, f"PYTHON={env / 'bin' / 'python'}"], cwd=pages.ROOT,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
                          env=dict(os.environ, MAKEFLAGS=""))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    said = [l for l in out.splitlines() if l.startswith("make: ") and "not ready" in l]
    assert len(said) == 1 and "torch is missing" in said[0] and "nothing was installed" in said[0], out
    assert "Traceback" not in out, out
    assert _contents(env) == before  # not one file added


def test_the_running_environment_passes_its_own_check():
    assert envcheck.problems() == [], envcheck.problems()


def test_the_check_reads_pyprojects_ranges():
    names = dict(envcheck.requirements())
    assert ("<", "3") in names["torch"] and (">=", "2.7") in names["torch"]
    assert envcheck._version("2.13.0+cpu") == (2, 13, 0) < envcheck._version("3")


def test_the_session_compares_installed_packages():
    from pagerun import plugin

    now = plugin._installed()
    assert now.get("torch") and now == plugin._installed()
    assert sys.executable  # the interpreter whose packages are compared


def test_a_folder_put_on_sys_path_installs_nothing(tmp_path, monkeypatch):
    """setuptools puts its _vendor folder, with the dist-info of what it vendors, on sys.path
    when imported (torch's GPU stack imports it): the session compares what is installed."""
    from pagerun import plugin

    before = plugin._installed()
    (tmp_path / "vendored-1.0.dist-info").mkdir()
    (tmp_path / "vendored-1.0.dist-info" / "METADATA").write_text("Name: vendored\nVersion: 1.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "vendored" not in plugin._installed() and plugin._installed() == before


def test_an_older_python_gets_one_line_before_anything_is_installed(tmp_path, monkeypatch):
    """README's Python range is pyproject's requires-python; an older interpreter is told so in
    one line by make, before a .venv is made (not by pip's resolver, halfway through)."""
    low = envcheck.lowest_python()
    assert f"Needs Python ≥ {low}" in (pages.ROOT / "README.md").read_text(encoding="utf-8")
    monkeypatch.setattr(sys, "version_info", (3, 10, 13, "final", 0))
    said = envcheck.python_problem()
    assert said and said.startswith("make: ") and f"needs Python {low} or newer" in said
    monkeypatch.undo()
    assert envcheck.python_problem() is None
    older = [p for p in sorted(Path("/root/.pyenv/versions").glob("3.*/bin/python"))
             if p.parent.parent.name.count(".") == 2
             and envcheck._version(p.parent.parent.name) < envcheck._version(low)
             and envcheck._version(p.parent.parent.name) >= (3, 7)]
    if shutil.which("make") is None or not older:
        pytest.skip("no make, or no Python older than the project's on this machine")
    venv_dir = tmp_path / "venv"
    proc = subprocess.run(["make", "install", f"BASE_PYTHON={older[-1]}", f"VENV={venv_dir}"],
                          cwd=pages.ROOT, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL, env=dict(os.environ, MAKEFLAGS=""))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and not venv_dir.exists(), out
    assert [l for l in out.splitlines() if l.startswith("make: /")] == [
        l for l in out.splitlines() if f"needs Python {low} or newer" in l], out
