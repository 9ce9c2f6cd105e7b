"""MkDocs hook: before each build, writes each page's notebook,
``docs/<lang>/notebooks/<name>.ipynb``, from ``snippets/<folder>/`` (``pagerun.notebooks``);
mkdocs-jupyter renders it as a page and publishes the ``.ipynb`` beside it. Every page that runs
a program says, before its first section, which notebooks hold them.

mkdocs-jupyter renders through nbconvert's template ``mkdocs_html/notebook.html.j2``; the site
has its own (``hooks/jupyter/nbconvert/templates/mkdocs_html/notebook.html.j2``: the cells
without the 585 KB of JupyterLab CSS inlined in each page, the few rules they need are in
``overrides/main.html``). nbconvert looks for templates in every Jupyter data folder
(``JUPYTER_PATH``) before mkdocs-jupyter's own folder, so the folder is put first there.
With mkdocs-static-i18n, which rebuilds every file object after mkdocs-jupyter has marked the
notebooks as pages (and so takes them for assets), ``on_files`` marks them as pages again and
gives them their translations, as i18n does for pages (the language selector, the sitemap).

Each notebook's page comes from ``.cache/notebooks`` (``pagerun.nbcache``): what it lacks is
rendered, with mkdocs-jupyter's own functions and options, by processes of their own (one a
core, at most four) started as soon as the notebooks are written, beside this one, which renders
the pages."""

import json
import os
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files
from mkdocs.structure.toc import get_toc

from pagerun import nbcache, notebooks, pages

TEMPLATES = Path(__file__).resolve().parent / "jupyter"


def on_config(config):
    paths = os.environ.get("JUPYTER_PATH", "").split(os.pathsep)
    if str(TEMPLATES) not in paths:
        os.environ["JUPYTER_PATH"] = os.pathsep.join([str(TEMPLATES)] + [p for p in paths if p])
    return config


# the processes that render what the cache lacks, each with its output file: one a core (at most
# four), each taking every n-th notebook in the order the build asks for them
_rendering: list[tuple[subprocess.Popen, object]] = []


def _options(config) -> dict | None:
    plugin = config.plugins.get("mkdocs-jupyter")
    return nbcache.options(plugin.config) if plugin is not None else None


def on_pre_build(config):
    i18n = config.plugins.get("i18n")
    if getattr(i18n, "building", False):
        return  # the build of a further language: the first one wrote every language's notebooks
    written = notebooks.write_all()
    opts = _options(config)
    if opts is None:
        return
    nbcache.prune(written)
    missing = [str(p) for p in written if nbcache.lookup(p, opts) is None]
    if not missing or any(proc.poll() is None for proc, _ in _rendering):
        return
    n = max(1, min(4, os.cpu_count() or 1, len(missing)))
    _rendering.clear()
    for i in range(n):
        out = tempfile.TemporaryFile()
        _rendering.append((subprocess.Popen(
            [sys.executable, "-m", "pagerun.nbcache", json.dumps(opts), *missing[i::n]],
            cwd=pages.ROOT, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL),
            out))


def _rendered(path: Path, opts: dict) -> dict:
    """The notebook's rendering from the cache, once a process that renders has written it;
    rendered here if those processes ended without it."""
    while True:
        got = nbcache.lookup(path, opts)
        if got is not None:
            return got
        if all(proc.poll() is not None for proc, _ in _rendering):
            break
        time.sleep(0.02)
    for proc, out in _rendering:
        if proc.returncode:
            out.seek(0)
            raise PluginError("python -m pagerun.nbcache failed:\n"
                              + out.read().decode(errors="replace")[-4000:])
    return nbcache.cached(path, opts)


@event_priority(-100)  # after mkdocs-jupyter's, which gives each notebook's page its render()
def on_pre_page(page, config, files):
    opts = _options(config)
    if opts is None or not page.file.src_uri.endswith(".ipynb"):
        return page
    path = Path(page.file.abs_src_path)

    def render(self, config, files):  # what mkdocs-jupyter's new_render sets, from the cache
        got = _rendered(path, opts)
        self.content = got["content"]
        self.toc = get_toc(got["toc_tokens"])
        if got["title"] is not None and not opts["ignore_h1_titles"]:
            self.title = got["title"]

    page.render = types.MethodType(render, page)
    return page


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
    marked = []
    for f in files:  # in place: `files` is i18n's own Files subclass, which the nav needs
        if f.src_uri.endswith(".ipynb") and not f.is_documentation_page():
            marked.append(_as_page(f))
    i18n = config.plugins.get("i18n")
    if i18n is not None and marked:
        _alternates(i18n, marked, config)
        # the sitemap's list of pages, which i18n took before they were pages
        i18n.i18n_files_per_language[i18n.current_language] = files.documentation_pages()
    return files


def _alternates(i18n, marked: list[File], config) -> None:
    """Each notebook page's translations, as i18n gives every page of Markdown (it took the
    notebooks for assets): the language selector leads to the same notebook in the other
    language, and the sitemap lists it with its hreflang alternates."""
    from mkdocs_static_i18n import folder

    for f in marked:
        alternates = {}
        for lang in i18n.all_languages:
            if lang == i18n.current_language:
                alternates[lang] = f
                continue
            src = f"{lang}/{f.norm_src_uri}"
            if not (Path(config.docs_dir) / src).is_file():
                continue
            other = File(src, config.docs_dir, config.site_dir, config.use_directory_urls,
                         dest_uri=f"{lang}/{Path(f.norm_src_uri).with_suffix('')}/index.html")
            alternates[lang] = folder.create_i18n_file(
                other, lang, i18n.default_language, i18n.all_languages, config)
        f.alternates = alternates


@event_priority(100)  # before the search plugin: the notebooks hold the pages' code and text
def on_page_context(context, page, config, nav):
    if page.file.src_uri.endswith(".ipynb"):
        page.meta["search"] = {"exclude": True}
    return context
