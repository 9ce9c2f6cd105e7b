"""MkDocs hook: writes ``docs/<lang>/notebooks/<chapter>.ipynb`` from ``snippets/<chapter>/``
before each build (``pagerun.notebooks``), and has the notebooks rendered as pages.

mkdocs-jupyter renders them. With mkdocs-static-i18n it needs help: i18n rebuilds every file
object after mkdocs-jupyter has marked the notebooks as pages, and the ``.ipynb`` would be copied
raw; ``on_files`` below (running after i18n) marks them as pages again.
"""

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

from pagerun import notebooks


def on_pre_build(config):
    notebooks.write_all()


def _as_page(file: File) -> File:
    """The same file object, now reporting itself as a documentation page."""
    cls = type(file)
    file.__class__ = type("Notebook" + cls.__name__, (cls,),
                          {"is_documentation_page": lambda self: True})
    return file


@event_priority(-200)  # after mkdocs-static-i18n (-100), which rebuilds every file object
def on_files(files: Files, config) -> Files:
    for f in files:  # in place: `files` is i18n's own Files subclass, which the nav needs
        if f.src_uri.endswith(".ipynb") and not f.is_documentation_page():
            _as_page(f)
    return files
