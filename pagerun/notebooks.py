"""One runnable notebook per page, generated from ``snippets/<folder>/*.py`` (the MkDocs hook
``hooks/notebooks.py`` calls ``write_all`` before each build).

Each program of ``snippets/<folder>/`` is in the notebook of the page that runs it first, in the
reading order (mkdocs.yml's nav): ``docs/<lang>/notebooks/<folder>.ipynb`` for a chapter's first
page (``index.md``), ``<folder>-<page>.ipynb`` for its other pages (``Part``, ``parts``). A page
of 4 or 5 programs makes a notebook a reader can run in one go, and a page the browser lays out
quickly: a notebook of a whole chapter's 34 programs was 500 KB of HTML.

Nothing is stored twice: before each build, the notebooks are written (git-ignored) from the
snippet files and from the commands that the pages run. Each program gets a markdown cell naming
the file, a ``%%writefile`` cell that writes it to ``snippets/<folder>/``, and one ``!`` (or
``%%bash``) cell per command the pages run, exactly as they run it: the programs parse their
command line and some start several processes, so they run as programs, not inside the kernel.
Cells for commands that need a GPU are tagged ``needs_cuda`` / ``needs_2_gpus``.

mkdocs-jupyter renders each notebook as a page of the site (``docs/<lang>/notebooks/<name>/``,
through the template ``hooks/jupyter/nbconvert/templates/mkdocs_html/notebook.html.j2``) and
publishes the ``.ipynb`` beside it, for download. Every page that runs a program links to the
notebooks that hold its programs (``links``, added by the hook). ``pages.pages()`` and the test
collector leave the notebooks' folder out (its commands are the pages' own). ``tests/test_notebooks.py`` executes
the notebooks with nbclient.
"""

from __future__ import annotations

import functools
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from pagerun import pages

ROOT = pages.ROOT

SECTION = re.compile(r"^\s*# --8<-- \[(start|end):[\w-]+\]\s*$")
TEXT = {
    "en": {
        "title": "# {title}: notebook",
        "intro": ("Generated from the programs in `snippets/{folder}/` that the page "
                  "[{title}]({page}) runs first (a program an earlier page runs is in that "
                  "page's notebook). Each program is the file the page shows, run the way the "
                  "pages run it: written to `snippets/{folder}/` with `%%writefile`, then "
                  "started from a shell cell with the page's own command. Run the "
                  "cells from the top; the first one creates the folder. "
                  "[Download this notebook]({name}.ipynb)."),
        "program": "## {path}",  # the file name as the heading: one entry of the contents each
        "gpu": "**Needs a GPU** (`{mark}`): on a machine without one the program says so and stops.",
        "writefile": "The next cell writes the program to disk.",
        "runs": ("The next cell writes the program to disk; the cells after it run it with the "
                 "pages' own commands."),
        "link": "The programs of this page are also in a notebook you can run or download: {links}.",
        "links": "The programs of this page are also in notebooks you can run or download: {links}.",
        "label": "{title}: notebook",
    },
    "zh": {
        "title": "# {title}：notebook",
        "intro": ("由 `snippets/{folder}/` 中的程序生成，收录的是[{title}]({page})这一页最先运行的那些程序"
                  "（前面的页面已经运行过的程序，收在那一页的 notebook 里）。每个程序都是页面中展示的那个"
                  "文件，运行方式也与页面相同：先用 `%%writefile` 写到 `snippets/{folder}/`，再在 shell "
                  "单元中用页面里的命令启动。请从上往下依次运行，第一个单元会创建目录。"
                  "[下载这个 notebook]({name}.ipynb)。"),
        "program": "## {path}",  # the file name as the heading: one entry of the contents each
        "gpu": "**需要 GPU**（`{mark}`）：在没有 GPU 的机器上，程序会说明这一点并退出。",
        "writefile": "下一个单元把程序写入文件。",
        "runs": "下一个单元把程序写入文件，之后的单元用页面里的命令运行它。",
        "link": "本页的程序也整理成了一个可以运行或下载的 notebook：{links}。",
        "links": "本页的程序也整理成了几个可以运行或下载的 notebook：{links}。",
        "label": "{title}：notebook",
    },
}


