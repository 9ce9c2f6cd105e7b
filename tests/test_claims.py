"""Every claim a reader could check has its evidence next to it.

A *claim* is a paragraph, list item or table row of page prose that states a default, a version
("since 2.4", "in torch 2.13"), or a number with a unit ("10 minutes", "25 MB", "1.5×"). Its
evidence, in the same paragraph, is one of:

- a link to its source: PyTorch's documentation or source, a paper, NVIDIA's docs (``](http``);
- a link to the section of this site that runs a program showing it (``](page.md#id)``);
- ``<!-- claim: KEY -->`` where KEY is a recording this page shows (``<!-- output: KEY -->``),
  i.e. the number is printed by a program on this page (``KEY, KEY2`` for several); or the
  path of a program in this repository that measures it (``<!-- claim: tests/x.py -->``),
  for a measurement that is too slow to run on every test.

A claim mark may stand on the line after its paragraph.

The test lists every claim without evidence, with its page and line.

A claim mark that names a recording also says what that recording shows, as a condition evaluated
against every recording of it, for every device class that has one (``pagerun/claims.py``: e.g.
``<!-- claim: cuda/pinned gpu: "pin_memory() each time:" > "pageable:" -->``): a sentence and an
output that disagree fail here, whichever of the two changed. And no page promises an output that
already exists ("once a GPU run is recorded") or cites a path that is not in the repository.
"""

from __future__ import annotations

import re

import pytest

from pagerun import claims as claimlib
from pagerun import pages, recordings

DEFAULT = re.compile(r"\bdefault(?:s|ed)?\b|默认|缺省", re.I)
VERSION = re.compile(r"\b(?:since|from|as of|in|until|before|after)\s+(?:PyTorch|torch)?\s*"
                     r"v?2\.\d+\b|(?:PyTorch|torch)\s*v?[12]\.\d+|v?2\.\d+\s*(?:版|起|之后|以前|开始)",
                     re.I)
UNITS = (r"(?:ms|µs|us|ns|s|seconds?|minutes?|hours?|秒|分钟|小时|毫秒|微秒|GB|GiB|MB|MiB|KB|"
         r"KiB|TB|TiB|bytes?|字节|%|×|x|times|倍|TFLOP/s|GFLOP/s|GB/s)")
NUMBER = re.compile(rf"(?<![\w.#/-])\d[\d,.]*\s?{UNITS}(?![\w/])")
CLAIM_MARK = claimlib.MARK  # one grammar: pagerun/claims.py
OUTPUT = re.compile(r"<!--\s*output:\s*([\w/.-]+)")
LINK = re.compile(r"\]\((?:https?://|[\w./-]*\.md#[\w-]+|#[\w-]+)")
FENCE = re.compile(r"^\s*(```|~~~)")


def units(text: str) -> list[tuple[int, str]]:
    """(line number, text) of each paragraph, list item and table row outside code fences."""
    out, cur, start, fenced = [], [], 0, False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            if cur:
                out.append((start, " ".join(cur)))
                cur = []
            continue
        if fenced:
            continue
        s = line.strip()
        new = (not s or s.startswith(("#", "|", "- ", "* ", "!!!", "???", "===", "<!--"))
               or re.match(r"\d+\.\s", s)) and not CLAIM_MARK.match(s)
        if new and cur:
            out.append((start, " ".join(cur)))
            cur = []
        if s.startswith("<!--") and not CLAIM_MARK.match(s):
            continue
        if s.startswith(("#", "|")):
            out.append((n, s))
        elif s:
            if not cur:
                start = n
            cur.append(s)
    if cur:
        out.append((start, " ".join(cur)))
    return out


def strip_code(text: str) -> str:
    return re.sub(r"`[^`]*`", "``", text)


def claims(page) -> list[tuple[int, str, str]]:
    text = page.read_text(encoding="utf-8")
    keys = set(OUTPUT.findall(text))
    bad = []
    for n, unit in units(text):
        if unit.startswith("#"):
            continue
        prose = strip_code(CLAIM_MARK.sub("", re.sub(r"\]\([^)]*\)", "]", unit)))
        kind = ("default" if DEFAULT.search(prose) else "version" if VERSION.search(prose)
                else "number" if NUMBER.search(prose) else None)
        if kind is None or LINK.search(unit):
            continue
        marks = [i.key for m in CLAIM_MARK.finditer(unit)
                 for i in claimlib.items_of(m.group(0), page, n)]
        if marks and all(k in keys or (pages.ROOT / k).is_file() for k in marks):
            continue
        bad.append((n, kind, unit[:160]))
    return bad


@pytest.mark.parametrize("page", [p for lang in pages.LANGS for p in pages.pages(lang)],
                         ids=lambda p: p.relative_to(pages.DOCS).as_posix())
def test_every_claim_has_its_evidence(page):
    bad = claims(page)
    assert not bad, f"{len(bad)} claims without a source link or a recording:\n" + "\n".join(
        f"  {page.relative_to(pages.ROOT)}:{n} ({kind}): {u}" for n, kind, u in bad)


