"""Benchmark, not a test: the wall time of the strict site build and of the whole suite, the 10
slowest blocks, and each figure against its target (2-core CI machine: suite <= 120 s, build
<= 10 s).

    make bench        (or: python tests/bench.py)

The build is timed alone (nothing else running), then the suite, once, with DOCS_TIMINGS set so
that the collector writes how long each block's own process ran.
"""

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGETS = {"strict build": 10.0, "whole suite": 120.0}


def timed(argv, env):
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    return time.perf_counter() - t0, proc


with tempfile.TemporaryDirectory() as tmp:
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1", DOCS_TIMINGS=f"{tmp}/blocks.json")
    build_s, proc = timed([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", f"{tmp}/site"],
                          env)
    if proc.returncode:
        sys.exit(proc.stdout + proc.stderr)
    suite_s, proc = timed([sys.executable, "-m", "pytest", "--codeblocks", "-q",
                           "-p", "no:cacheprovider"], env)
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "(no output)"
    blocks = json.loads(Path(f"{tmp}/blocks.json").read_text()) if proc.stdout else []

print(f"cores: {os.cpu_count()}")
for name, seconds in (("strict build", build_s), ("whole suite", suite_s)):
    target = TARGETS[name]
    print(f"{name + ':':14}{seconds:7.1f} s   target <= {target:.0f} s   "
          f"ratio {seconds / target:.2f}")
print(f"suite result: {summary}")
for line in proc.stdout.splitlines():
    if line.startswith(("FAILED", "ERROR")):
        print("  " + line[:160])
warm = sum(1 for b in blocks if b["how"] == "warm")
print(f"\nblocks run: {len(blocks)} ({warm} warm, {len(blocks) - warm} in a shell); "
      f"their processes ran {sum(b['seconds'] for b in blocks):.1f} s in all")
print("slowest 10 blocks (seconds of the block's own process):")
for b in blocks[:10]:
    lines = b["command"].replace("\\\n", " ").splitlines()
    first = " ".join(lines[0].split()).replace("OMP_NUM_THREADS=1 ", "")
    first = first.replace("torchrun --standalone ", "torchrun ")
    more = " ..." if len(lines) > 1 or len(first) > 96 else ""
    print(f"  {b['seconds']:6.1f} s  {first[:96]}{more}")
sys.exit(proc.returncode)
