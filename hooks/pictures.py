"""MkDocs hook: the pictures drawn from recorded outputs (``pagerun.pictures``), published as
``pictures/<name>.svg`` and ``pictures/<name>-dark.svg`` in each language's tree
(``docs/<lang>/pictures/…`` for links: ``![…](../pictures/<name>.svg#only-light)``).

They are generated files: nothing is written into ``docs/``. A picture is drawn again when its
recordings or ``pagerun/pictures.py`` change; ``.cache/pictures/`` (gitignored) keeps the last
drawing of each, so a build that finds it unchanged does not import matplotlib. A picture
drawn from a GPU recording sits in ``<!-- picture: NAME -->`` … ``<!-- /picture -->`` on its
page: without that recording the block becomes one sentence saying a GPU run draws it.
"""

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

from pagerun import pictures
from pagerun.pictures import on_page_markdown  # noqa: F401  (a GPU picture before a GPU run)


@event_priority(-200)  # after mkdocs-static-i18n (-100), which rebuilds every file object
def on_files(files: Files, config) -> Files:
    i18n = config.plugins.get("i18n")
    lang = getattr(i18n, "current_language", None) or "en"
    default = getattr(i18n, "default_language", None) or "en"
    for name in pictures.PICTURES:
        if not pictures.available(name):  # a GPU picture before any GPU run: no file
            continue
        svg = pictures.cached(name, lang)
        for suffix, text in (("", svg), ("-dark", pictures.dark(svg))):
            f = File.generated(config, f"{lang}/pictures/{name}{suffix}.svg", content=text)
            if lang == default:  # the default language is served from the root
                f.dest_uri = f"pictures/{name}{suffix}.svg"
            files.append(f)
    return files