@dataclass
class Part:
    """One notebook: the programs of ``snippets/<folder>/`` that ``page`` runs first."""
    name: str  # docs/<lang>/notebooks/<name>.ipynb
    folder: str
    page: Path  # docs/<lang>/...md
    programs: list[str] = field(default_factory=list)  # snippets/<folder>/x.py, first run first


def reading_order() -> list[str]:
    """The pages in the order of mkdocs.yml's nav, each as its path in a language's folder."""
    def walk(entry):
        if isinstance(entry, str):
            yield entry
        elif isinstance(entry, list):
            for e in entry:
                yield from walk(e)
        elif isinstance(entry, dict):
            for e in entry.values():
                yield from walk(e)
    return list(walk(pages.mkdocs_config()["nav"]))


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


def _page_link(part: Part, lang: str) -> str:
    """The intro's link to the page, from the notebook page's address
    (<lang>/notebooks/<name>/): mkdocs-jupyter shows the link as it is."""
    rel = part.page.relative_to(pages.DOCS / lang)
    address = rel.parent if rel.name == "index.md" else rel.with_suffix("")
    return f"../../{address.as_posix()}/".replace("/./", "/")


def title(page: Path) -> str:
    """The page's first heading, without its id."""
    for _, m in pages.headings(page.read_text(encoding="utf-8")):
        if len(m.group(1)) == 1:
            return pages.HEADING_ID.sub("", m.group(2)).strip()
    return page.stem


def program_code(path: str) -> str:
    """The program as a reader runs it: the file without the section markers."""
    lines = (ROOT / path).read_text(encoding="utf-8").splitlines()
    return "\n".join(l for l in lines if not SECTION.match(l)).strip("\n") + "\n"


def _blocks(lang: str) -> list[tuple[pages.Block, list[str]]]:
    """Every block of the language's pages with its snippets, in reading order (mkdocs.yml's
    nav, then any page it leaves out), read once for all notebooks."""
    order = {p: i for i, p in enumerate(reading_order())}
    here = pages.DOCS / lang

    def place(b: pages.Block):
        rel = b.page.relative_to(here).as_posix()
        return order.get(rel, len(order)), rel, b.lineno
    return [(b, b.snippets) for b in sorted(pages.all_blocks(lang), key=place)]


_blocks_once = functools.lru_cache(maxsize=None)(_blocks)  # for the tests: one process, many calls


def parts(lang: str, blocks: list[tuple[pages.Block, list[str]]] | None = None
          ) -> dict[str, Part]:
    """The language's notebooks by name, each with its programs (every program of every folder
    in exactly one), in reading order; ``blocks``: ``_blocks(lang)`` when the caller has them."""
    blocks = _blocks_once(lang) if blocks is None else blocks
    first: dict[str, Path] = {}  # each program's first page, in reading order
    for b, snippets in blocks:
        for s in snippets:
            first.setdefault(s, b.page)
    rank = {s: i for i, s in enumerate(first)}
    out: dict[str, Part] = {}
    for folder in chapters():
        rel = [f.relative_to(ROOT).as_posix() for f in sorted((pages.SNIPPETS / folder).glob("*.py"))]
        ranked = sorted(rel, key=lambda s: (rank.get(s, len(rank)), s))
        mine: list[Part] = []
        for path in ranked:
            page = first.get(path)
            if page is None:  # no page runs it: with the folder's first notebook
                page = mine[0].page if mine else pages.DOCS / lang / "index.md"
            name = folder if page.name == "index.md" else f"{folder}-{page.stem}"
            part = out.setdefault(name, Part(name, folder, page))
            if part.page != page or part.folder != folder:
                raise ValueError(f"two notebooks named {name}: {part.page} and {page}")
            if part not in mine:
                mine.append(part)
            part.programs.append(path)
    return out


