"""Benchmark, not a test: the wall time of the whole suite and of the strict site build.

    make bench        (or: python tests/bench.py)

Targets once the site is complete: suite <= 120 s and build <= 10 s on the 2-core CI machine.
"""

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
env = dict(os.environ, NO_MKDOCS_2_WARNING="1")


def timed(argv):
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    return time.perf_counter() - t0, proc


with tempfile.TemporaryDirectory() as out:
    build_s, proc = timed([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", out])
    if proc.returncode:
        sys.exit(proc.stdout + proc.stderr)
suite_s, proc = timed([sys.executable, "-m", "pytest", "--codeblocks", "-q", "-p", "no:cacheprovider"])
summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "(no output)"
print(f"cores: {os.cpu_count()}")
print(f"strict build: {build_s:6.1f} s   (target <= 10 s)")
print(f"whole suite:  {suite_s:6.1f} s   (target <= 120 s)   {summary}")
sys.exit(proc.returncode)
