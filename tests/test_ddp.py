"""DDP claims that are not page blocks: a run killed mid-training resumes to the same weights, and
a killed rank ends the job with a clear error, fast, leaving no process behind."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]


def _env(marker: str, tmp: Path) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", DDP_TEST_MARKER=marker)
    env["TMPDIR"] = str(tmp)  # resume.py keeps its checkpoints there: a killed job leaves them behind
    env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"  # see docs/en/ddp/multinode.md#restarts
    return env


def _left_behind(marker: str) -> list[int]:
    """PIDs of processes that still carry this test's marker in their environment."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if f"DDP_TEST_MARKER={marker}".encode() in (proc / "environ").read_bytes():
                    found.append(int(proc.name))
            except OSError:
                pass
    return found


def _run(args: list[str], marker: str, tmp: Path, timeout: int = 90) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    proc = subprocess.run(TORCHRUN + args, cwd=ROOT, env=_env(marker, tmp), capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    return proc, time.monotonic() - t0


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc to look for leftover processes")
def test_kill_and_resume_gives_the_uninterrupted_weights(tmp_path):
    marker = uuid.uuid4().hex
    whole, _ = _run(["snippets/ddp/resume.py", "--out", str(tmp_path / "whole.pt")], marker, tmp_path)
    assert whole.returncode == 0, whole.stdout + whole.stderr
    killed, _ = _run(["--max-restarts=1", "snippets/ddp/resume.py", "--kill-at-step", "5",
                      "--out", str(tmp_path / "killed.pt")], marker, tmp_path)
    out = killed.stdout + killed.stderr
    assert killed.returncode == 0, out
    assert "attempt 0: starting at step 0" in killed.stdout
    assert "attempt 1: starting at step 4" in killed.stdout, out  # resumed from the step-4 checkpoint
    # it really failed: torchrun names the first failure it sees, either the killed worker (-9,
    # SIGKILL) or its peer, which loses the connection and aborts (-6, SIGABRT)
    assert "exitcode: -9" in out or "exitcode: -6" in out, out
    a, b = torch.load(tmp_path / "whole.pt"), torch.load(tmp_path / "killed.pt")
    assert torch.equal(a, b), f"max |difference| {(a - b).abs().max().item()}"
    assert not _left_behind(marker)


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc to look for leftover processes")
def test_a_killed_rank_ends_the_job_with_a_clear_error_fast(tmp_path):
    marker = uuid.uuid4().hex
    proc, seconds = _run(["snippets/ddp/resume.py", "--kill-at-step", "3"], marker, tmp_path, timeout=60)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "ChildFailedError" in out, out
    assert "Signal 9 (SIGKILL) received" in out or "Signal 6 (SIGABRT) received" in out, out  # see above
    assert seconds < 60
    time.sleep(0.5)
    assert not _left_behind(marker), "processes left behind"