def test_the_check_can_fail(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("The timeout defaults to 10 minutes.\n\nIt took 3.5 s here.\n\n"
                    "It took 3 s. <!-- claim: tests/no-such-program.py -->\n\n"
                    "It took 3 s. <!-- claim: tests/stress_ddp.py -->\n\n"
                    "It took 3.5 s here. <!-- claim: x -->\n\n"
                    "It took 3.5 s here.\n<!-- claim: x -->\n```bash\necho\n```\n"
                    "<!-- output: x -->\n\nSee [the docs](https://docs.pytorch.org/x): default.\n")
    assert [k for _, k, _ in claims(page)] == ["default", "number", "number"]


# --------------------------------------------------------------------------------------------
# claims bound to recordings

ALL_PAGES = [p for lang in pages.LANGS for p in pages.pages(lang)]


def _ids(p):
    return p.relative_to(pages.DOCS).as_posix()


def unbound(page) -> list[str]:
    """Claim marks that name a recording but lack a condition for a class that has one."""
    keys = set(OUTPUT.findall(page.read_text(encoding="utf-8")))
    by_line: dict[int, list] = {}
    for item in claimlib.items(page):
        by_line.setdefault(item.line, []).append(item)
    bad = []
    for line, its in sorted(by_line.items()):
        for key in sorted({i.key for i in its if i.key in keys}):
            have = set()
            for i in its:
                if i.key == key and i.classes:
                    have |= set(i.classes_for())
            for cls in recordings.CLASSES:
                if recordings.load(cls, key) is not None and cls not in have:
                    bad.append(f"{_ids(page)}:{line}: what does {cls}/{key} show? the mark has "
                               f"no condition for it")
    return bad


@pytest.mark.parametrize("page", ALL_PAGES, ids=_ids)
def test_every_claim_on_a_recording_holds_on_every_recording(page):
    problems = [p for item in claimlib.items(page) if item.classes
                for p in claimlib.check_item(item)]
    problems += unbound(page)
    assert not problems, f"{len(problems)} claims not bound to, or contradicted by, a recording:\n" \
        + "\n".join("  " + p for p in problems)


def test_conditions_can_fail(tmp_path):
    body = "pageable:  7.8 GB/s\npin_memory() each time: 22.1 GB/s   vs pageable: 2.85x\nok\n"
    ev = claimlib.evaluate
    assert ev('"pin_memory() each time:" > "pageable:"', body)[0]
    assert not ev('"pin_memory() each time:" < 10', body)[0]
    assert ev('"vs pageable:" > 2', body)[0] and not ev('"vs pageable:" < 1.1', body)[0]
    assert ev('has "ok"', body)[0] and not ev('lacks "ok"', body)[0]
    with pytest.raises(claimlib.BadCondition):
        ev('"missing label" > 1', body)
    page = tmp_path / "p.md"
    page.write_text("Pinning each step gains nothing. <!-- claim: k gpu: \"x:\" < 1.1; k cpu: has "
                    "\"y\" -->\n")
    its = claimlib.items(page)
    assert [(i.key, i.classes, i.cond) for i in its] == [("k", "gpu", '"x:" < 1.1'),
                                                         ("k", "cpu", 'has "y"')]


# --------------------------------------------------------------------------------------------
# no stale promises, no paths outside the repository

PROMISE = re.compile(
    r"(?:once|when|after|until) (?:a|the) GPU run (?:is|has been) recorded|GPU tab\w* (?:fills|will)"
    r"|fills? in (?:when|once)|needs a GPU run|not (?:been )?(?:run|recorded) yet|will be recorded"
    r"|stays empty until|保持为空|直到有人在"
    r"|录制 GPU 运行之后|GPU 标签页会|会填上|在 GPU 上运行测试后|还没有在 GPU 上|尚未在 GPU 上", re.I)
REPO_PATH = re.compile(r"(?<![\w/.-])((?:\.\./)*(?:shared|snippets|outputs|tests|docs|pagerun|hooks"
                       r"|overrides)/[\w./-]*[\w])")


def stale_text(page) -> list[str]:
    """Promises of an output that exists, and paths that are not in the repository."""
    text = page.read_text(encoding="utf-8")
    has_gpu = any(recordings.load("gpu", k) for k in OUTPUT.findall(text))
    bad = []
    for n, unit in units(text):
        if unit.startswith("#"):
            continue
        m = PROMISE.search(re.sub(r"\]\([^)]*\)", "]", unit))
        if m and has_gpu:
            bad.append(f"{_ids(page)}:{n}: promises an output this page already shows "
                       f"({m.group(0)!r}): {unit[:120]}")
        for path in REPO_PATH.findall(re.sub(r"<!--.*?-->", "", unit)):
            clean = path.split("#")[0].rstrip(".")
            if path.startswith(("../", "shared/")) or not (pages.ROOT / clean).exists():
                if not (pages.ROOT / clean).with_suffix(".md").exists():
                    bad.append(f"{_ids(page)}:{n}: cites {path!r}, which is not in the repository")
    return bad


@pytest.mark.parametrize("page", ALL_PAGES, ids=_ids)
def test_no_stale_promise_and_no_path_outside_the_repository(page):
    bad = stale_text(page)
    assert not bad, "\n".join(bad)


def test_the_stale_text_check_can_fail(tmp_path, monkeypatch):
    page = tmp_path / "p.md"
    page.write_text("The GPU tab fills in when the suite runs on a GPU.\n\nSee "
                    "`shared/reviews/x.md` and `snippets/no/such.py`.\n\n```bash\necho\n```\n\n"
                    "<!-- output: devices/tensors -->\n")
    monkeypatch.setattr(pages, "DOCS", tmp_path)
    bad = stale_text(page)
    assert len(bad) == 3, bad


def test_a_new_recording_that_contradicts_a_page_is_refused():
    """What `pytest --update-outputs` asks before it writes a recording (pagerun.runner.check)."""
    rec = recordings.load("gpu", "cuda/pinned")
    assert claimlib.contradicted_by("cuda/pinned", "gpu", rec.body, pages.pages()) == []
    worse = re.sub(r"vs pageable: [\d.]+x", "vs pageable: 0.95x", rec.body)
    assert worse != rec.body
    against = claimlib.contradicted_by("cuda/pinned", "gpu", worse, pages.pages())
    assert against and all("contradicts the page" in a for a in against), against
