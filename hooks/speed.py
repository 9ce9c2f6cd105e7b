"""MkDocs hook: in-process caches that make the strict build faster and leave every built file
byte for byte the same (CONTRIBUTING.md, "Benchmark"). Nothing is kept between processes: a
cold build does all of its work once.

- Pygments highlights every code block four times: on the English page, on the Chinese page,
  and on the two languages' notebook pages; a page and its translation show the same programs
  and the same recorded outputs. ``highlight`` remembers each result by the code and the lexer's and
  formatter's class and options, so the second language reuses the first one's. Every
  formatter also rebuilds its whole style table when it is made (one per block); that table
  depends on the style and the class prefix only.
- Material's search plugin parses every page's HTML to index it, and most of a page's elements
  are the code's token spans (hooks/site.py drops code blocks from the index after the build).
  The parser gets each ``<pre>`` with one placeholder character inside instead of its code; the
  index entry has ``<pre>x</pre>`` where it had the code, and hooks/site.py drops both the same way.
"""

from __future__ import annotations

import importlib
import re

import pygments
from pygments.formatters.html import HtmlFormatter

_REAL = getattr(pygments.highlight, "_real", pygments.highlight)
_highlighted: dict[tuple, str] = {}


def _options(obj) -> str:
    return repr(sorted(obj.options.items()))


def highlight(code, lexer, formatter, outfile=None):
    if outfile is not None or getattr(lexer, "filters", None) or not hasattr(lexer, "options") \
            or not hasattr(formatter, "options"):
        return _REAL(code, lexer, formatter, outfile)
    key = (code, type(lexer), _options(lexer), type(formatter), _options(formatter))
    if key not in _highlighted:
        _highlighted[key] = _REAL(code, lexer, formatter)
    return _highlighted[key]


highlight._real = _REAL
# every module that imported pygments' own function by name
for _name in ("pygments", "pymdownx.highlight"):
    try:
        _module = importlib.import_module(_name)
    except ImportError:  # pragma: no cover - all are dependencies
        continue
    _have = getattr(_module, "highlight", None)
    if _have is _REAL or getattr(_have, "_real", None) is _REAL:  # pygments', or ours (serve reloads)
        _module.highlight = highlight

_REAL_STYLESHEET = getattr(HtmlFormatter._create_stylesheet, "_real",
                           HtmlFormatter._create_stylesheet)
_stylesheets: dict[tuple, tuple[dict, dict]] = {}


def _create_stylesheet(self):
    key = (self.style, self.classprefix)
    if key not in _stylesheets:
        _REAL_STYLESHEET(self)
        _stylesheets[key] = (self.ttype2class, self.class2style)
    t2c, c2s = _stylesheets[key]
    self.ttype2class, self.class2style = dict(t2c), dict(c2s)


_create_stylesheet._real = _REAL_STYLESHEET
HtmlFormatter._create_stylesheet = _create_stylesheet

# Search: the parser sees each <pre> with a placeholder for its code (the code is not indexed).
PRE = re.compile(r"(<pre\b[^>]*>)(.*?)(</pre>)", re.S)
TAG = re.compile(r"<[^>]*>")


def _placeholder(m: re.Match) -> str:
    # a <pre> with no text at all is dropped by the parser: it stays as it is
    return m.group(1) + "x" + m.group(3) if TAG.sub("", m.group(2)).strip() else m.group(0)


try:
    from material.plugins.search.plugin import SearchIndex

    _REAL_ADD = getattr(SearchIndex.add_entry_from_context, "_real",
                        SearchIndex.add_entry_from_context)

    def add_entry_from_context(self, page):
        content = page.content
        page.content = PRE.sub(_placeholder, content) if content else content
        try:
            return _REAL_ADD(self, page)
        finally:
            page.content = content

    add_entry_from_context._real = _REAL_ADD
    SearchIndex.add_entry_from_context = add_entry_from_context
except ImportError:  # pragma: no cover - Material is the theme
    pass

# get_lexer_by_name searches every lexer's aliases for each block: the class, once per name
import pygments.lexers  # noqa: E402

_REAL_LEXER = getattr(pygments.lexers.get_lexer_by_name, "_real", pygments.lexers.get_lexer_by_name)
_lexers: dict[str, type] = {}


def get_lexer_by_name(_alias, **options):
    cls = _lexers.get(_alias.lower()) if isinstance(_alias, str) else None
    if cls is not None:
        return cls(**options)
    lexer = _REAL_LEXER(_alias, **options)
    if isinstance(_alias, str):
        _lexers[_alias.lower()] = type(lexer)
    return lexer


get_lexer_by_name._real = _REAL_LEXER
for _name in ("pygments.lexers", "pymdownx.highlight"):
    try:
        _module = importlib.import_module(_name)
    except ImportError:  # pragma: no cover
        continue
    _have = getattr(_module, "get_lexer_by_name", None)
    if _have is _REAL_LEXER or getattr(_have, "_real", None) is _REAL_LEXER:
        _module.get_lexer_by_name = get_lexer_by_name

# Material's search plugin removes data-search-* attributes from every page's HTML with a regex
# (on_page_context), over each page's whole HTML; a page without one is left as it is without
# running it.
try:
    import material.plugins.search.plugin as _search_plugin

    class _Re:
        def __getattr__(self, name):
            return getattr(re, name)

        @staticmethod
        def sub(pattern, repl, string, *args, **kwargs):
            if isinstance(pattern, str) and pattern.startswith(r"\s?data-search-") \
                    and "data-search-" not in string:
                return string
            return re.sub(pattern, repl, string, *args, **kwargs)

    _search_plugin.re = _Re()
except ImportError:  # pragma: no cover
    pass
