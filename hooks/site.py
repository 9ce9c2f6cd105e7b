"""MkDocs hook: the reader-facing parts of the site that are generated, not typed.

- ``<!-- glossary -->`` on a page renders the glossary table from ``hooks/glossary.yml`` in the
  page's language (the same data ``tests/test_glossary.py`` checks the zh pages against).
- One search index per language: the i18n plugin writes one index for both languages at
  ``/search/search_index.json``; after the last language is built this splits it into
  ``/search/search_index.json`` (English pages) and ``/zh/search/search_index.json`` (Chinese
  pages), and points the Chinese pages' search at theirs, so each language's search box returns
  pages in its own language.
- Search finds the words readers type: glossary entries list, under ``search``, the words readers
  use for a term (多机训练, 爆显存, OOM, ...) and the pages (or sections) that answer them; those
  words go into a field of those pages' search entries that is indexed and never shown. Chinese
  text is also indexed in jieba's search mode: a hidden field carries the parts of every compound
  (检查点 also as 检查), so a compound and its parts both match. See CONTRIBUTING.md, "Search".
- A 404 page per language: every language build writes ``404.html`` at the site root, so the last
  language built would win; this keeps each one and writes ``/404.html`` (English) and
  ``/zh/404.html`` (Chinese).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority

HERE = Path(__file__).resolve().parent
GLOSSARY = HERE / "glossary.yml"
DEFAULT = "en"
MARKER = re.compile(r"^<!--\s*glossary\s*-->\s*$", re.M)
# <!-- pending: dp/index.md -->DataParallel<!-- /pending -->: a link to a chapter that may not
# exist yet. It becomes [DataParallel](dp/index.md) as soon as the page exists in that language,
# and plain text marked "in preparation" until then, so the strict build never sees a dead link.
PENDING = re.compile(r"<!--\s*pending:\s*(?P<path>[\w./-]+)\s*-->(?P<text>.*?)<!--\s*/pending\s*-->")
PENDING_LABEL = {"en": " *(in preparation)*", "zh": "（编写中）"}

_not_found: dict[str, str] = {}  # language -> rendered 404.html, collected while each builds


def load_glossary() -> list[dict]:
    return yaml.safe_load(GLOSSARY.read_text(encoding="utf-8"))


# Search: two fields of every entry that the index has and the results never show (Material
# indexes every field named in the index's config.fields and renders only title, text and tags).
ALSO_FIELD = "also"    # the readers' words from the glossary's `search` lists, for that entry
PARTS_FIELD = "parts"  # jieba's search-mode parts of the entry's Chinese words, not already there
# title 1000, text 1 (Material's defaults): a reader's word weighs as much as a word of the title
FIELD_BOOST = {ALSO_FIELD: 1000.0, PARTS_FIELD: 1.0}
HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")  # CJK ideographs


def page_url(src: str) -> str:
    """docs-relative source path (``ddp/multinode.md``) -> the page's URL (``ddp/multinode/``)."""
    if src == "index.md":
        return ""
    return src.removesuffix("index.md") if src.endswith("/index.md") else src.removesuffix(".md") + "/"


def searched_as(terms: list[dict] | None = None) -> dict[str, dict[str, list[str]]]:
    """language -> index location (``ddp/multinode/#restarts``) -> the readers' words for it.
    The Chinese index gets the English words too: Chinese readers type OOM and NaN as well."""
    out: dict[str, dict[str, list[str]]] = {"en": {}, "zh": {}}
    for t in terms if terms is not None else load_glossary():
        s = t.get("search")
        if not s:
            continue
        for target in s["pages"]:
            src, _, anchor = target.partition("#")
            loc = page_url(src) + (f"#{anchor}" if anchor else "")
            for lang, words in (("en", s.get("en", [])), ("zh", s.get("zh", []) + s.get("en", []))):
                bucket = out[lang].setdefault(loc, [])
                bucket += [w for w in words if w not in bucket]
    return out


_jieba_ready = False


def _jieba():
    """jieba, knowing the glossary's Chinese terms and the readers' Chinese words as words, so that
    梯度累积 is one word of the index (search mode adds 梯度 and 累积); None without jieba."""
    global _jieba_ready
    try:
        import jieba
    except ImportError:  # Material's search then leaves Chinese unsegmented too
        return None
    if not _jieba_ready:
        words: set[str] = set()
        for t in load_glossary():
            words.update(HAN.findall(t["zh"]))
            words.update(HAN.findall(" ".join(t.get("search", {}).get("zh", []))))
        for w in sorted(words):
            if len(w) > 1:
                jieba.add_word(w)
        _jieba_ready = True
    return jieba


