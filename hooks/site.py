"""MkDocs hook: the reader-facing parts of the site that are generated, not typed.

- ``<!-- glossary -->`` on a page renders the glossary from ``hooks/glossary.yml`` in the page's
  language, one table per chapter (the same data ``tests/test_glossary.py`` checks the zh pages
  against).
- One search index per language: the i18n plugin writes one index for both languages at
  ``/search/search_index.json``; after the last language is built this splits it into
  ``/search/search_index.json`` (English pages) and ``/zh/search/search_index.json`` (Chinese
  pages), and points the Chinese pages' search at theirs, so each language's search box returns
  pages in its own language.
- Search finds the page that teaches a term first, and the words readers type: a glossary entry
  names the page (or section) that teaches it (``taught``), whose search entry gets the term's
  names in a heavy field; and it lists, under ``search``, the words readers use (多机训练, 爆显存,
  OOM, ...) and the pages that answer them, which get those words in a field as heavy as a title.
  Both fields are indexed and never shown. Chinese text is also indexed in jieba's search mode: a
  hidden field carries the parts of every compound (检查点 also as 检查), so a compound and its
  parts both match. See CONTRIBUTING.md, "Search".
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
    # libyaml's loader where PyYAML has it (wheels do): the same data, six times faster; the
    # build reads the glossary once per page
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(GLOSSARY.read_text(encoding="utf-8"), Loader=loader)


# Search: hidden fields of an index entry, which Material searches and never shows (it indexes
# every field named in the index's config.fields and renders only title, text and tags).
# CONTRIBUTING.md, "Search", says how they rank; tests/test_search.py ranks with Material's own search to check it.
TERM_FIELD = "term"           # a section that teaches a glossary term (its `taught`): the term's names
PAGE_TERM_FIELD = "pageterm"  # the same on a page that teaches one
ALSO_FIELD = "also"           # the readers' words of the glossary's `search` lists, on their pages
PARTS_FIELD = "parts"         # jieba's search-mode parts of the entry's Chinese words, not already there
CUTS_FIELD = "cuts"           # words that only make a query cut right (query_words): weightless
# title 1000, text 1 (Material's defaults). A name weighs ten titles on the entry that teaches it:
# that entry comes first for the name, before the pages whose titles or readers' words share some
# of its words. Material multiplies a page's score by up to 5 and a section's by up to 2 after lunr
# has scored them ("post-query boosts", integrations/search/_), so a section's names weigh 2.5
# times a page's, and a name weighs the same on either. A reader's word weighs a title.
NAME_BOOST = 10000.0
FIELD_BOOST = {TERM_FIELD: 2.5 * NAME_BOOST, PAGE_TERM_FIELD: NAME_BOOST, ALSO_FIELD: 1000.0,
               PARTS_FIELD: 1.0, CUTS_FIELD: 1e-9}  # 1e-9: lunr reads a boost of 0 as 1
# Appended to each Chinese word of a name: a word of its own, on the entries that teach a term of
# that name only. lunr weighs a word by its rarity in the whole index (idf), so 张量, on most pages,
# would weigh a fifth of 张量并行, on a few, and a query that reaches both would rank the page that
# teaches 张量并行 first. A query reaches the marked word all the same (Material ends every piece of
# a query with a wildcard). English names share their words (tensor, tensor parallel), which
# keep the index's weights: GPU, on every page, stays light. U+9FA5 is the last character of the
# word characters of lunr-languages' Chinese trimmer (一-龥), which would otherwise cut it off.
NAME_MARK = "\u9fa5"
_HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
HAN = re.compile(f"[{_HAN}]+")  # CJK ideographs
RUNS = re.compile(f"[{_HAN}]+|[^{_HAN}]+")  # runs of CJK ideographs and of anything else
# Where a typed word ends (the one-character part of the search separator, mkdocs.yml): DataLoader
# is one word, all-reduce two.
QUERY_SPLIT = re.compile(r"[\s\u200b\-_,:!=\[\]()\"`/.]")


def page_url(src: str) -> str:
    """docs-relative source path (``ddp/multinode.md``) -> the page's URL (``ddp/multinode/``)."""
    if src == "index.md":
        return ""
    return src.removesuffix("index.md") if src.endswith("/index.md") else src.removesuffix(".md") + "/"


