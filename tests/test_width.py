"""Code fits the page: the content column shows about 80 characters of code, so every line a page
shows (included snippet sections and the commands typed on the page) is at most WIDTH characters;
a longer line scrolls sideways and hides its end. Wrap long commands with a backslash."""

from __future__ import annotations

import re

import pytest

from pagerun import pages, recordings

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


# ---- recorded outputs -------------------------------------------------------------------------
# What a program prints fits the code column too: an output block shows its recording as it is,
# and a line wider than OUTPUT_WIDTH hides its end, often the verdict ("equal up to float32
# round-off", "predicted ..., counted ...") the reader looks for. Programs shorten their labels,
# wrap, or print a table. Torch's own words (a traceback, a warning the warnings module prints, a
# log line of torch's) are not the program's: exempted, by the narrow patterns below only.
OUTPUT_WIDTH = 80
OUTPUT_CLASSES = ("cpu", "cpu-cuda-build")  # the classes this machine records; GPU ones follow
_TRACEBACK = "Traceback (most recent call last):"
_FRAME = re.compile(r'^\s+File "[^"]*", line \d+')  # a frame; its source line follows, indented
_WARNING = re.compile(r"^\S[^:]*:\d+: \w*Warning: ")  # FILE:LINE: CATEGORY: message
_TORCH_LOG = re.compile(r"^(?:\[?[WIEF]\d{4} \d\d:\d\d:\d\d\.\d+ |\[c10d\] )")  # glog, c10d
# the exception line of a traceback shown alone (tests/hosts.py --show): CLASS: message, the
# class's module path included (torch.distributed.DistNetworkError: ...)
_EXCEPTION = re.compile(r"^(?:[a-z_]\w*\.)*[A-Z]\w*(?:Error|Exception): ")
# Recordings allowed wide lines while their programs are being changed, each with the program
# that prints them ({"cpu/KEY.txt": "FOLDER/PROGRAM.py"}); empty since every program fits. A
# listed recording that fits fails: shrink it as they are fixed.
WIDE_ALLOWED: dict[str, str] = {}


def wide_lines(body: str) -> tuple[list[str], int]:
    """(the lines of a recording's body wider than OUTPUT_WIDTH that its program printed,
    how many wide lines were exempted as torch's own words)."""
    wide, exempted, in_traceback, after_frame = [], 0, False, False
    for line in body.splitlines():
        own = True
        if line == _TRACEBACK:
            in_traceback, own = True, False
        elif in_traceback and _FRAME.match(line):
            after_frame, own = True, False
        elif in_traceback and after_frame and line.startswith("    "):
            after_frame, own = False, False  # the frame's source line
        elif in_traceback:  # the exception line that ends the traceback
            in_traceback, after_frame, own = False, False, False
        elif _WARNING.match(line) or _TORCH_LOG.match(line) or _EXCEPTION.match(line):
            own = False
        if len(line.expandtabs()) > OUTPUT_WIDTH:
            if own:
                wide.append(line)
            else:
                exempted += 1
    return wide, exempted


def _recordings():
    for cls in OUTPUT_CLASSES:
        for path in sorted((recordings.OUTPUTS / cls).rglob("*.txt")):
            yield path.relative_to(recordings.OUTPUTS).as_posix(), recordings.load_file(
                path, cls, "")


def test_recorded_output_fits_the_column(capsys):
    wide, allowed, exempted, checked = [], [], 0, 0
    for name, rec in _recordings():
        lines, n = wide_lines(rec.body)
        checked, exempted = checked + 1, exempted + n
        program = rec.meta.get("files", "").split("@")[0]
        if name in WIDE_ALLOWED:
            allowed.append(f"{name} ({len(lines)} lines, {WIDE_ALLOWED[name]})")
            if not lines:
                wide.append(f"{name}: fits now; remove it from WIDE_ALLOWED")
            continue
        wide += [f"{name} ({program}): {len(line)}: {line[:70]}…" for line in lines]
    with capsys.disabled():
        print(f"\nrecorded outputs: {checked} checked, {exempted} wide lines exempted as "
              f"torch's own words, {len(allowed)} recordings allowed wide lines "
              f"(WIDE_ALLOWED):\n  " + "\n  ".join(allowed))
    assert not wide, (f"{len(wide)} recorded lines wider than {OUTPUT_WIDTH} characters "
                      "(shorten the label, wrap or print a table, and re-record):\n"
                      + "\n".join(wide))


@pytest.mark.parametrize("body, wide, exempted", [
    ("x" * 81 + "\n", 1, 0),
    ("x" * 80 + "\n", 0, 0),
    (f"{_TRACEBACK}\n  File \"/a.py\", line 3, in <module>\n    " + "f(" * 40 + ")\n"
     "RuntimeError: " + "y" * 80 + "\n" + "z" * 81 + "\n", 1, 2),
    ("/site-packages/torch/x.py:12: UserWarning: " + "w" * 60 + "\n", 0, 1),
    ("[W1128 04:00:00.123456 12 torch/csrc/x.cpp:1] " + "l" * 60 + "\n", 0, 1),
    ("\t" * 10 + "x\n", 1, 0),
    ("torch.distributed.DistNetworkError: " + "n" * 60 + "\n", 0, 1),
    ("rank 0: RuntimeError: " + "m" * 60 + "\n", 1, 0),  # the program's line, not torch's
])
def test_the_output_check_can_fail(body, wide, exempted):
    lines, n = wide_lines(body)
    assert (len(lines), n) == (wide, exempted)
