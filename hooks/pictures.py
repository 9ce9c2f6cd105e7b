"""MkDocs hook: the pictures drawn from recorded outputs (``pagerun.pictures``), published as
``pictures/<name>.svg`` and ``pictures/<name>-dark.svg`` in each language's tree
(``docs/<lang>/pictures/…`` for links: ``![…](../pictures/<name>.svg#only-light)``).

They are generated files: nothing is written into ``docs/``. A picture is drawn again when its
recordings or ``pagerun/pictures.py`` change; ``.cache/pictures/`` (gitignored) keeps the last
drawing of each, so a build that finds it unchanged does not import matplotlib. What is missing
there is drawn by a process of its own (``python -m pagerun.pictures``), started as soon as the
configuration is read and awaited before the files are copied (``on_env``): it draws on the
second core while this one sets up the plugins and renders the pages. On the pages, each picture
loads only when it comes near the screen (``on_post_page``). A picture drawn from a
GPU recording sits in ``<!-- picture: NAME -->`` … ``<!-- /picture -->`` on its page: without
that recording the block becomes one sentence saying a GPU run draws it.
"""

import functools
import re
import subprocess
import sys

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

from pagerun import pictures
from pagerun.pictures import on_page_markdown  # noqa: F401  (a GPU picture before a GPU run)

_drawing: subprocess.Popen | None = None


def _draw_missing() -> None:
    """Start drawing every picture, in every language, that the cache lacks (once at a time)."""
    global _drawing
    if _drawing is not None and _drawing.poll() is None:
        return
    missing = [f"{name}:{lang}" for name in pictures.PICTURES if pictures.available(name)
               for lang in pictures.WORDS
               if not pictures.cache_path(name, lang, "-dark").exists()]
    if missing:
        _drawing = subprocess.Popen([sys.executable, "-m", "pagerun.pictures", *missing],
                                    cwd=pictures.ROOT, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


@event_priority(100)  # before the plugins' own: the plugins take a second to set up
def on_config(config):
    _draw_missing()
    return config


@event_priority(-200)  # after mkdocs-static-i18n (-100), which rebuilds every file object
def on_files(files: Files, config) -> Files:
    i18n = config.plugins.get("i18n")
    lang = getattr(i18n, "current_language", None) or "en"
    default = getattr(i18n, "default_language", None) or "en"
    for name in pictures.PICTURES:
        if not pictures.available(name):  # a GPU picture before any GPU run: no file
            continue
        for suffix in ("", "-dark"):  # read when the files are copied, after on_env
            f = File.generated(config, f"{lang}/pictures/{name}{suffix}.svg",
                               abs_src_path=str(pictures.cache_path(name, lang, suffix)))
            if lang == default:  # the default language is served from the root
                f.dest_uri = f"pictures/{name}{suffix}.svg"
            files.append(f)
    return files


def on_env(env, config, files):
    """The pictures are drawn before the files are copied."""
    global _drawing
    if _drawing is not None:
        out, _ = _drawing.communicate()
        status, _drawing = _drawing.returncode, None
        if status:
            raise PluginError("drawing the pictures from their recordings failed "
                              f"(python -m pagerun.pictures, status {status}):\n"
                              + out.decode("utf-8", "replace")[-3000:])
    return env


# a picture on a page: <img alt="…" src="../pictures/NAME.svg#only-light" /> (or -dark, #only-dark)
_IMG = re.compile(r'<img (?=[^>]*\bsrc="[^"]*pictures/([\w-]+?)(-dark)?\.svg#only-(?:light|dark)")')
_SVG_SIZE = re.compile(r'<svg [^>]*?width="([\d.]+)pt" height="([\d.]+)pt"')


@functools.lru_cache(maxsize=None)
def _size(path) -> tuple[int, int]:
    """A drawing's size in CSS pixels (matplotlib writes points, 72 to the inch; CSS, 96)."""
    with open(path, encoding="utf-8") as f:
        w, h = _SVG_SIZE.search(f.read(2000)).groups()
    return round(float(w) * 96 / 72), round(float(h) * 96 / 72)


def on_post_page(output: str, page, config) -> str:
    """Pictures load when they come near the screen, and the copy for the other colour scheme,
    hidden, not at all (loading="lazy"); each keeps its place before it arrives (its drawn size,
    which the theme scales down to the column). Before, every picture and its dark twin were
    fetched and drawn while the page started: about 60 ms of a phone-sized Chromium's main
    thread at load of /zh/model-parallel/fsdp/ (CONTRIBUTING.md, Benchmark)."""
    lang = getattr(page.file, "locale", None) or "en"

    def sized(m: re.Match) -> str:
        w, h = _size(pictures.cache_path(m.group(1), lang, m.group(2) or ""))
        return f'<img loading="lazy" width="{w}" height="{h}" '
    return _IMG.sub(sized, output)