def location(target: str) -> str:
    """A glossary target (``ddp/multinode.md#restarts``) -> its index location (``ddp/multinode/#restarts``)."""
    src, _, anchor = target.partition("#")
    return page_url(src) + (f"#{anchor}" if anchor else "")


def _words(lang: str, words: dict) -> list[str]:
    """A language's words of a `search` list; the Chinese search gets the English words too:
    Chinese readers type OOM and NaN as well."""
    return words.get(lang, []) + (words.get("en", []) if lang != DEFAULT else [])


def search_lists(term: dict) -> list[dict]:
    """A term's `search` lists: one mapping, or a list of them."""
    s = term.get("search") or []
    return [s] if isinstance(s, dict) else list(s)


def names(term: dict, lang: str) -> list[str]:
    """What a reader types for the term itself, in a language: the term (the Chinese index: the
    Chinese term, then the English one) and the words of its `search` lists that name no pages
    (they lead to the page that teaches it)."""
    out = [term["en"]] if lang == DEFAULT else [term["zh"], term["en"]]
    for s in search_lists(term):
        if "pages" not in s:
            out += [w for w in _words(lang, s) if w not in out]
    return out


def query_words(words: list[str]) -> list[str]:
    """What the index needs for a query that types one of these words to be cut into that word:
    each Chinese word of three or more characters, less its last character (CUTS_FIELD). Material
    cuts a Chinese query into the longest words of the index that start at each of its characters,
    but never takes the whole query as one word (integrations/search/query/segment, 9.x): with 锁页内
    in the index, 锁页内存 is searched as 锁页内*, which only words starting with 锁页内 match;
    without it, as 锁页* and 内*, and 内* matches 内存不足, 内层 and every other word that starts
    with 内. (A word of two characters is searched as its first character, whatever the index has.)"""
    return list(dict.fromkeys(run[:-1] for w in words for run in HAN.findall(w) if len(run) >= 3))


def search_fields(terms: list[dict] | None = None) -> dict[str, dict[str, dict[str, list[str]]]]:
    """language -> index location -> hidden field -> its words.

    The entry a term names as `taught` gets its names in TERM_FIELD (PAGE_TERM_FIELD on a page) and
    the words its queries need in CUTS_FIELD; the pages a `search` list names get its words in
    ALSO_FIELD."""
    out: dict[str, dict[str, dict[str, list[str]]]] = {"en": {}, "zh": {}}

    def add(lang: str, loc: str, field: str, words: list[str]) -> None:
        if not words:
            return
        bucket = out[lang].setdefault(loc, {}).setdefault(field, [])
        bucket += [w for w in words if w not in bucket]

    for t in terms if terms is not None else load_glossary():
        lists = search_lists(t)
        if t.get("taught"):
            loc = location(t["taught"])
            for lang in out:
                words = names(t, lang)
                add(lang, loc, TERM_FIELD if "#" in loc else PAGE_TERM_FIELD, words)
                add(lang, loc, CUTS_FIELD, query_words(words))
        elif any("pages" not in s for s in lists):
            raise ValueError(f"hooks/glossary.yml: {t['en']!r} has a `search` list without "
                             "`pages` but no `taught` page for it to lead to")
        for s in lists:
            for target in s.get("pages", []):
                for lang in out:
                    add(lang, location(target), ALSO_FIELD, _words(lang, s))
                    add(lang, location(target), CUTS_FIELD, query_words(_words(lang, s)))
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
            for lst in search_lists(t):
                words.update(HAN.findall(" ".join(lst.get("zh", []))))
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
        for part in (_cut_for_search(w) if jieba else [w]):
            seen.setdefault(part)
    return list(seen)


_search_cuts: dict[str, list[str]] = {}  # a word's parts: the same words recur on every page


def _cut_for_search(word: str) -> list[str]:
    if word not in _search_cuts:
        _search_cuts[word] = list(_jieba().cut_for_search(word))
    return _search_cuts[word]


