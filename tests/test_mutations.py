"""Every check bites: each program that compares with one process (or another reference) or
prints ``predicted … counted`` lines is run again with its parallel mechanism broken, and its
own check must then fail with its own message.

One entry per program (``MUTATIONS``): the program, the command its page runs it with, a named
and realistic mutation given as a source replacement (``old``, which must occur exactly once in
the program, so an entry cannot go stale silently, and ``new``), and ``must_fail``, a regex of
the program's own failure message. The reader's program stays clean: the test copies the
program's whole folder (programs import their siblings) into a temporary checkout-like folder
(``snippets/<chapter>/``), applies the replacement to the copy and runs the page's command there,
from that folder, in its own process group with a time limit (``pagerun.runner``'s warm start
where the command allows it). It passes when the run exits non-zero, within its time, and
prints ``must_fail``.

``test_every_check_has_an_entry`` keeps the table complete: every program whose CPU recording
has a cost line (the form of ``tests/test_costs.py``) or a bounded figure (``recordings.BOUNDED``,
a difference with the bound it meets: ``6.0e-08 (< 1e-6: equal up to float32 round-off)``) has
an entry, or a reason in ``NOT_A_REFERENCE`` why its bounded figures compare with no reference.

The runs take minutes on 2 cores (CONTRIBUTING.md, "What `make test` checks"), so they are a pass
of their own: ``make test-mutations`` (``DOCS_MUTATIONS=1``); ``make test`` checks the table
(each ``old`` occurs once, the completeness) and skips the runs, with the reason.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import pytest

from pagerun import recordings, runner
from pagerun.pages import ROOT, Block

sys.path.insert(0, str(Path(__file__).parent))  # noqa: E402 - the cost contract's regexes
from test_costs import MENTIONS  # noqa: E402

RUNS = os.environ.get("DOCS_MUTATIONS") == "1"
TIMEOUT = 180  # seconds for one mutated run (a dropped collective waits for its group's timeout)


class Mutation(NamedTuple):
    program: str  # snippets/<chapter>/<name>.py
    mutation: str  # what breaks, in words
    command: str  # as the page runs it, from the repository root
    old: str  # occurs exactly once in the program
    new: str
    must_fail: str  # regex of the program's own failure message


TORCHRUN = "OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node={n} snippets/{p}"


def tr(n: int, program: str, args: str = "") -> str:
    return TORCHRUN.format(n=n, p=program) + (f" {args}" if args else "")


def py(program: str, args: str = "") -> str:
    return f"python snippets/{program}" + (f" {args}" if args else "")


MUTATIONS = [
    Mutation("collectives/ring.py", "send the wrong chunk in the reduce-scatter",
             tr(4, "collectives/ring.py"),
             "step(chunks[(rank - s - 1) % world], tmp)",
             "step(chunks[(rank - s) % world], tmp)",
             r"the ring disagrees with the formula or with torch:\n"
             r"(?:.*\n)*max \|ring - torch\|, integer-valued data"),
]
MUTATIONS = [m._replace(program=f"snippets/{m.program}") for m in MUTATIONS]

# Programs whose bounded figures compare with no reference a mutation of a parallel mechanism
# could move: program -> why.
NOT_A_REFERENCE: dict[str, str] = {}


def _id(m: Mutation) -> str:
    return m.program.removeprefix("snippets/")


# --------------------------------------------------------------------------------------------
# the table is current and complete (cheap: part of make test)

@pytest.mark.parametrize("m", MUTATIONS, ids=_id)
def test_entry_is_current(m):
    path = ROOT / m.program
    assert path.is_file(), f"{m.program}: no such program"
    source = path.read_text(encoding="utf-8")
    count = source.count(m.old)
    assert count == 1, (f"{m.program}: the text to mutate occurs {count} times, not once "
                        f"(the program changed: update the entry)\n{m.old}")
    assert m.old != m.new
    assert m.program in m.command, f"{m.program}: the command runs another program"
    assert any(m.command == _joined(b.code) for b in _page_blocks()), (
        f"{m.program}: no page runs `{m.command}`")
    re.compile(m.must_fail)


def test_one_entry_per_program():
    seen = [m.program for m in MUTATIONS]
    assert sorted(set(seen)) == sorted(seen), sorted({p for p in seen if seen.count(p) > 1})
    both = set(seen) & set(NOT_A_REFERENCE)
    assert not both, f"both an entry and a reason not to have one: {sorted(both)}"


def _joined(code: str) -> str:
    return " ".join(code.replace("\\\n", " ").split())


_BLOCKS: list[Block] | None = None


def _page_blocks() -> list[Block]:
    global _BLOCKS
    if _BLOCKS is None:
        from pagerun import pages

        _BLOCKS = [b for b in pages.all_blocks() if b.page_rel.startswith("docs/en/")]
    return _BLOCKS


def checked_programs() -> dict[str, list[str]]:
    """program -> the CPU recordings that show its check: a cost line or a bounded figure.
    A recording's programs are those its command names (not the modules they import)."""
    found: dict[str, list[str]] = {}
    cpu = recordings.OUTPUTS / "cpu"
    for path in sorted(cpu.rglob("*.txt")):
        rec = recordings.load_file(path, "cpu", "")
        body = rec.body
        if not (any(MENTIONS.search(line) for line in body.splitlines())
                or recordings.BOUNDED.search(body)):
            continue
        for program in re.findall(r"snippets/[\w/.-]+\.py", rec.meta.get("command", "")):
            found.setdefault(program, []).append(path.relative_to(cpu).as_posix())
    return found


