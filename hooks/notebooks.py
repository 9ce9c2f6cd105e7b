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
        return make

    _nbc.HTMLExporter = _reuse(_nbc.HTMLExporter)
    _nbc.MarkdownExporter = _reuse(_nbc.MarkdownExporter)
except ImportError:  # pragma: no cover - mkdocs-jupyter is a dependency
    pass


def on_pre_build(config):
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
