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
"""

from __future__ import annotations

import re

import pytest

from pagerun import pages

DEFAULT = re.compile(r"\bdefault(?:s|ed)?\b|默认|缺省", re.I)
VERSION = re.compile(r"\b(?:since|from|as of|in|until|before|after)\s+(?:PyTorch|torch)?\s*"
                     r"v?2\.\d+\b|(?:PyTorch|torch)\s*v?[12]\.\d+|v?2\.\d+\s*(?:版|起|之后|以前|开始)",
                     re.I)
UNITS = (r"(?:ms|µs|us|ns|s|seconds?|minutes?|hours?|秒|分钟|小时|毫秒|微秒|GB|GiB|MB|MiB|KB|"
         r"KiB|TB|TiB|bytes?|字节|%|×|x|times|倍|TFLOP/s|GFLOP/s|GB/s)")
NUMBER = re.compile(rf"(?<![\w.#/-])\d[\d,.]*\s?{UNITS}(?![\w/])")
CLAIM_MARK = re.compile(r"<!--\s*claim:\s*([^>]*?)\s*-->")
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
        marks = [k.strip() for m in CLAIM_MARK.findall(unit) for k in m.split(",")]
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