def _segmented(words: list[str]) -> str:
    """Words for a hidden field: separated by U+200B (part of the search separator)."""
    return "\u200b".join(words)


def name_repeats(name: str) -> int:
    """How many times a name's words go into its field: 3 for a name of one word as typed
    (DataLoader is one; a Chinese word of up to two characters is one, of three or four two), 2
    for two words, 1 for more. lunr counts repeats (tf), up to about twice the weight of one: of
    the names a query reaches, the one with the fewest words besides the query's ranks first
    (tensor before tensor parallel, 张量 before 张量并行)."""
    words = sum(-(-len(run) // 2) if HAN.fullmatch(run) else 1
                for word in QUERY_SPLIT.split(name) if word for run in RUNS.findall(word))
    return max(1, 4 - words)


def name_words(names: list[str], separator: str) -> list[str]:
    """The words of a name field: each word of the names (split as Material's tokenizer splits
    them), Chinese ones marked (NAME_MARK), as many times as the shortest name with it asks
    (name_repeats)."""
    repeats: dict[str, int] = {}
    for name in names:
        for word in re.split(separator, name):
            if word.strip():
                word += NAME_MARK if HAN.search(word) else ""
                repeats[word] = max(repeats.get(word, 0), name_repeats(name))
    return [w for w, n in repeats.items() for _ in range(n)]


def add_search_fields(docs: list[dict], lang: str, fields: dict[str, dict[str, list[str]]],
                      separator: str) -> None:
    """Fill the hidden fields of one language's index entries, in place."""
    for doc in docs:
        for field, words in fields.get(doc["location"], {}).items():
            if field in (TERM_FIELD, PAGE_TERM_FIELD):
                words = name_words(words, separator)
            # whole: the search matches a query's pieces as prefixes of these
            doc[field] = _segmented(words)
        if lang != DEFAULT:
            words = chinese_words(doc["title"]) + chinese_words(doc["text"])
            have = set(words)
            parts = [w for w in search_mode(words) if w not in have]
            if parts:
                doc[PARTS_FIELD] = _segmented(parts)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


GENERAL = {"en": "Used on every page", "zh": "各章通用"}
# each language's glossary columns: the header, and a term's cells after its (linked) name
COLUMNS = {
    "en": (["English", "中文", "Meaning"],
           lambda t: [t.get("first", t["zh"]), t.get("en_note", "")]),
    "zh": (["中文", "English", "含义", "首次出现时写作", "不用的译法"],
           lambda t: [t["en"], t.get("zh_note", ""), t.get("first", ""), "、".join(t.get("avoid", []))]),
}


def glossary_table(lang: str, chapters: dict[str, str] | None = None) -> str:
    """The glossary in ``lang``: one table per chapter, in the order of ``chapters`` (a chapter's
    folder, e.g. ``ddp``, -> its title in the navigation), each term under the chapter whose page
    teaches it (its ``taught``) and linked there; the terms no chapter teaches come first. Tables
    of a dozen rows, not one of 124: a reader finds a chapter's words together, and the browser
    lays out only the tables near the screen (overrides/main.html)."""
    chapters = chapters or {}
    groups: dict[str, list[dict]] = {}
    for t in load_glossary():
        groups.setdefault(t["taught"].split("/")[0] if t.get("taught") else "", []).append(t)
    order = [""] + [c for c in chapters if c in groups]
    order += sorted(c for c in groups if c not in order)  # a chapter missing from the nav
    header, rest = COLUMNS[lang]
    out = []
    for chapter in order:
        title = chapters.get(chapter, chapter) if chapter else GENERAL[lang]
        out += [f"## {title} {{ #{chapter or 'general'} }}\n",
                "| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
        for t in groups[chapter]:
            name = f"[{t[lang]}]({t['taught']})" if t.get("taught") else t[lang]
            out.append("| " + " | ".join(_cell(c) for c in [f"**{name}**", *rest(t)]) + " |")
        out.append("")
    return "\n".join(out)


def chapter_titles(config, lang: str) -> dict[str, str]:
    """Each chapter's folder -> its title in the navigation, in ``lang``, in the nav's order."""
    translations: dict = {}
    i18n = config.plugins.get("i18n")
    for language in getattr(getattr(i18n, "config", None), "languages", None) or []:
        if language.locale == lang:
            translations = language.nav_translations or {}
    titles = {}
    for item in config["nav"] or []:
        for title, target in item.items():
            first = target
            while isinstance(first, list):  # a section: its first page's folder
                first = next(iter(first[0].values()))
            if "/" in first:
                titles.setdefault(first.split("/")[0], translations.get(title, title))
    return titles


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
        table = glossary_table(lang, chapter_titles(config, lang))
        markdown = MARKER.sub(lambda _m: table, markdown)

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
# /zh/dp/), and most of the browser's work to parse and style it. Names ("n"), whitespace ("w"),
# operators ("o", "ow") and punctuation ("p") are written in the code's own colour, so their spans
# go (punctuation alone was 1,962 of the 3,383 spans of /zh/model-parallel/tensor/, and 80 ms of
# its 805 ms of main-thread time at load); neighbours of one class become one span. Keywords,
# strings, numbers, comments and built-ins keep their colours.
PLAIN_TOKEN = re.compile(r'<span class="(?:[nwop]|ow)">([^<]*)</span>')
SAME_TOKENS = re.compile(r'<span class="([\w ]+)">([^<]*)</span><span class="\1">([^<]*)</span>')


def lighter_code(html: str) -> str:
    html = PLAIN_TOKEN.sub(r"\1", html)
    while True:
        html, n = SAME_TOKENS.subn(r'<span class="\1">\2\3</span>', html)
        if not n:
            return html


DATA_TABS = re.compile(r' data-tabs="[0-9:]*"')


def _drop_alternates(html: str) -> str:
    """ALTERNATE removed from the head (the regex, which starts with whitespace, is slow over a
    whole long page)."""
    end = html.find("</head>")
    if end < 0:
        return ALTERNATE.sub("", html)
    return ALTERNATE.sub("", html[:end]) + html[end:]


def on_post_page(output: str, page, config) -> str:
    """Drop the head's alternate links and the tab sets' data-tabs; name the search dialog;
    point a non-default language's search at its own index; fewer code spans."""
    output = lighter_code(_drop_alternates(output))
    # tab sets without data-tabs: Material's tabs component, which forced a layout per set at
    # load, leaves them to overrides/partials/javascripts/content.html
    output = DATA_TABS.sub("", output)
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
        output = _name_search(_drop_alternates(output), _language(config))
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
    fields = search_fields()
    located = {doc["location"] for doc in data["docs"]}
    missing = sorted({loc for lang, locs in fields.items() for loc in locs
                      if (loc if lang == DEFAULT else f"{lang}/{loc}") not in located})
    if missing:  # a page or section id in the glossary's `taught` or `search` that the site lacks
        raise PluginError(f"hooks/glossary.yml: pages not in the search index: {missing}")
    others = [lang for lang in langs if lang != DEFAULT]
    split = {DEFAULT: []} | {lang: [] for lang in others}
    for doc in data["docs"]:
        lang = next((l for l in others if doc["location"].startswith(f"{l}/")), DEFAULT)
        if lang != DEFAULT:
            doc = dict(doc, location=doc["location"][len(lang) + 1:])
        # code blocks and recorded outputs stay out of the index (every page loads it): search
        # finds prose, headings and inline code, where every API name a page teaches appears
        doc = dict(doc, text=re.sub(r"<pre>.*?</pre>", "", doc["text"], flags=re.S))
        split[lang].append(doc)
    for lang, docs in split.items():
        add_search_fields(docs, lang, fields.get(lang, {}), data["config"]["separator"])
        cfg = dict(data["config"])
        cfg["fields"] = {**cfg["fields"], **{f: {"boost": b} for f, b in FIELD_BOOST.items()}}
        # English pages need only the English pipeline; the others keep English too, for API names
        cfg["lang"] = ["en"] if lang == DEFAULT else sorted({"en", lang})
        out = index if lang == DEFAULT else site / lang / "search" / "search_index.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({**data, "config": cfg, "docs": docs}, ensure_ascii=False,
                                  separators=(",", ":")), encoding="utf-8")
