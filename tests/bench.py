"""Benchmark, not a test: every budget of the project, each figure against its target.

    make bench        (or: python tests/bench.py [--no-suite] [--runs 3] [--pages PAGE ...]
                                                 [--base DIR])

The time budgets are ratios to commit 41e7906 timed on the same machine in the same run, because
machines differ (the same suite took 66 to 141 s on different 2-core machines): a checkout of it
with its own .venv at --base (make bench: BASE, by default /tmp/base41; how to make one is
printed when it is missing, and then the times are shown against the absolute targets, which
hold only on a machine like the one they were set on).

1. The strict site build, cold, alternated with 41e7906's three times (target: <= 1.41 times
   41e7906's, i.e. 10 s against its 7.1 s when the target was set).
2. That build served on 127.0.0.1 (tests/bench_site.py): what a browser transfers for a chapter
   page in each language and its requests (<= 600 KB), the requests that leave 127.0.0.1 (0), and
   each search index's size; then Lighthouse's median performance (>= 90) and accessibility (100)
   on every page of the site in both languages (132 pages, 3 runs each: about 50 minutes on 2 cores;
   --pages names fewer), or a line saying it is not installed and how to get it.
3. The whole suite, back to back with 41e7906's (41e7906, this, this, 41e7906; target: <= 1.47
   times 41e7906's, i.e. 120 s against its 81.6 s), with DOCS_TIMINGS set in the first run so
   that the collector writes how long each block's own process ran and the CPU seconds it used,
   and the 10 blocks that used the most CPU.

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
BASELINE = "41e7906"
# the targets as ratios to 41e7906 on the same machine; in seconds where it cannot be timed
RATIOS = {"strict build": 1.41, "whole suite": 1.47}
TARGETS = {"strict build": 10.0, "whole suite": 120.0}


def timed(argv, env, cwd=ROOT):
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    return time.perf_counter() - t0, proc


def load() -> str:
    return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def baseline(base: Path) -> Path | None:
    """41e7906's interpreter in the checkout at ``base``, or None (and a line saying how to make
    one) when there is none."""
    python = base / ".venv" / "bin" / "python"
    head = subprocess.run(["git", "-C", str(base), "rev-parse", "HEAD"],
                          capture_output=True, text=True).stdout.strip()
    if python.exists() and head.startswith(BASELINE):
        return python
    print(f"{BASELINE}: not timed, no checkout of it with its .venv at {base} "
          f"(make one: git worktree add {base} {BASELINE} && (cd {base} && make install)); "
          "the times below are against absolute targets, which hold only on a machine like "
          "the one they were set on")
    return None


def base_env() -> dict:
    """The environment for 41e7906's commands: this run's, less what points at this checkout."""
    return {k: v for k, v in os.environ.items()
            if k not in ("DOCS_TIMINGS", "VIRTUAL_ENV", "PYTHONPATH", "DOCS_PICTURE_CACHE",
                         "DOCS_NOTEBOOK_CACHE")} \
        | {"NO_MKDOCS_2_WARNING": "1"}


def compare(name: str, ours: list[float], theirs: list[float], order: str) -> int:
    """One line: both sets of times, the ratio of their sums against the target; 1 if missed."""
    ratio = sum(ours) / sum(theirs)
    pairs = ", ".join(f"{a / b:.2f}" for a, b in zip(ours, theirs))
    target = RATIOS[name]
    print(f"{name + ':':14}{' '.join(f'{t:.1f}' for t in ours)} s against {BASELINE}'s "
          f"{' '.join(f'{t:.1f}' for t in theirs)} s ({order}): ratio {ratio:.2f} "
          f"(each pair {pairs})   target <= {target:.2f}   "
          f"{'met' if ratio <= target else 'MISSED'}   ({load()} after)", flush=True)
    return 0 if ratio <= target else 1


def same_site(tmp: Path, env: dict) -> int:
    """The first cold build against one that leaves the notebooks to mkdocs-jupyter alone
    (DOCS_NOTEBOOK_CACHE=off): every file byte for byte the same (pagerun/nbcache.py)."""
    _, proc = timed([sys.executable, "-m", "mkdocs", "build", "--strict", "-d",
                     f"{tmp}/site-alone"], dict(env, DOCS_NOTEBOOK_CACHE="off"))
    if proc.returncode:
        sys.exit(proc.stdout + proc.stderr)
    ours, alone = tmp / "site0", tmp / "site-alone"
    files = [{p.relative_to(d) for p in d.rglob("*") if p.is_file()} for d in (ours, alone)]
    differ = sorted(p.as_posix() for p in files[0] ^ files[1]) + sorted(
        p.as_posix() for p in files[0] & files[1]
        if (ours / p).read_bytes() != (alone / p).read_bytes())
    print(f"notebooks from .cache/notebooks against mkdocs-jupyter alone: "
          f"{len(differ)} files differ" + (": " + ", ".join(differ[:10]) if differ else ""))
    return 1 if differ else 0


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
    parser.add_argument("--base", type=Path, default=Path(os.environ.get("BASE", "/tmp/base41")),
                        help=f"a checkout of {BASELINE} with its .venv, timed beside this one "
                             "(default: $BASE or /tmp/base41)")
    args = parser.parse_args()
    status = 0
    print(f"cores: {os.cpu_count()}")
    base_python = baseline(args.base.resolve())
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
        before = load()
        ours, theirs = [], []
        for i in range(3 if base_python else 1):
            # cold builds, as CI's: no pictures drawn and no notebook rendered by an earlier
            # build (pagerun/pictures.py, pagerun/nbcache.py)
            build_s, proc = timed([sys.executable, "-m", "mkdocs", "build", "--strict", "-d",
                                   f"{tmp}/site{i}"],
                                  dict(env, DOCS_PICTURE_CACHE=f"{tmp}/pictures{i}",
                                       DOCS_NOTEBOOK_CACHE=f"{tmp}/notebooks{i}"))
            if proc.returncode:
                sys.exit(proc.stdout + proc.stderr)
            ours.append(build_s)
            if base_python:
                base_s, proc = timed([str(base_python), "-m", "mkdocs", "build", "--strict",
                                      "-d", f"{tmp}/base-site{i}"], base_env(), cwd=args.base)
                if proc.returncode:
                    sys.exit(f"{BASELINE}'s build failed:\n" + proc.stdout + proc.stderr)
                theirs.append(base_s)
        status |= same_site(Path(tmp), env)
        if base_python:
            status |= compare("strict build", ours, theirs, "alternated, this one first")
        else:
            report("strict build", ours[0], f"{before} before")
        status |= site_budgets(Path(tmp) / "site0", args.runs, args.pages)
        if args.no_suite:
            return status
        before = load()
        suite = [sys.executable, "-m", "pytest", "--codeblocks", "-q", "-p", "no:cacheprovider"]
        base_suite = [str(base_python)] + suite[1:]
        theirs = [timed(base_suite, base_env(), cwd=args.base)[0]] if base_python else []
        suite_s, proc = timed(suite, dict(env, DOCS_TIMINGS=f"{tmp}/blocks.json"))
        summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "(no output)"
        blocks = json.loads(Path(f"{tmp}/blocks.json").read_text()) \
            if Path(f"{tmp}/blocks.json").exists() else []
        if base_python:
            ours = [suite_s, timed(suite, env)[0]]
            theirs.append(timed(base_suite, base_env(), cwd=args.base)[0])
    if base_python:
        status |= compare("whole suite", ours, theirs,
                          f"{BASELINE}, this, this, {BASELINE}; pairs: the 1st and 2nd, "
                          "the 3rd and 4th")
    else:
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
