"""README's serve command works: `make serve` builds the site and serves both languages."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

import sitebuild
from pagerun import pages, runner

PAGES = {"/": "PyTorch", "/zh/": "PyTorch", "/ddp/": "DistributedDataParallel",
         "/zh/ddp/": "DistributedDataParallel"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# How long `make serve` may take before its first answer, counted in the CPU seconds of its own
# processes (make, mkdocs and what they start): a fixed wall-clock limit fails on a busy machine,
# where the blocks beside it leave it a fraction of a core. It answers after about 20 CPU-s on a
# 2-core AMD EPYC; the wall-clock limit only ends a `make serve` that hangs without working.
CPU_BUDGET_S, WALL_LIMIT_S = 180, 900


def _group_cpu(pgid: int) -> float | None:
    """CPU seconds used so far by the process group ``pgid`` (its live processes and the
    children they waited for), or None without Linux's /proc."""
    total = 0
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue  # ended meanwhile
        if int(fields[2]) == pgid:  # fields after the name: state, ppid, pgrp, ..., utime at 11
            total += sum(int(x) for x in fields[11:15])  # utime, stime, cutime, cstime
    return total / os.sysconf("SC_CLK_TCK")


def _serve() -> tuple[dict, str | None]:
    """Run README's `make serve` until it has answered for every page of PAGES, then stop it:
    (the pages it served, or why it did not)."""
    # after the suite's own build: `make serve` then finds the pictures that build drew in
    # .cache/pictures instead of drawing them a second time beside the blocks
    sitebuild.built()
    port = _free_port()
    # README's command, with the interpreter running the tests and a free port
    proc = subprocess.Popen(["make", "serve", f"PYTHON={sys.executable}", f"PORT={port}"],
                            cwd=pages.ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True,
                            env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))
    got, start = {}, time.monotonic()
    try:
        for path, text in PAGES.items():
            while True:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
                        got[path] = (r.status, r.read().decode("utf-8", "replace"))
                    break
                except (urllib.error.URLError, ConnectionError, TimeoutError):
                    if proc.poll() is not None:
                        log = proc.stdout.read().decode()
                        return got, (f"make serve exited with status {proc.returncode}:\n"
                                     + "\n".join(l for l in log.splitlines()
                                                 if not l.startswith(("INFO", "  - "))))
                    wall, cpu = time.monotonic() - start, _group_cpu(proc.pid)
                    if (cpu or 0) > CPU_BUDGET_S or wall > WALL_LIMIT_S:
                        used = f"{cpu:.0f} CPU-s, " if cpu is not None else ""
                        return got, f"make serve did not answer after {used}{wall:.0f} s"
                    time.sleep(0.5)
    finally:
        for sig in (signal.SIGTERM, signal.SIGKILL):  # make and mkdocs: the group, by its pid
            try:
                os.killpg(proc.pid, sig)
                proc.wait(10)
                break
            except ProcessLookupError:
                break
            except subprocess.TimeoutExpired:
                continue
    return got, None


def pagerun_background():
    """`make serve` runs in the background, beside the blocks, once the site build is done."""
    return [("make-serve", _serve, ())] if shutil.which("make") else []


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_serve_serves_both_languages():
    got, failure = runner.result("make-serve", _serve)
    if failure:
        pytest.fail(failure, pytrace=False)
    for path, text in PAGES.items():
        status, body = got[path]
        assert status == 200 and text in body, path
    assert 'lang="zh"' in got["/zh/"][1] and 'lang="en"' in got["/"][1]
