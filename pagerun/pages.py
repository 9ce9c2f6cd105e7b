"""The page model: what a page of ``docs/`` holds that the engine cares about.

- ``pages(lang)``: the Markdown pages, one tree per language (``docs/en``, ``docs/zh``).
- ``blocks(page)``: the runnable blocks of a page (fences tagged exactly ``bash``, ``sh`` or
  ``python``, as pytest-codeblocks collects them, parsed with its own ``extract_from_buffer``),
  with ``--8<--`` includes expanded by pymdownx.snippets itself, each with its pytest marks and
  the ``<!-- output: KEY -->`` directive that follows it.
- ``includes(page)``, ``heading_ids(page)``: what the en/zh parity checks compare;
  ``headings(text)``: the headings outside code blocks, which they and the notebooks read.
- ``mkdocs_config()``: mkdocs.yml as data (its nav: the reading order).

Running a block is ``pagerun.runner``; the recordings a directive names are ``pagerun.recordings``.
"""

from __future__ import annotations

import functools
import io
import re
from dataclasses import dataclass, field
from pathlib import Path

import markdown
import yaml
from pytest_codeblocks import extract_from_buffer

from pagerun import recordings

ROOT = recordings.ROOT
DOCS = ROOT / "docs"
SNIPPETS = ROOT / "snippets"
LANGS = ("en", "zh")
RUNNABLE = ("bash", "sh", "python")
INCLUDE = re.compile(r'--8<--\s*"([^"]+)"')
SNIPPET_PATH = re.compile(r"\bsnippets/[\w/.-]+?\.py\b")
SNIPPET_SCRIPT = re.compile(r"\bsnippets/[\w/.-]+?\.(?:sh|sbatch)\b")
# `import all_dims_model` / `from all_dims_model import ...` at the start of a line: a module
# of the program's own folder (Python puts the script's folder first on sys.path)
SIBLING_IMPORT = re.compile(r"^(?:from|import)\s+(\w+)", re.M)
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*$")
HEADING_ID = re.compile(r"\{\s*#([\w-]+)[^}]*\}\s*$")
DEFAULT_TIMEOUT = 120


@dataclass
class Block:
    page: Path
    lineno: int
    syntax: str
    code: str
    marks: list[str] = field(default_factory=list)
    key: str | None = None  # the recording named by <!-- output: KEY --> after the block
    exit: int = 0
    builds: bool = False  # builds=both: one recording per build of torch (pagerun.runner)

    @property
    def page_rel(self) -> str:
        return self.page.relative_to(ROOT).as_posix()

    @property
    def title(self) -> str:
        first = self.code.strip().splitlines()[0] if self.code.strip() else ""
        return f"line {self.lineno}: {first[:70]}"

    @property
    def snippets(self) -> list[str]:
        """The programs this block runs: those it names, the ones a script it names (an
        sbatch file) runs in turn, and the modules of their own folder they import, so that
        a recording fingerprints them all."""
        found = set(SNIPPET_PATH.findall(self.code))
        for script in SNIPPET_SCRIPT.findall(self.code):
            found.add(script)
            path = ROOT / script
            if path.is_file():
                found |= set(SNIPPET_PATH.findall(path.read_text(encoding="utf-8")))
        todo = sorted(found)  # and the modules of their own folder they import, in turn
        while todo:
            for module in _sibling_modules(todo.pop()):
                if module not in found:
                    found.add(module)
                    todo.append(module)
        return sorted(found)

    @property
    def timeout(self) -> int:
        for m in self.marks:
            t = re.match(r"pytest\.mark\.run_timeout\((\d+)", m)
            if t:
                return int(t.group(1))
        return DEFAULT_TIMEOUT



def _sibling_modules(snippet: str) -> list[str]:
    """The modules of its own folder that a program imports (read once per version of the
    file: the build and the notebooks ask for every block's snippets many times)."""
    path = ROOT / snippet
    if path.suffix != ".py" or not path.is_file():
        return []
    return _sibling_modules_of(snippet, path.stat().st_mtime_ns)


@functools.lru_cache(maxsize=None)
def _sibling_modules_of(snippet: str, _mtime_ns: int) -> list[str]:
    path = ROOT / snippet
    names = SIBLING_IMPORT.findall(path.read_text(encoding="utf-8"))
    modules = [(path.parent / f"{n}.py").relative_to(ROOT).as_posix() for n in names]
    return [m for m in modules if (ROOT / m).is_file()]

def pages(lang: str | None = None) -> list[Path]:
    """The pages written by hand: not the notebooks' pages, which a build generates
    (``pagerun.notebooks``) from the programs and commands of these."""
    langs = [lang] if lang else LANGS
    return sorted(p for l in langs for p in (DOCS / l).rglob("*.md") if not generated(p))


def generated(page: Path) -> bool:
    return page.parent.name == "notebooks" and page.parent.parent.parent == DOCS


def expand(text: str) -> str:
    """Expand ``--8<--`` includes with pymdownx.snippets itself (same settings as mkdocs.yml)."""
    md = markdown.Markdown(
        extensions=["pymdownx.snippets"],
        extension_configs={"pymdownx.snippets": {
            "base_path": [str(ROOT)], "check_paths": True, "dedent_subsections": True}},
    )
    return "\n".join(md.preprocessors["snippet"].run(text.split("\n")))


def blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    lines = text.split("\n")
    out = []
    for cb in extract_from_buffer(io.StringIO(text)):
        if cb.syntax not in RUNNABLE:
            continue
        code = expand(cb.code) if INCLUDE.search(cb.code) else cb.code
        block = Block(page, cb.lineno, cb.syntax, code, list(cb.marks))
        # the line after the closing fence (skipping blank lines) may name the recording
        i = cb.lineno  # 1-based line of the opening fence -> index of the first code line
        fence = lines[cb.lineno - 1].strip()
        ticks = fence[: len(fence) - len(fence.lstrip("`"))]
        while i < len(lines) and not lines[i].strip().startswith(ticks):
            i += 1
        i += 1
        while i < len(lines) and not lines[i].strip():
            i += 1
        if i < len(lines):
            parsed = recordings.parse_directive(lines[i])
            if parsed:
                block.key, opts = parsed
                block.exit = int(opts.get("exit", 0))
                block.builds = opts.get("builds") == "both"
        out.append(block)
    return out


def all_blocks(lang: str | None = None) -> list[Block]:
    """The runnable blocks of every page (of one language, or both)."""
    return [b for p in pages(lang) for b in blocks(p)]


def includes(page: Path) -> list[str]:
    return INCLUDE.findall(page.read_text(encoding="utf-8"))


def headings(text: str):
    """Each heading of Markdown ``text`` outside code blocks: (its line's index, its match)."""
    fence = False
    for i, line in enumerate(text.split("\n")):
        if line.lstrip().startswith("```"):
            fence = not fence
        m = None if fence else HEADING.match(line)
        if m:
            yield i, m


def heading_ids(page: Path) -> list[str]:
    ids = []
    for _, m in headings(page.read_text(encoding="utf-8")):
        hid = HEADING_ID.search(m.group(2))
        ids.append(hid.group(1) if hid else f"<no id: {m.group(2)}>")
    return ids


def mkdocs_config() -> dict:
    """mkdocs.yml as data, its tags (``!ENV``) read as None."""
    class Loader(yaml.SafeLoader):
        pass
    Loader.add_multi_constructor("", lambda loader, suffix, node: None)
    return yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=Loader)