def test_every_check_has_an_entry():
    have = {m.program for m in MUTATIONS} | set(NOT_A_REFERENCE)
    missing = {p: r for p, r in checked_programs().items() if p not in have}
    assert not missing, (
        "programs whose recordings print a cost line or a bounded figure, without a mutation "
        "in tests/test_mutations.py (MUTATIONS) that shows their check bites:\n"
        + "\n".join(f"  {p} ({', '.join(r)})" for p, r in sorted(missing.items())))


# --------------------------------------------------------------------------------------------
# each mutation is caught (make test-mutations)

def _copy(m: Mutation, into: Path) -> None:
    """The program's folder under into/snippets/<chapter>/, with the mutation applied."""
    src = ROOT / m.program
    dest = into / m.program
    shutil.copytree(src.parent, dest.parent,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    text = src.read_text(encoding="utf-8")
    assert text.count(m.old) == 1
    dest.write_text(text.replace(m.old, m.new), encoding="utf-8")


def run_in(command: str, cwd: Path, timeout: float) -> runner.Result:
    """``command`` from ``cwd`` as a page block runs from the repository root: warm where the
    engine can start it so, else ``bash -c``; its own process group, killed at the end."""
    block = Block(page=ROOT / "docs", lineno=0, syntax="bash", code=command + "\n")
    start = time.monotonic()
    cmds = runner.warm_commands(block)
    if cmds:
        from pagerun import warmpool

        out, code, timed_out = [], 0, False
        for assigns, argv in cmds:
            e = dict(runner.env(), **assigns)
            if argv[0] == "torchrun":
                argv = [shutil.which("torchrun", path=e["PATH"]) or "torchrun", *argv[1:]]
                e = warmpool.worker_env(e)
            text, code, timed_out = warmpool.run(argv, e, str(cwd),
                                                 timeout - (time.monotonic() - start))
            out.append(text)
            if timed_out:
                break
        return runner.Result(code, "".join(out), time.monotonic() - start, timed_out, "warm")
    e = runner.env()
    if runner.warm_on() and "torchrun" in command:
        from pagerun import warmpool

        e = warmpool.worker_env(e)
    proc = subprocess.Popen(["bash", "-c", command], cwd=cwd, env=e, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    timed_out = False
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        runner.kill_group(proc.pid)
        out, _ = proc.communicate()
    finally:
        runner.kill_group(proc.pid)
    return runner.Result(proc.returncode, out.decode("utf-8", "replace"),
                         time.monotonic() - start, timed_out)


def mutated_run(m: Mutation) -> runner.Result:
    with tempfile.TemporaryDirectory(prefix="mutation-") as tmp:
        _copy(m, Path(tmp))
        return run_in(m.command, Path(tmp), TIMEOUT)


def pagerun_background():
    """The mutated runs start with the session, in the engine's pool (``make test-mutations``)."""
    if not RUNS:
        return []
    return [(f"mutation:{m.program}", mutated_run, (m,)) for m in MUTATIONS]


@pytest.mark.skipif(not RUNS, reason="the mutated runs are a pass of their own: "
                                     "`make test-mutations` (DOCS_MUTATIONS=1; .ci/run runs it)")
@pytest.mark.parametrize("m", MUTATIONS, ids=_id)
def test_mutation_is_caught(m):
    res = runner.result(f"mutation:{m.program}", mutated_run, m)
    head = (f"{m.program}, mutated ({m.mutation}): {m.old!r} -> {m.new!r}\n"
            f"command: {m.command}\n")
    tail = "\n".join(res.output.rstrip().splitlines()[-40:])
    assert not res.timed_out, f"{head}timed out after {TIMEOUT} s; output (tail):\n{tail}"
    assert res.exit != 0, f"{head}exit 0: the check did not fail; output (tail):\n{tail}"
    assert re.search(m.must_fail, res.output), (
        f"{head}exit {res.exit}, but its own message /{m.must_fail}/ is not in the output "
        f"(tail):\n{tail}")
