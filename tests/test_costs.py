"""Predicted and counted costs agree in every CPU recording.

A program that predicts a cost by formula and counts it in the run prints one line per quantity,
in one form (a contract other tools read)::

    ring all-reduce, bytes sent per rank: predicted 6,291,456 B, counted 6,291,456 B

WHAT, a colon, ``predicted N UNIT, counted N UNIT``, each N an integer written as ``f"{n:,}"``
writes it, each UNIT one word. On the CPU the counts are exact, so in every CPU recording both
numbers and both units must be equal, and a line that mentions ``predicted`` and then ``counted``
in any other form is an error: a contract that drifts is a check that stops checking.
"""

from __future__ import annotations

import re

import pytest

from pagerun import recordings

NUM = r"\d{1,3}(?:,\d{3})*"
CONTRACT = re.compile(rf"^(?P<what>\S.*?): predicted (?P<p>{NUM}) (?P<pu>[^\s,]+), "
                      rf"counted (?P<c>{NUM}) (?P<cu>[^\s,]+)$")
MENTIONS = re.compile(r"\bpredicted\b.*\bcounted\b")
CPU = recordings.OUTPUTS / "cpu"
FILES = sorted(CPU.rglob("*.txt"))


def problems(body: str) -> tuple[int, list[str]]:
    """(number of contract lines, what is wrong) in one recording's body."""
    found, bad = 0, []
    for line in body.splitlines():
        line = line.rstrip()
        if not MENTIONS.search(line):
            continue
        m = CONTRACT.match(line)
        if not m:
            bad.append(f"not in the form 'WHAT: predicted N UNIT, counted N UNIT': {line}")
            continue
        found += 1
        p, c = (int(m.group(k).replace(",", "")) for k in ("p", "c"))
        if f"{p:,}" != m.group("p") or f"{c:,}" != m.group("c"):
            bad.append(f"a number not written as f'{{n:,}}' writes it: {line}")
        elif p != c or m.group("pu") != m.group("cu"):
            bad.append(f"predicted and counted differ: {line}")
    return found, bad


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.relative_to(CPU).as_posix())
def test_predicted_equals_counted(path):
    _, bad = problems(recordings.load_file(path, "cpu", "").body)
    assert not bad, f"{path.relative_to(recordings.ROOT)}:\n  " + "\n  ".join(bad)


def test_some_recording_has_costs():
    """Not vacuous: the collectives chapter prints such lines, and they are found."""
    counts = {p.relative_to(CPU).as_posix(): problems(p.read_text(encoding="utf-8"))[0]
              for p in FILES}
    assert counts.get("collectives/ring.txt", 0) >= 6, counts.get("collectives/ring.txt")
    assert sum(counts.values()) >= 6


@pytest.mark.parametrize("line, wrong", [
    ("ring all-reduce, bytes sent per rank: predicted 6,291,456 B, counted 6,291,456 B", None),
    ("ring all-gather, sends per rank: predicted 1 send, counted 1 send", None),
    ("ring all-reduce, bytes sent per rank: predicted 6,291,456 B, counted 4,194,304 B",
     "differ"),
    ("all-reduce per step: predicted 9,437,184 B, counted 9,437,184 KiB", "differ"),
    ("all-reduce per step: predicted 9437184 B, counted 9437184 B", "form"),
    ("all-reduce per step: predicted 9,437,184 B; counted 9,437,184 B", "form"),
    ("all-reduce per step: predicted 9,437,184.0 B, counted 9,437,184.0 B", "form"),
    ("all-reduce per step: predicted 009,437 B, counted 009,437 B", "written"),
    ("DistributedSampler (default)   counted 12 samples: mean of means 0.5833", None),
])
def test_the_check_can_fail(line, wrong):
    found, bad = problems(f"header\n{line}\n")
    if wrong is None:
        assert not bad
    else:
        assert len(bad) == 1 and wrong in bad[0], bad
