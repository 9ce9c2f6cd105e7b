"""One runnable notebook per chapter, generated from ``snippets/<chapter>/*.py`` (the MkDocs hook
``hooks/notebooks.py`` calls ``write_all`` before each build).

Nothing is stored twice: before each build, ``docs/<lang>/notebooks/<chapter>.ipynb`` is written
(git-ignored) from the snippet files and from the commands that the pages run. Each program gets
a markdown cell naming the file, a ``%%writefile`` cell that writes it to ``snippets/<chapter>/``,
and one ``!`` (or ``%%bash``) cell per command the page runs, exactly as the page runs it: the
programs parse their command line and some start several processes, so they run as programs,
not inside the kernel. Cells for commands that need a GPU are tagged ``needs_cuda`` /
``needs_2_gpus``.

Beside each notebook, ``<chapter>.md`` shows it as a page of the site (``as_page``): the same
cells, the code highlighted as on every other page; the ``.ipynb`` is published as it is, for
download. ``pages.pages()`` and the test collector leave that folder out (its commands are the
chapters' own). ``tests/test_notebooks.py`` executes the notebooks with nbclient.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

from pagerun import pages

ROOT = pages.ROOT

SECTION = re.compile(r"^\s*# --8<-- \[(start|end):[\w-]+\]\s*$")
TEXT = {
    "en": {
        "title": "# {title}: notebook",
        "intro": ("Generated from the programs in `snippets/{chapter}/`, for the chapter "
                  "[{title}]({page}). Each program is the file the chapter shows, run the way the "
                  "chapter runs it: written to `snippets/{chapter}/` with `%%writefile`, then "
                  "started from a shell cell with the chapter's own command. Run the "
                  "cells from the top; the first one creates the folder. "
                  "[Download this notebook]({chapter}.ipynb)."),
        "program": "## {path}",  # the file name as the heading: one entry of the contents each
        "run": "The chapter runs it with:",
        "gpu": "**Needs a GPU** (`{mark}`): on a machine without one the program says so and stops.",
        "writefile": "The next cell writes the program to disk; the cells after it run it.",
    },
    "zh": {
        "title": "# {title}：notebook",
        "intro": ("由 `snippets/{chapter}/` 中的程序生成，对应章节[{title}]({page})。每个程序都是章节中"
                  "展示的那个文件，运行方式也与章节相同：先用 `%%writefile` 写到 `snippets/{chapter}/`，"
                  "再在 shell 单元中用章节里的命令启动。请从上往下依次运行，第一个单元会创建目录。"
                  "[下载这个 notebook]({chapter}.ipynb)。"),
        "program": "## {path}",  # the file name as the heading: one entry of the contents each
        "run": "章节中的运行命令：",
        "gpu": "**需要 GPU**（`{mark}`）：在没有 GPU 的机器上，程序会说明这一点并退出。",
        "writefile": "下一个单元把程序写入文件，之后的单元运行它。",
    },
}


def chapters() -> list[str]:
    return sorted(d.name for d in pages.SNIPPETS.iterdir() if d.is_dir() and any(d.glob("*.py")))


def _gpu_mark(marks) -> str | None:
    for m in marks:
        for need in ("needs_2_gpus", "needs_cuda"):
            if m.startswith(f"pytest.mark.{need}"):
                return need
    return None


def _md(text: str) -> dict:
    return {"cell_type": "markdown", "metadata": {}, "source": text}


def _code(text: str, tags=()) -> dict:
    meta = {"tags": list(tags)} if tags else {}
    return {"cell_type": "code", "metadata": meta, "execution_count": None, "outputs": [],
            "source": text}


def _chapter_page(chapter: str, lang: str) -> Path | None:
    page = pages.DOCS / lang / chapter / "index.md"
    return page if page.exists() else None


def _chapter_link(chapter: str, lang: str, markdown: bool = False) -> str:
    """The intro's link to the chapter (the home page where the chapter has none): in the
    notebook, from the page's address (<lang>/notebooks/<chapter>/); on the page, from its
    Markdown file, which MkDocs checks and turns into that address."""
    if _chapter_page(chapter, lang):
        return f"../{chapter}/index.md" if markdown else f"../../{chapter}/"
    return "../index.md" if markdown else "../../"


def _title(chapter: str, lang: str) -> str:
    page = _chapter_page(chapter, lang)
    if page:
        for line in page.read_text(encoding="utf-8").splitlines():
            m = pages.HEADING.match(line)
            if m and len(m.group(1)) == 1:
                return pages.HEADING_ID.sub("", m.group(2)).strip()
    return chapter


def program_code(path: str) -> str:
    """The program as a reader runs it: the file without the section markers."""
    lines = (ROOT / path).read_text(encoding="utf-8").splitlines()
    return "\n".join(l for l in lines if not SECTION.match(l)).strip("\n") + "\n"


def _blocks(lang: str) -> list[tuple[pages.Block, list[str]]]:
    """Every block of the language's pages with its snippets, read once for all chapters."""
    return [(b, b.snippets) for b in pages.all_blocks(lang)]


