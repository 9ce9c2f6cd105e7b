"""The notebooks' pages as mkdocs-jupyter renders them, kept in ``.cache/notebooks/`` (gitignored).

mkdocs-jupyter renders each ``docs/<lang>/notebooks/<name>.ipynb`` with nbconvert: the HTML
of its cells, and its table of contents from a second, Markdown, conversion. That was about
two thirds of a cold build's CPU, and the suite builds the site twice (its own build and README's
``make serve``). Each rendering is kept under a hash of everything it depends on: the
notebook, the plugin's options, the site's nbconvert template (``hooks/jupyter/``), this file
and the versions of the packages that render it, so a build that finds it renders nothing,
and any change of one of them renders again. ``hooks/notebooks.py`` starts processes of their
own (``python -m pagerun.nbcache``, one a core, at most four) for the renderings the cache lacks
as soon as the notebooks are written, as ``hooks/pictures.py`` does for the pictures: they
render beside the build, which renders the pages and takes each notebook's page from the cache
(rendering it itself only if those processes could not). ``DOCS_NOTEBOOK_CACHE=DIR``
keeps them elsewhere (``make bench`` times a cold build, as CI's, with an empty folder);
``DOCS_NOTEBOOK_CACHE=off`` leaves the notebooks to mkdocs-jupyter alone.

Every rendering goes through ``render``, which calls mkdocs-jupyter's own functions with the
plugin's options: the built site is byte for byte the one mkdocs-jupyter makes alone
(``make bench`` builds the site both ways and compares every file; ``tests/test_site.py``
compares one notebook's rendering in the suite's build with mkdocs-jupyter's own). In the process that renders, nbconvert's
Jinja templates are compiled once (each exporter makes a new Jinja environment and compiled its
templates again: 15 compilations a notebook).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OFF = os.environ.get("DOCS_NOTEBOOK_CACHE") == "off"
CACHE = Path(os.environ.get("DOCS_NOTEBOOK_CACHE") or ROOT / ".cache" / "notebooks")
TEMPLATES = ROOT / "hooks" / "jupyter"
# what renders a notebook: mkdocs-jupyter, nbconvert and what they call
PACKAGES = ("mkdocs-jupyter", "nbconvert", "nbformat", "jinja2", "mistune", "pygments",
            "beautifulsoup4", "bleach", "markdown", "jupytext", "mkdocs")
# the plugin's options that change what nb2html writes (its own cache key's), and toc_depth
OPTIONS = ("execute", "kernel_name", "theme", "allow_errors", "show_input", "no_input",
           "no_prompt", "remove_tag_config", "highlight_extra_classes", "include_requirejs",
           "custom_mathjax_url", "toc_depth", "ignore_h1_titles")


def options(plugin_config) -> dict | None:
    """The options of mkdocs-jupyter's configuration a rendering depends on; None when the
    notebooks are executed (their outputs would come from the run, not from the file) or
    DOCS_NOTEBOOK_CACHE is off."""
    got = {k: plugin_config[k] for k in OPTIONS}
    if OFF or got["execute"] or plugin_config.get("execute_ignore"):
        return None
    return json.loads(json.dumps(got))  # as the process that renders gets them


def _versions() -> str:
    out = []
    for name in PACKAGES:
        try:
            out.append(f"{name}={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            out.append(f"{name}=-")
    return ";".join(out)


_FIXED: list[str] = []  # everything but the notebook and the options: once per process


def _fixed() -> str:
    if not _FIXED:
        h = hashlib.sha256(Path(__file__).read_bytes())
        h.update(_versions().encode())
        for f in sorted(p for p in TEMPLATES.rglob("*") if p.is_file()):
            h.update(f.relative_to(TEMPLATES).as_posix().encode() + b"\0" + f.read_bytes())
        _FIXED.append(h.hexdigest())
    return _FIXED[0]


def _name(path: Path) -> str:
    return f"{path.parent.parent.name}-{path.stem}"  # docs/<lang>/notebooks/<name>.ipynb


def cache_path(path: Path, opts: dict) -> Path:
    h = hashlib.sha256(_fixed().encode())
    h.update(json.dumps(opts, sort_keys=True).encode())
    h.update(path.read_bytes())
    return CACHE / f"{_name(path)}-{h.hexdigest()[:20]}.json"


def _compile_once() -> None:
    """One Jinja bytecode cache, in memory, for every nbconvert exporter of this process (the
    code a template compiles to depends on its source and the environment's options, the same
    for every exporter; Jinja checks the source's checksum before it reuses the code)."""
    from jinja2 import BytecodeCache
    from nbconvert.exporters.templateexporter import TemplateExporter

    if getattr(TemplateExporter._create_environment, "_real", None):
        return

    class Memory(BytecodeCache):
        def __init__(self):
            self.data: dict[str, bytes] = {}

        def load_bytecode(self, bucket):
            if bucket.key in self.data:
                bucket.bytecode_from_string(self.data[bucket.key])

        def dump_bytecode(self, bucket):
            self.data[bucket.key] = bucket.bytecode_to_string()

    memory, real = Memory(), TemplateExporter._create_environment

    def _create_environment(self):
        env = real(self)
        env.bytecode_cache = memory
        return env

    _create_environment._real = real
    TemplateExporter._create_environment = _create_environment


def render(path: Path, opts: dict, compile_once: bool = True) -> dict:
    """What mkdocs-jupyter's page gets from ``path``: its HTML, its table of contents' tokens
    and its title (the plugin's ``new_render``, with the same calls)."""
    from mkdocs_jupyter import nbconvert2, plugin

    if compile_once:
        _compile_once()
    content = nbconvert2.nb2html(
        str(path), execute=False, kernel_name=opts["kernel_name"], theme=opts["theme"],
        allow_errors=opts["allow_errors"], show_input=opts["show_input"],
        no_input=opts["no_input"], no_prompt=opts["no_prompt"],
        remove_tag_config=opts["remove_tag_config"],
        highlight_extra_classes=opts["highlight_extra_classes"],
        include_requirejs=opts["include_requirejs"],
        custom_mathjax_url=opts["custom_mathjax_url"])
    toc_tokens, title = plugin._get_nb_toc_tokens(str(path), opts["toc_depth"])
    return {"content": content, "toc_tokens": toc_tokens, "title": title, "options": opts}


def lookup(path: Path, opts: dict) -> dict | None:
    target = cache_path(path, opts)
    try:
        return json.loads(target.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def cached(path: Path, opts: dict) -> dict:
    """``render``, kept in the cache unless it is there already."""
    got = lookup(path, opts)
    if got is not None:
        return got
    got = render(path, opts)
    target = cache_path(path, opts)
    CACHE.mkdir(parents=True, exist_ok=True)
    for old in set(CACHE.glob(f"{_name(path)}-*.json")) - {target}:  # older renderings
        old.unlink(missing_ok=True)
    tmp = target.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(got, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, target)  # a build reading the cache sees a whole rendering or none
    return got


def prune(paths: list[Path]) -> None:
    """Remove the renderings of notebooks that are no longer made."""
    names = {_name(p) for p in paths}
    for f in CACHE.glob("*.json"):
        if f.stem.rsplit("-", 1)[0] not in names:  # <lang>-<name>-<hash>
            f.unlink(missing_ok=True)


if __name__ == "__main__":  # python -m pagerun.nbcache OPTIONS_JSON NOTEBOOK ...
    given = json.loads(sys.argv[1])
    for arg in sys.argv[2:]:
        cached(Path(arg), given)