def chinese_words(text: str) -> list[str]:
    """The Chinese words of an index field as Material's search wrote it (cut by jieba.cut and
    joined by U+200B): each run of Han characters."""
    return HAN.findall(text)


def search_mode(words: list[str]) -> list[str]:
    """Each word cut in jieba's search mode (jieba.cut_for_search: the word, then the dictionary
    words of two and three characters inside it), as one list of words in order of first sight."""
    jieba = _jieba()
    seen: dict[str, None] = {}
    for w in words:
        for part in (jieba.cut_for_search(w) if jieba else [w]):
            seen.setdefault(part)
    return list(seen)


def _segmented(words: list[str]) -> str:
    """Words for a hidden field: separated by U+200B (part of the search separator)."""
    return "\u200b".join(words)


def add_search_fields(docs: list[dict], lang: str, also: dict[str, list[str]]) -> None:
    """Fill the hidden fields of one language's index entries, in place."""
    for doc in docs:
        words = also.get(doc["location"])
        if words:  # whole: the search matches a query's words as prefixes of these
            doc[ALSO_FIELD] = _segmented(words)
        if lang != DEFAULT:
            words = chinese_words(doc["title"]) + chinese_words(doc["text"])
            have = set(words)
            parts = [w for w in search_mode(words) if w not in have]
            if parts:
                doc[PARTS_FIELD] = _segmented(parts)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def glossary_table(lang: str) -> str:
    terms = load_glossary()
    if lang == "zh":
        rows = ["| 中文 | English | 含义 | 首次出现时写作 | 不用的译法 |", "| --- | --- | --- | --- | --- |"]
        for t in terms:
            rows.append("| " + " | ".join(_cell(c) for c in (
                f"**{t['zh']}**", t["en"], t.get("zh_note", ""), t.get("first", ""),
                "、".join(t.get("avoid", [])))) + " |")
    else:
        rows = ["| English | 中文 | Meaning |", "| --- | --- | --- |"]
        for t in terms:
            zh = t.get("first", t["zh"])
            rows.append("| " + " | ".join(_cell(c) for c in (
                f"**{t['en']}**", zh, t.get("en_note", ""))) + " |")
    return "\n".join(rows)


def on_config(config):
    """jieba knows the glossary's terms and the readers' words before the search plugin cuts any
    page (the plugin uses the same jieba)."""
    _jieba()
    return config


def _language(config) -> str:
    i18n = config.plugins.get("i18n")
    return getattr(i18n, "current_language", None) or config.theme.get("language") or DEFAULT


def _i18n_busy(config) -> bool:
    """True inside the i18n plugin's nested build of a further language."""
    i18n = config.plugins.get("i18n")
    return bool(getattr(i18n, "building", False))


def on_page_markdown(markdown: str, page, config, files) -> str:
    lang = getattr(page.file, "locale", None) or DEFAULT
    if MARKER.search(markdown):
        markdown = MARKER.sub(lambda _m: glossary_table(lang), markdown)

    def pending(m: re.Match) -> str:
        target = (Path(page.file.src_uri).parent / m.group("path")).as_posix()
        exists = any(f.src_uri in (target, f"{lang}/{target}") for f in files.documentation_pages())
        if exists:
            return f"[{m.group('text')}]({m.group('path')})"
        return m.group("text") + PENDING_LABEL.get(lang, PENDING_LABEL["en"])
    return PENDING.sub(pending, markdown)


# <link rel="alternate" hreflang> in the head: Material fetches "sitemap.xml" under each one to
# switch languages, but the i18n plugin points them at the page in the other language, not at that
# language's root, so every page load asked for /zh/devices/sitemap.xml and got a 404. The
# language selector's own links already keep the page, and the sitemap (/sitemap.xml) carries the
# hreflang alternates for search engines, so the head links go.
ALTERNATE = re.compile(r'\s*<link rel="alternate" href="[^"]*" hreflang="[^"]*">')


# Material's search is a role="dialog" without a name (Lighthouse: aria-dialog-name).
SEARCH_DIALOG = '<div class="md-search" data-md-component="search" role="dialog">'
SEARCH_LABEL = {"en": "Search", "zh": "搜索"}


def _name_search(html: str, lang: str) -> str:
    label = SEARCH_LABEL.get(lang, SEARCH_LABEL[DEFAULT])
    return html.replace(SEARCH_DIALOG, SEARCH_DIALOG[:-1] + f' aria-label="{label}">', 1)


