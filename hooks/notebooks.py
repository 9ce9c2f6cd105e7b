"""MkDocs hook: before each build, writes each page's notebook,
``docs/<lang>/notebooks/<name>.ipynb``, from ``snippets/<folder>/`` (``pagerun.notebooks``);
mkdocs-jupyter renders it as a page and publishes the ``.ipynb`` beside it. Every page that runs
a program says, before its first section, which notebooks hold them.

mkdocs-jupyter renders through nbconvert's template ``mkdocs_html/notebook.html.j2``; the site
has its own (``hooks/jupyter/nbconvert/templates/mkdocs_html/notebook.html.j2``: the cells
without the 600 KB of JupyterLab CSS inlined in each page, the few rules they need are in
``overrides/main.html``). nbconvert looks for templates in every Jupyter data folder
(``JUPYTER_PATH``) before mkdocs-jupyter's own folder, so the folder is put first there.
With mkdocs-static-i18n, which rebuilds every file object after mkdocs-jupyter has marked the
notebooks as pages, ``on_files`` marks them as pages again."""

import os
from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

from pagerun import notebooks, pages

TEMPLATES = Path(__file__).resolve().parent / "jupyter"


def on_config(config):
    paths = os.environ.get("JUPYTER_PATH", "").split(os.pathsep)
    if str(TEMPLATES) not in paths:
        os.environ["JUPYTER_PATH"] = os.pathsep.join([str(TEMPLATES)] + [p for p in paths if p])
    return config


def on_pre_build(config):
    i18n = config.plugins.get("i18n")
    if getattr(i18n, "building", False):
        return  # the build of a further language: the first one wrote every language's notebooks
    notebooks.write_all()


def with_link(markdown: str, sentence: str) -> str:
    """``markdown`` with ``sentence`` as a paragraph before its first ``##`` heading (outside
    code blocks), or at its end."""
    for i, m in pages.headings(markdown):
        if m.group(1) == "##":
            lines = markdown.split("\n")
            return "\n".join(lines[:i] + [sentence, ""] + lines[i:])
    return markdown.rstrip("\n") + "\n\n" + sentence + "\n"


def on_page_markdown(markdown: str, page, config, files) -> str:
    if not page.file.abs_src_path:
        return markdown
    path = Path(page.file.abs_src_path)
    if path.suffix != ".md" or pages.generated(path):
        return markdown
    lang = getattr(page.file, "locale", None) or pages.LANGS[0]
    sentence = notebooks.links(lang, path)
    return with_link(markdown, sentence) if sentence else markdown


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


@event_priority(100)  # before the search plugin: the notebooks hold the pages' code and text
def on_page_context(context, page, config, nav):
    if page.file.src_uri.endswith(".ipynb"):
        page.meta["search"] = {"exclude": True}
    return context
