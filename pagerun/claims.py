"""Claims bound to recordings: a sentence that says what an output shows carries a condition that
is evaluated against every recording of that output.

In a page, next to the sentence (same paragraph, or the line after it)::

    <!-- claim: devices/item_cost gpu: "per-step / at-end:" < 1.3 -->
    <!-- claim: cuda/pinned gpu: "pin_memory() each time:" > "pageable:"; cuda/pinned gpu: "pinned once:" > "pin_memory() each time:" -->
    <!-- claim: cuda/determinism *: has "matmul on" -->

One mark holds one or more items separated by ``;``. An item is ``KEY`` alone (the figure is
printed by that recording, nothing to evaluate), or ``KEY CLASSES: CONDITION`` where CLASSES is
``cpu``, ``gpu``, ``cpu-cuda-build``, a comma-separated list of them, or ``*`` (every class that
has a recording of KEY), and CONDITION is one of

- ``"LABEL" OP NUMBER``: the first number after LABEL, on LABEL's line (``22.1`` in
  ``pin_memory() each time: 22.1 GB/s``), compared with NUMBER; OP is ``<  <=  >  >=  ==  !=``;
- ``"LABEL" OP "LABEL2"``: two such numbers compared;
- ``has "TEXT"`` / ``lacks "TEXT"``: the recording contains (does not contain) TEXT, any run of
  spaces and line breaks counting as one space.

``evaluate`` checks one item against one recording; ``check_page`` every item of a page against
every recording it names; ``contradicted_by`` the items of all pages that a new recording would
break (``pytest --update-outputs`` refuses to write such a recording).
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass
from pathlib import Path

from pagerun import recordings

MARK = re.compile(r"<!--\s*claim:\s*(.*?)\s*-->", re.S)
ITEM = re.compile(r"^(?P<key>[\w./-]+)\s+(?P<classes>\*|[\w-]+(?:,[\w-]+)*):\s*(?P<cond>.+)$", re.S)
_Q = r'"((?:[^"\\]|\\.)*)"'
COMPARE = re.compile(rf"^{_Q}\s*(<=|>=|==|!=|<|>)\s*(?:{_Q}|({recordings._NUM}))$")
CONTAINS = re.compile(rf"^(has|lacks)\s+{_Q}$")
OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
       "==": operator.eq, "!=": operator.ne}
NUMBER = re.compile(recordings._NUM)


@dataclass
class Item:
    page: Path
    line: int
    key: str
    classes: str | None = None  # None: a plain mark, nothing to evaluate
    cond: str | None = None

    def classes_for(self) -> list[str]:
        if self.classes == "*":
            return [c for c in recordings.CLASSES if recordings.load(c, self.key)]
        return self.classes.split(",") if self.classes else []

    def where(self) -> str:
        return f"{self.page.relative_to(recordings.ROOT).as_posix()}:{self.line}"


class BadCondition(ValueError):
    pass


def items(page: Path) -> list[Item]:
    """Every item of every claim mark on a page, with its line."""
    text = page.read_text(encoding="utf-8")
    return [i for m in MARK.finditer(text)
            for i in items_of(m.group(0), page, text.count("\n", 0, m.start()) + 1)]


def items_of(mark: str, page: Path, line: int) -> list[Item]:
    """The items of one claim mark (``<!-- claim: ... -->``)."""
    out = []
    for m in MARK.finditer(mark):
        for part in re.split(r';(?=(?:[^"]*"[^"]*")*[^"]*$)', m.group(1)):  # not inside quotes
            part = re.sub(r"\s*\n\s*", " ", part.strip())  # a mark may wrap; quotes keep spaces
            if not part:
                continue
            cm = ITEM.match(part)
            if cm:
                out.append(Item(page, line, cm.group("key"), cm.group("classes"), cm.group("cond")))
            else:  # "KEY" or "KEY, KEY2" or a program path
                out += [Item(page, line, k.strip()) for k in part.split(",") if k.strip()]
    return out


def _figure(body: str, label: str) -> float:
    for line in body.splitlines():
        at = line.find(label)
        if at >= 0:
            m = NUMBER.search(line, at + len(label))
            if m:
                return float(m.group(0))
            raise BadCondition(f"no number after {label!r} in: {line.strip()}")
    raise BadCondition(f"{label!r} is not in the recording")


def evaluate(cond: str, body: str) -> tuple[bool, str]:
    """(holds, what was compared) for one condition on one recording's body."""
    m = COMPARE.match(cond)
    if m:
        label, op, label2, number = m.groups()
        left = _figure(body, label)
        right = _figure(body, label2) if label2 is not None else float(number)
        return OPS[op](left, right), f"{left:g} {op} {right:g}"
    m = CONTAINS.match(cond)
    if m:  # runs of spaces count as one: column padding is layout, not meaning
        found = " ".join(m.group(2).split()) in " ".join(body.split())
        return found == (m.group(1) == "has"), f"{m.group(2)!r} {'found' if found else 'absent'}"
    raise BadCondition(f"cannot read the condition {cond!r} (see pagerun/claims.py)")


def check_item(item: Item, bodies: dict[str, str] | None = None) -> list[str]:
    """Problems of one item: an unknown class, a missing recording, a condition that fails.

    ``bodies`` overrides the recording of a class (a run about to be recorded)."""
    problems = []
    classes = item.classes_for()
    if item.classes and not classes:
        return [f"{item.where()}: claim on {item.key} {item.classes}: no recording to check"]
    for cls in classes:
        if cls not in recordings.CLASSES:
            problems.append(f"{item.where()}: unknown device class {cls!r}")
            continue
        body = (bodies or {}).get(cls)
        if body is None:
            rec = recordings.load(cls, item.key)
            if rec is None:
                problems.append(f"{item.where()}: claim on {cls}/{item.key}, which is not recorded")
                continue
            body = rec.body
        try:
            ok, detail = evaluate(item.cond, body)
        except BadCondition as e:
            problems.append(f"{item.where()}: {cls}/{item.key}: {e}")
            continue
        if not ok:
            problems.append(f"{item.where()}: {cls}/{item.key} contradicts the page: "
                            f"{item.cond} is false ({detail})")
    return problems


def contradicted_by(key: str, cls: str, body: str, pages_: list[Path]) -> list[str]:
    """What a new recording ``cls/key`` with this body would contradict, on these pages."""
    out = []
    for page in pages_:
        for item in items(page):
            if item.key == key and item.classes and (item.classes == "*" or cls in item.classes.split(",")):
                out += check_item(Item(item.page, item.line, key, cls, item.cond), {cls: body})
    return out
