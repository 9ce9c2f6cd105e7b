"""MkDocs hook: before each build, writes each chapter's notebook and the page that shows it,
``docs/<lang>/notebooks/<chapter>.ipynb`` and ``.md``, from ``snippets/<chapter>/``
(``pagerun.notebooks``). MkDocs renders the page as any other and copies the notebook beside it."""

from pagerun import notebooks


def on_pre_build(config):
    i18n = config.plugins.get("i18n")
    if getattr(i18n, "building", False):
        return  # the build of a further language: the first one wrote every language's notebooks
    notebooks.write_all()
