"""MkDocs hook: writes ``docs/<lang>/notebooks/<chapter>.ipynb`` from ``snippets/<chapter>/``
before each build (``pagerun.notebooks``), and has the notebooks rendered as pages.

mkdocs-jupyter renders them. With mkdocs-static-i18n it needs help: i18n rebuilds every file
object after mkdocs-jupyter has marked the notebooks as pages, and the ``.ipynb`` would be copied
raw; ``on_files`` below (running after i18n) marks them as pages again.
"""

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

from pagerun import notebooks

try:  # mkdocs-jupyter builds a new nbconvert exporter, templates and all, for every notebook
    import mkdocs_jupyter.nbconvert2 as _nbc

    def _reuse(cls):
        made = {}

        def make(**kw):  # every call passes the same settings: one exporter per template
            key = (kw.get("template_file"), kw.get("theme"), kw.get("mathjax_url"))
            if key not in made:
                made[key] = cls(**kw)
            return made[key]
        make._reused = True
        return make

    for _name in ("HTMLExporter", "MarkdownExporter"):  # once, though serve reloads the hooks
        if not getattr(getattr(_nbc, _name), "_reused", False):
            setattr(_nbc, _name, _reuse(getattr(_nbc, _name)))
    # A notebook whose content did not change is not converted again: `mkdocs serve` rebuilds
    # every page after each edit, and the next build finds its HTML in .cache/build (gitignored;
    # DOCS_BUILD_CACHE=DIR elsewhere: `make bench` times a cold build, as CI's). A file there is
    # named by a hash of the notebook, the options, the versions of what renders it and these
    # hooks, so one that exists is right; a cold build converts everything.
    import hashlib
    import os
    import tempfile
    from importlib import metadata
    from pathlib import Path

    import mkdocs_jupyter.convert as _convert

    from pagerun.pages import ROOT

    _CACHE = Path(os.environ.get("DOCS_BUILD_CACHE") or ROOT / ".cache" / "build")
    _SALT = hashlib.sha256(repr([metadata.version(name) for name in (
        "mkdocs-jupyter", "nbconvert", "nbformat", "pygments", "jinja2", "mistune",
        "beautifulsoup4", "pymdown-extensions")]).encode())
    for _hook in ("notebooks.py", "speed.py"):
        _SALT.update((ROOT / "hooks" / _hook).read_bytes())

    def _keep(path: Path, text: str) -> None:
        try:  # written whole, then renamed; a read-only checkout keeps nothing
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, path)
        except OSError:
            pass

    def _memo(fn):
        done = {}

        def convert(nb_path, *args, **kwargs):
            with open(nb_path, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            key = (str(nb_path), digest, args, repr(sorted(kwargs.items())))
            if key not in done:
                h = _SALT.copy()
                h.update(repr((fn.__name__, os.path.relpath(nb_path, ROOT), *key[1:])).encode())
                kept = _CACHE / h.hexdigest()[:32]
                text = kept.read_text(encoding="utf-8") if kept.exists() else None
                if text is None:
                    text = fn(nb_path, *args, **kwargs)
                    if isinstance(text, str):
                        _keep(kept, text)
                done[key] = text
            return done[key]
        convert._memo = True
        return convert

    for _name in ("nb2html", "nb2md"):
        if not getattr(getattr(_convert, _name), "_memo", False):
            setattr(_convert, _name, _memo(getattr(_convert, _name)))
    # nbconvert's HTMLExporter parses each whole notebook page with BeautifulSoup (html.parser)
    # only to give images an alt text and to make the input and output areas focusable: a
    # third of the build. The same edits as text; a page with an image gets the real parser.
    import re

    import nbconvert.exporters.html as _html

    class _Focusable:
        def __init__(self, soup, css_class):
            self.soup, self.css_class, self.attrs = soup, css_class, self

        def __setitem__(self, name, value):  # elem.attrs["tabindex"] = "0"
            self.soup.edits.add((self.css_class, name, value))

    class _TextSoup:
        real = _html.BeautifulSoup

        def __new__(cls, html, features=None):
            if "<img" in html:
                return cls.real(html, features=features)
            soup = super().__new__(cls)
            soup.html, soup.edits = html, set()
            return soup

        def select(self, selector):  # ".jp-Notebook div.jp-Cell-inputWrapper", "img:..."
            return [] if selector.startswith("img") else [
                _Focusable(self, selector.rsplit(".", 1)[1])]

        def __str__(self):
            html = self.html
            for css_class, name, value in sorted(self.edits):
                html = re.sub(rf'(<div\b[^>]*\bclass="(?:[^"]* )?{re.escape(css_class)}'
                              rf'(?: [^"]*)?")', rf'\1 {name}="{value}"', html)
            return html

    if not getattr(_html.BeautifulSoup, "real", None):
        _html.BeautifulSoup = _TextSoup

    # Pygments, once per code cell for both languages (their notebooks show the same code)
    def _memo_highlight(fn):
        done = {}

        def highlight(source, formatter, language, metadata):
            key = (source, formatter.cssclass, language, repr(metadata))
            if key not in done:
                done[key] = fn(source, formatter, language, metadata)
            return done[key]
        highlight._memo = True
        return highlight

    if not getattr(_nbc._pygments_highlight, "_memo", False):
        _nbc._pygments_highlight = _memo_highlight(_nbc._pygments_highlight)

    # The page's table of contents: mkdocs-jupyter converts the whole notebook to Markdown with
    # nbconvert (templates, and every code cell as a fence) and reads the headings of that. A
    # notebook of Markdown and code cells without outputs, as pagerun.notebooks writes them, has
    # its headings in its Markdown cells only: those are read, in order (the same entries, the
    # same ids; 2.2 of the build's CPU seconds, now 0.2). Any other notebook: the original.
    import json

    import mkdocs_jupyter.plugin as _plugin

    def _toc_from_markdown_cells(original):
        def toc_tokens(fpath, toc_depth):
            with open(fpath, encoding="utf-8") as f:
                cells = json.load(f).get("cells", [])
            if not all(c.get("cell_type") == "markdown"
                       or (c.get("cell_type") == "code" and not c.get("outputs"))
                       for c in cells):
                return original(fpath, toc_depth)
            body = "\n\n".join("".join(c["source"]) if isinstance(c["source"], list)
                                else c["source"] for c in cells
                                if c["cell_type"] == "markdown")
            tokens = _plugin._get_markdown_toc(body, toc_depth)
            title = next((t["name"] for t in tokens if t["level"] == 1), None)
            return tokens, title
        toc_tokens._original = original
        return toc_tokens

    if not getattr(_plugin._get_nb_toc_tokens, "_original", None):
        _plugin._get_nb_toc_tokens = _toc_from_markdown_cells(_plugin._get_nb_toc_tokens)
except ImportError:  # pragma: no cover - mkdocs-jupyter is a dependency
    pass


def on_pre_build(config):
    i18n = config.plugins.get("i18n")
    if getattr(i18n, "building", False):
        return  # the build of a further language: the first one wrote every language's notebooks
    notebooks.write_all()


def _as_page(file: File) -> File:
    """The same file object, now reporting itself as a documentation page."""
    cls = type(file)
    file.__class__ = type("Notebook" + cls.__name__, (cls,),
                          {"is_documentation_page": lambda self: True})
    return file


@event_priority(100)  # before the search plugin, which would parse the page's ~800 KB of HTML
def on_page_context(context, page, config, nav):
    if page.file.src_uri.endswith(".ipynb"):  # the notebooks repeat the chapters: search those
        page.meta["search"] = {"exclude": True}
    return context


@event_priority(-200)  # after mkdocs-static-i18n (-100), which rebuilds every file object
def on_files(files: Files, config) -> Files:
    for f in files:  # in place: `files` is i18n's own Files subclass, which the nav needs
        if f.src_uri.endswith(".ipynb") and not f.is_documentation_page():
            _as_page(f)
    return files
