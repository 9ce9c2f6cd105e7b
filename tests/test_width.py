"""Code fits the page: the content column shows about 80 characters of code, so every line a page
shows (included snippet sections and the commands typed on the page) is at most WIDTH characters;
a longer line scrolls sideways and hides its end. Wrap long commands with a backslash."""

from __future__ import annotations

import pytest

from pagerun import pages

WIDTH = 88
PAGES = [p.relative_to(pages.DOCS).as_posix() for p in pages.pages()]


def _fences(text: str):
    """(info string, lines) of every fenced block of a page, without the fence's own indent
    (a block inside a content tab is indented on the page, not on the screen)."""
    fence, info, body, indent = None, "", [], 0
    for line in text.split("\n"):
        stripped = line.strip()
        if fence is None and stripped.startswith("```"):
            fence = stripped[: len(stripped) - len(stripped.lstrip("`"))]
            info, body, indent = stripped[len(fence):], [], len(line) - len(line.lstrip())
        elif fence is not None and stripped == fence:
            yield info, body
            fence = None
        elif fence is not None:
            body.append(line[indent:] if line[:indent].strip() == "" else line)


@pytest.mark.parametrize("page", PAGES)
def test_code_on_the_page_fits_the_column(page):
    text = (pages.DOCS / page).read_text(encoding="utf-8")
    wide = []
    for info, body in _fences(text):
        shown = pages.expand("\n".join(body)).split("\n") if pages.INCLUDE.search(
            "\n".join(body)) else body
        wide += [f"{len(line)}: {line.strip()[:60]}…" for line in shown if len(line) > WIDTH]
    assert not wide, f"lines wider than {WIDTH} characters (wrap them):\n" + "\n".join(wide)


def test_snippet_files_fit_the_column():
    """Whole programs too: a reader opens them from the page's link."""
    wide = [f"{p.relative_to(pages.ROOT)}:{i}: {len(line)}"
            for p in sorted(pages.SNIPPETS.rglob("*.py"))
            for i, line in enumerate(p.read_text(encoding="utf-8").split("\n"), 1)
            if len(line) > WIDTH]
    assert not wide, f"{len(wide)} lines wider than {WIDTH} characters:\n" + "\n".join(wide)
