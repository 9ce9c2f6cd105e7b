"""DDP claims that are not page blocks: a run killed mid-training resumes to the same weights, and
a killed rank ends the job with a clear error, fast, leaving no process behind."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

from pagerun import pages, runner, warmpool

ROOT = Path(__file__).resolve().parent.parent
ARGS = ["--standalone", "--nproc-per-node=2"]


def _torchrun() -> list[str]:
    """torchrun as a page block's shell runs it: its agent started by the fork server (the
    shim's `torchrun`, compared with the real agent in tests/test_engine.py), the real one
    without the server."""
    if runner.warm_on():
        return [os.path.join(warmpool.agent_dir(), "torchrun"), *ARGS]
    return [sys.executable, "-m", "torch.distributed.run", *ARGS]


def _env(marker: str, tmp: Path) -> dict:
    # a block's environment (its PATH has the real torchrun after the shim's)
    env = dict(runner.env(), OMP_NUM_THREADS="1", DDP_TEST_MARKER=marker)
    env["TMPDIR"] = str(tmp)  # resume.py keeps its checkpoints there: a killed job leaves them behind
    env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"  # see docs/en/ddp/multinode.md#restarts
    return env


def _left_behind(marker: str) -> list[int]:
    """PIDs of processes that still carry this test's marker in their environment. The agent and
    the workers forked by the server do not show it in /proc, but the clients that stand for them
    (pagerun/_client.py, one per process, alive as long as it is) do."""
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
    env = warmpool.worker_env(_env(marker, tmp))  # workers start warm, as in page blocks
    proc = subprocess.run(_torchrun() + args, cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    return proc, time.monotonic() - t0


def _final_weights(*args: str):
    """resume.py under torchrun with --save-final: (process, the final weights)."""
    import torch

    marker = uuid.uuid4().hex
    tmp = Path(tempfile.mkdtemp(prefix="resume-final-"))
    try:
        proc, _ = _run(["--max-restarts=1", "snippets/ddp/resume.py", *args,
                        "--save-final", str(tmp / "final.pt")], marker, tmp, timeout=120)
        final = tmp / "final.pt"
        weights = torch.load(final, weights_only=True) if final.exists() else None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return proc, weights


RESUME_RUNS = {"uninterrupted": (), "killed": ("--kill-at-step", "5")}


def test_kill_and_resume_gives_the_uninterrupted_weights():
    """The page's two runs of resume.py, uninterrupted and killed at step 5 then restarted,
    end with the same weights, bit for bit: the same two runs again, each saving its final
    weights (--save-final), compared tensor by tensor. The page's own blocks (run by the
    collector already) resumed from the step-4 checkpoint and print the same last line."""
    import torch

    blocks = {b.key: b for b in pages.blocks(pages.DOCS / "en" / "ddp" / "multinode.md")}
    whole, killed = (runner.run_cached(blocks[k]) for k in ("ddp/resume", "ddp/resume-killed"))
    assert whole.exit == 0 and killed.exit == 0, whole.output + killed.output
    assert "attempt 0: starting at step 0" in killed.output
    # a restart happens only after a worker failed; it resumed from the step-4 checkpoint
    assert "attempt 1: starting at step 4" in killed.output, killed.output
    done = [[l for l in r.output.splitlines() if l.startswith("done after")] for r in (whole, killed)]
    assert done[0] and done[0] == done[1], done
    # the same runs as the page's (its killed run: rank 1 dies at step 5, one restart)
    assert " ".join(RESUME_RUNS["killed"]) in blocks["ddp/resume-killed"].code
    runs = {name: runner.result(f"resume-final:{name}", _final_weights, *args)
            for name, args in RESUME_RUNS.items()}
    for name, (proc, weights) in runs.items():
        assert proc.returncode == 0 and weights is not None, name + proc.stdout + proc.stderr
    assert "attempt 1: starting at step 4" in runs["killed"][0].stdout, runs["killed"][0].stdout
    a, b = runs["uninterrupted"][1], runs["killed"][1]
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), f"{k} differs"


def _killed_job():
    """A job whose rank 1 is killed at step 3: (process, seconds from the start of training to
    the end of the job, marker, when it ended). Training starts when rank 0 prints its first
    line; what comes before (starting Python and torch) is slow on a busy machine, and is not
    what this test is about."""
    marker = uuid.uuid4().hex
    tmp = Path(tempfile.mkdtemp(prefix="killed-rank-"))
    started, lines = [], []
    try:
        env = warmpool.worker_env(_env(marker, tmp))
        proc = subprocess.Popen(_torchrun() + ["snippets/ddp/resume.py", "--kill-at-step", "3"],
                                cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)

        def read():
            for line in proc.stdout:
                if not started and "starting at step" in line:
                    started.append(time.monotonic())
                lines.append(line)

        err = []
        readers = [threading.Thread(target=read, daemon=True),
                   threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)]
        for r in readers:
            r.start()
        try:
            proc.wait(timeout=240)  # a guard against a hang, far above any busy machine's start
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
        ended = time.monotonic()
        for r in readers:
            r.join(timeout=10)
        result = subprocess.CompletedProcess(proc.args, proc.returncode, "".join(lines),
                                             "".join(err))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return result, ended - started[0] if started else float("inf"), marker, ended


def pagerun_background():
    """The killed job and the two runs that save their final weights start with the page
    blocks."""
    jobs = [("killed-rank", _killed_job, ())] if sys.platform == "linux" else []
    return jobs + [(f"resume-final:{name}", _final_weights, args)
                   for name, args in RESUME_RUNS.items()]


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc to look for leftover processes")
def test_a_killed_rank_ends_the_job_with_a_clear_error_fast():
    proc, seconds, marker, ended = runner.result("killed-rank", _killed_job)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "ChildFailedError" in out, out
    assert "Signal 9 (SIGKILL) received" in out or "Signal 6 (SIGABRT) received" in out, out  # see above
    # the survivors' process group times out after 60 s (resume.py): a job that waited for it
    # would take longer than that from the start of training; torchrun ends it at once
    assert seconds < 60, f"{seconds:.0f} s from the start of training to the end of the job"
    # a moment for the kernel to reap them, longer on a busy machine
    while _left_behind(marker) and time.monotonic() < ended + 10:
        time.sleep(0.1)
    assert not _left_behind(marker), "processes left behind"