def build(part: Part, lang: str, blocks: list[tuple[pages.Block, list[str]]] | None = None
          ) -> dict:
    """The notebook of ``part``; ``blocks``: ``_blocks(lang)`` (read once per build, not once
    per notebook), when the caller has them."""
    t = TEXT[lang]
    blocks = _blocks_once(lang) if blocks is None else blocks
    name, folder = part.name, part.folder
    heading = title(part.page)
    cells = [_md(t["title"].format(title=heading) + "\n\n" + t["intro"].format(
                 folder=folder, title=heading, name=name, page=_page_link(part, lang))),
             _code(f'import os\n\nos.makedirs("snippets/{folder}", exist_ok=True)')]
    runs_of: dict[str, dict[str, pages.Block]] = {}  # each program's commands, on any page
    for b, snippets in blocks:
        for s in snippets:
            runs_of.setdefault(s, {}).setdefault(b.code, b)
    for path in part.programs:
        runs = list(runs_of.get(path, {}).values())
        # blocks on hosts of their own need root and tests/hosts.py: not a notebook's to run
        runs = [b for b in runs if not any(m.startswith(("pytest.mark.needs_root_netns",
                                                          "pytest.mark.needs_slurm"))
                                           for m in b.marks)]
        marks = sorted({_gpu_mark(b.marks) for b in runs} - {None})
        # the commands are the run cells themselves, not listed again in the text
        text = t["program"].format(path=path) + "\n\n" + t["runs" if runs else "writefile"]
        if marks:
            text += "\n\n" + t["gpu"].format(mark=marks[0])
        cells += [_md(text),
                  _code(f"%%writefile {path}\n" + program_code(path))]
        for b in runs:
            cmd = b.code.strip()  # one line: a ! cell; a script: a %%bash cell, run as one shell
            cells.append(_code(f"%%bash\n{cmd}" if "\n" in cmd else f"!{cmd}",
                               [m for m in [_gpu_mark(b.marks)] if m]))
    for i, c in enumerate(cells):  # nbformat 4.5: a stable id per cell; the source as lines
        c["id"] = f"{name}-{i}"
        c["source"] = c["source"].splitlines(keepends=True)
    return {"cells": cells, "metadata": {
                "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                "language_info": {"name": "python"}},
            "nbformat": 4, "nbformat_minor": 5}


def target(name: str, lang: str) -> Path:
    return pages.DOCS / lang / "notebooks" / f"{name}.ipynb"


_BUILT: dict[str, tuple[list, dict[str, Part]]] = {}  # by write_all, for this build's links


def links(lang: str, page: Path) -> str | None:
    """The sentence ``page`` shows (in ``lang``), linking to every notebook that holds a program
    the page runs, its own first; None for a page that runs none. From the notebooks the last
    ``write_all`` wrote (this build's), else from the pages as they are now."""
    blocks, found = _BUILT.get(lang) or (_blocks_once(lang), parts(lang))
    ran = {s for b, snippets in blocks if b.page == page for s in snippets}
    held = sorted((p for p in found.values() if ran & set(p.programs)),
                  key=lambda p: (p.page != page, p.name))
    if not held:
        return None
    t = TEXT[lang]
    here = page.parent
    items = ", ".join(
        f"[{t['label'].format(title=title(p.page))}]"
        f"({Path(os.path.relpath(target(p.name, lang), here)).as_posix()})"
        for p in held)
    return t["link" if len(held) == 1 else "links"].format(links=items)


def write_all() -> list[Path]:
    """Every notebook, ``docs/<lang>/notebooks/<name>.ipynb`` (git-ignored; each written only
    when it changed: `mkdocs serve` stays calm; a notebook no longer made, and any other file
    there, is removed: mkdocs-jupyter renders the .ipynb itself)."""
    written = []
    for lang in pages.LANGS:
        blocks = _blocks(lang)  # read afresh for each build (mkdocs serve), once per language
        _BUILT[lang] = blocks, parts(lang, blocks)
        for part in _BUILT[lang][1].values():
            path = target(part.name, lang)
            text = json.dumps(build(part, lang, blocks), ensure_ascii=False, indent=1) + "\n"
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
            written.append(path)
        for old in (pages.DOCS / lang / "notebooks").glob("*.*"):  # no longer made, or an old .md
            if old.is_file() and old not in written:
                old.unlink()
    return written