_blocks_once = functools.lru_cache(maxsize=None)(_blocks)  # for the tests: one process, many calls


def build(chapter: str, lang: str, blocks: list[tuple[pages.Block, list[str]]] | None = None
          ) -> dict:
    """The chapter's notebook; ``blocks``: each of ``pages.all_blocks(lang)`` with its
    ``snippets`` (read once per build, not once per chapter), when the caller has them."""
    t = TEXT[lang]
    blocks = _blocks_once(lang) if blocks is None else blocks
    title = _title(chapter, lang)
    cells = [_md(t["title"].format(title=title) + "\n\n" + t["intro"].format(
                 chapter=chapter, title=title, page=_chapter_link(chapter, lang))),
             _code(f'import os\n\nos.makedirs("snippets/{chapter}", exist_ok=True)')]
    # programs in the order the pages first run them, then any others
    files = sorted((ROOT / "snippets" / chapter).glob("*.py"))
    rel = [f.relative_to(ROOT).as_posix() for f in files]
    first, runs_of = {}, {}  # each block's snippets read once (every block, every chapter)
    for i, (b, snippets) in enumerate(blocks):
        for s in snippets:
            first.setdefault(s, i)
            runs_of.setdefault(s, {}).setdefault(b.code, b)
    for path in sorted(rel, key=lambda s: (first.get(s, len(blocks)), s)):
        runs = list(runs_of.get(path, {}).values())
        # blocks on hosts of their own need root and tests/hosts.py: not a notebook's to run
        runs = [b for b in runs if not any(m.startswith(("pytest.mark.needs_root_netns",
                                                          "pytest.mark.needs_slurm"))
                                           for m in b.marks)]
        marks = sorted({_gpu_mark(b.marks) for b in runs} - {None})
        text = t["program"].format(path=path)
        if runs:
            text += "\n\n" + t["run"] + "\n\n" + "\n".join(
                f"```bash\n{b.code.strip()}\n```" for b in runs)
        if marks:
            text += "\n\n" + t["gpu"].format(mark=marks[0])
        cells += [_md(text + "\n\n" + t["writefile"]),
                  _code(f"%%writefile {path}\n" + program_code(path))]
        for b in runs:
            cmd = b.code.strip()  # one line: a ! cell; a script: a %%bash cell, run as one shell
            cells.append(_code(f"%%bash\n{cmd}" if "\n" in cmd else f"!{cmd}",
                               [m for m in [_gpu_mark(b.marks)] if m]))
    for i, c in enumerate(cells):  # nbformat 4.5: a stable id per cell; the source as lines
        c["id"] = f"{chapter}-{i}"
        c["source"] = c["source"].splitlines(keepends=True)
    return {"cells": cells, "metadata": {
                "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                "language_info": {"name": "python"}},
            "nbformat": 4, "nbformat_minor": 5}


def target(chapter: str, lang: str) -> Path:
    return pages.DOCS / lang / "notebooks" / f"{chapter}.ipynb"


def as_page(chapter: str, lang: str, nb: dict) -> str:
    """The notebook as a page of the site: its cells in order, Markdown as it is and each code
    cell a code block (a cell magic as the block's title), the link to the chapter the page's."""
    cells = []
    for cell in nb["cells"]:
        text = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            cells.append(text.replace(f"]({_chapter_link(chapter, lang)})",
                                      f"]({_chapter_link(chapter, lang, markdown=True)})"))
            continue
        fence = "`" * max(3, 1 + max(map(len, re.findall("`+", text)), default=0))
        first, _, rest = text.partition("\n")
        if first.startswith("%%"):  # %%writefile PATH, %%bash
            lang_ = "python" if first.startswith("%%writefile") else "bash"
            cells.append(f'{fence}{lang_} title="{first}"\n{rest.rstrip()}\n{fence}')
        else:
            lang_ = "bash" if text.startswith("!") else "python"
            cells.append(f"{fence}{lang_}\n{text}\n{fence}")
    # search: the chapters hold the same programs and text
    return "---\nsearch:\n  exclude: true\n---\n\n" + "\n\n".join(cells) + "\n"


def write_all() -> list[Path]:
    """Each chapter's notebook and its page, ``docs/<lang>/notebooks/<chapter>.ipynb`` and
    ``.md`` (git-ignored; each written only when it changed: `mkdocs serve` stays calm)."""
    written = []
    for lang in pages.LANGS:
        blocks = _blocks(lang)  # read afresh for each build (mkdocs serve), once per language
        for chapter in chapters():
            path = target(chapter, lang)
            nb = build(chapter, lang, blocks)
            for out, text in ((path, json.dumps(nb, ensure_ascii=False, indent=1) + "\n"),
                              (path.with_suffix(".md"), as_page(chapter, lang, nb))):
                if not out.exists() or out.read_text(encoding="utf-8") != text:
                    out.parent.mkdir(parents=True, exist_ok=True)
                    out.write_text(text, encoding="utf-8")
            written.append(path)
    return written