# Pygments wraps every token in a span: most of a long page's elements (4,000 of 4,900 on
# /zh/dp/), and most of the browser's style and layout work. Names (class "n") and whitespace
# ("w") have the code's own colour, so their spans go; operators ("o", "ow") have punctuation's
# colour in both schemes (overrides/main.html), so they become "p"; neighbours of one class become
# one span. The page looks the same.
PLAIN_TOKEN = re.compile(r'<span class="[nw]">([^<]*)</span>')
SAME_TOKENS = re.compile(r'<span class="([\w ]+)">([^<]*)</span><span class="\1">([^<]*)</span>')


def lighter_code(html: str) -> str:
    html = PLAIN_TOKEN.sub(r"\1", html).replace('<span class="ow">', '<span class="o">')
    html = html.replace('<span class="o">', '<span class="p">')
    while True:
        html, n = SAME_TOKENS.subn(r'<span class="\1">\2\3</span>', html)
        if not n:
            return html


def on_post_page(output: str, page, config) -> str:
    """Drop the head's alternate links; name the search dialog; point a non-default language's
    search at its own index; fewer code spans."""
    output = lighter_code(ALTERNATE.sub("", output))
    lang = getattr(page.file, "locale", None) or DEFAULT
    output = _name_search(output, lang)
    if lang == DEFAULT:
        return output
    return _rebase_search(output, lang)


def _rebase_search(html: str, lang: str) -> str:
    # Material reads the index from new URL("search/search_index.json", config.base) and resolves
    # result locations against the same base; base is otherwise only used by features this site
    # does not enable (instant navigation, versions).
    def fix(m: re.Match) -> str:
        cfg = json.loads(m.group(2))
        base = cfg["base"] if cfg["base"].endswith("/") else cfg["base"] + "/"
        cfg["base"] = f"{base}{lang}/"
        return m.group(1) + json.dumps(cfg) + m.group(3)
    return re.sub(r'(<script id="__config" type="application/json">)(.*?)(</script>)', fix, html,
                  count=1, flags=re.S)


def on_post_template(output: str, template_name: str, config) -> str:
    if template_name == "404.html":
        output = _name_search(ALTERNATE.sub("", output), _language(config))
        _not_found[_language(config)] = output
    return output


@event_priority(-200)  # after the i18n plugin (-100) has built every language and merged the index
def on_post_build(config) -> None:
    if _i18n_busy(config):
        return
    site = Path(config.site_dir)
    i18n = config.plugins.get("i18n")
    langs = [lang.locale for lang in i18n.config.languages if lang.build] if i18n else [DEFAULT]
    # 404 pages: the root one in the default language, the others under /<lang>/
    for lang, html in _not_found.items():
        if lang == DEFAULT:
            (site / "404.html").write_text(html, encoding="utf-8")
        elif lang in langs:
            (site / lang).mkdir(parents=True, exist_ok=True)
            (site / lang / "404.html").write_text(_rebase_search(html, lang), encoding="utf-8")
    # search: one index per language
    index = site / "search" / "search_index.json"
    if not index.exists():
        return
    data = json.loads(index.read_text(encoding="utf-8"))
    also = searched_as()
    located = {doc["location"] for doc in data["docs"]}
    missing = sorted({loc for lang, locs in also.items() for loc in locs
                      if (loc if lang == DEFAULT else f"{lang}/{loc}") not in located})
    if missing:  # a page or section id in the glossary's `search` lists that the site lacks
        raise PluginError(f"hooks/glossary.yml search pages not in the search index: {missing}")
    others = [lang for lang in langs if lang != DEFAULT]
    split = {DEFAULT: []} | {lang: [] for lang in others}
    for doc in data["docs"]:
        lang = next((l for l in others if doc["location"].startswith(f"{l}/")), DEFAULT)
        if lang != DEFAULT:
            doc = dict(doc, location=doc["location"][len(lang) + 1:])
        if doc["location"].startswith("notebooks/"):
            continue  # the notebooks repeat the chapters' code: search finds the chapter pages
        # code blocks and recorded outputs stay out of the index (every page loads it): search
        # finds prose, headings and inline code, where every API name a page teaches appears
        doc = dict(doc, text=re.sub(r"<pre>.*?</pre>", "", doc["text"], flags=re.S))
        split[lang].append(doc)
    for lang, docs in split.items():
        add_search_fields(docs, lang, also.get(lang, {}))
        cfg = dict(data["config"])
        cfg["fields"] = {**cfg["fields"], **{f: {"boost": b} for f, b in FIELD_BOOST.items()}}
        # English pages need only the English pipeline; the others keep English too, for API names
        cfg["lang"] = ["en"] if lang == DEFAULT else sorted({"en", lang})
        out = index if lang == DEFAULT else site / lang / "search" / "search_index.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({**data, "config": cfg, "docs": docs}, ensure_ascii=False,
                                  separators=(",", ":")), encoding="utf-8")
