"""MkDocs hook: before each build, writes each page's notebook and the page that shows it,
``docs/<lang>/notebooks/<name>.ipynb`` and ``.md``, from ``snippets/<folder>/``
(``pagerun.notebooks``); MkDocs renders the page as any other and copies the notebook beside it.
Every page that runs a program says, before its first section, which notebooks hold them."""

from pathlib import Path

from pagerun import notebooks, pages


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
