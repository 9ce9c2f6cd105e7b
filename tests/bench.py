"""Benchmark, not a test: every budget of the project, each figure against its target.

    make bench        (or: python tests/bench.py [--no-suite] [--runs 3] [--pages PAGE ...])

1. The strict site build, timed alone (target <= 10 s on 2 cores).
2. That build served on 127.0.0.1 (tests/bench_site.py): what a browser transfers for a chapter
   page in each language and its requests (<= 600 KB), the requests that leave 127.0.0.1 (0), and
   each search index's size; then Lighthouse's median performance (>= 90) and accessibility (100)
   on every page of the site in both languages (132 pages, 3 runs each: about 100 minutes on 2 cores;
   --pages names fewer), or a line saying it is not installed and how to get it.
3. The whole suite, once, with DOCS_TIMINGS set so that the collector writes how long each block's
   own process ran and the CPU seconds it used (target <= 120 s), and the 10 blocks that used the
   most CPU.

The machine's load average is printed with each timing: on a busy machine the times and the
performance scores mean little (accessibility does not depend on load).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pagerun import runner

ROOT = Path(__file__).resolve().parent.parent
TARGETS = {"strict build": 10.0, "whole suite": 120.0}


def timed(argv, env):
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    return time.perf_counter() - t0, proc


def load() -> str:
    return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def site_budgets(site: Path, runs: int, pages: list[str] | None) -> int:
    """tests/bench_site.py's measurements on the built site; Lighthouse where it is installed."""
    try:
        import bench_site
        import sitebuild
        import test_browser
    except ImportError as e:  # playwright missing
        print(f"page weight: not measured ({e})")
        return 0
    reason = test_browser._missing_browser()
    if reason:
        print(f"page weight: not measured ({reason})")
        return 0
    base, server = sitebuild.serve(site)
    try:
        status = bench_site.page_budgets(site, base)
        missing = bench_site.lighthouse_missing()
        if missing:
            print(missing)
        else:
            print(f"({load()} before Lighthouse)")
            status |= bench_site.lighthouse(base, pages or bench_site.site_pages(site), runs)
    finally:
        server.shutdown()
    return status


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-suite", action="store_true", help="the build and the site only")
    parser.add_argument("--runs", type=int, default=3, help="Lighthouse runs per page")
    parser.add_argument("--pages", nargs="+", metavar="PAGE",
                        help="Lighthouse on these pages only (e.g. devices/ zh/devices/), "
                             "not on every page")
    args = parser.parse_args()
    status = 0
    print(f"cores: {os.cpu_count()}")
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, NO_MKDOCS_2_WARNING="1", DOCS_TIMINGS=f"{tmp}/blocks.json")
        before = load()
        # a cold build, as CI's: no pictures drawn by an earlier build (pagerun/pictures.py)
        build_s, proc = timed([sys.executable, "-m", "mkdocs", "build", "--strict", "-d",
                               f"{tmp}/site"], dict(env, DOCS_PICTURE_CACHE=f"{tmp}/pictures"))
        if proc.returncode:
            sys.exit(proc.stdout + proc.stderr)
        report("strict build", build_s, f"{before} before")
        status |= site_budgets(Path(tmp) / "site", args.runs, args.pages)
        if args.no_suite:
            return status
        before = load()
        suite_s, proc = timed([sys.executable, "-m", "pytest", "--codeblocks", "-q",
                               "-p", "no:cacheprovider"], env)
        summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "(no output)"
        blocks = json.loads(Path(f"{tmp}/blocks.json").read_text()) \
            if Path(f"{tmp}/blocks.json").exists() else []
    report("whole suite", suite_s, f"{before} before")
    print(f"suite result: {summary}")
    for line in proc.stdout.splitlines():
        if line.startswith(("FAILED", "ERROR")):
            print("  " + line[:160])
    warm = sum(1 for b in blocks if b["how"] == "warm")
    print(f"\nblocks run: {len(blocks)} ({warm} warm, {len(blocks) - warm} in a shell); "
          f"their processes ran {sum(b['seconds'] for b in blocks):.1f} s in all and used "
          f"{sum(b['cpu'] for b in blocks):.1f} s of CPU (which load does not inflate)")
    print("10 blocks that used the most CPU (CPU seconds, then seconds their process ran):")
    for b in sorted(blocks, key=lambda b: -b["cpu"])[:10]:
        lines = b["command"].replace("\\\n", " ").splitlines()
        first = " ".join(lines[0].split()).replace("OMP_NUM_THREADS=1 ", "")
        first = first.replace("torchrun --standalone ", "torchrun ")
        more = " ..." if len(lines) > 1 or len(first) > 96 else ""
        print(f"  {b['cpu']:6.1f} s {b['seconds']:6.1f} s  {first[:90]}{more}")
    if blocks and proc.returncode == 0:
        write_costs(blocks)
        print(f"\nthe order the blocks start in: {runner.COSTS.relative_to(runner.ROOT)} "
              "(commit it with the change that made blocks longer or shorter)")
    return status | proc.returncode


def write_costs(blocks: list[dict]) -> None:
    """pagerun/block_costs.json: how long each block ran and the CPU it used, which the suite
    reads to start the longest first and to run those that mostly wait beside the others."""
    costs = {" ".join(b["command"].split()): [b["seconds"], b["cpu"]] for b in blocks}
    lines = [f"{json.dumps(k, ensure_ascii=False)}: {json.dumps(v)}"
             for k, v in sorted(costs.items())]  # one block a line
    runner.COSTS.write_text("{\n" + ",\n".join(lines) + "\n}\n", encoding="utf-8")


def report(name: str, seconds: float, note: str) -> None:
    target = TARGETS[name]
    print(f"{name + ':':14}{seconds:7.1f} s   target <= {target:.0f} s   "
          f"ratio {seconds / target:.2f}   ({note})", flush=True)


if __name__ == "__main__":
    sys.exit(main())
