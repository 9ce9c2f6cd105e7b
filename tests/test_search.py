"""The search index, without a browser: readers' words reach their pages, Chinese in search mode,
and the page that teaches a term comes first for it.

tests/test_browser.py types a dozen readers' queries into Material's search in Chromium. This reads
the built index (/search/search_index.json, /zh/search/search_index.json) and checks what makes
searches work:

- every page or section named in a glossary `taught` or `search` is in both indexes, with the
  term's names or the readers' words in its hidden fields, which the index config declares;
- every Chinese word of the zh index is there with its search-mode parts (jieba.cut_for_search):
  检查点 also as 检查 and 查点;
- each reader query, cut the way Material's search cuts it in the browser (the longest words of
  the index, from its `segment` function), finds a word of the expected page for each of its
  pieces;
- ranked by Material's own search (its search worker and lunr, from the built site, run in node:
  tests/material_search.js), every name of every glossary term that has a `taught` page brings
  that page (or section) first, in both languages, and every reader query (READER_SEARCHES) brings
  one of its pages among the first three, as the browser shows them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from importlib import util as _util

import pytest

import sitebuild
from pagerun import pages
from test_browser import READER_SEARCHES, SEARCHES, TOP

pagerun_background = sitebuild.pagerun_background  # the build starts with the blocks

_spec = _util.spec_from_file_location("site_hook", pages.ROOT / "hooks" / "site.py")
site_hook = _util.module_from_spec(_spec)
_spec.loader.exec_module(site_hook)


@pytest.fixture(scope="module")
def indexes() -> dict[str, dict]:
    root, _ = sitebuild.built()
    return {lang: json.loads((root / sub / "search" / "search_index.json").read_text(encoding="utf-8"))
            for lang, sub in (("en", ""), ("zh", "zh"))}


def _tokens(index: dict, doc: dict) -> list[str]:
    """The words of an entry as Material's tokenizer sees them: split by the separator, lower case."""
    sep = re.compile(index["config"]["separator"])
    text = " ".join(str(doc.get(f, "")) for f in index["config"]["fields"])
    text = re.sub(r"<[^>]+>", " ", text)
    return [t.lower() for t in sep.split(text) if t and t.strip()]


def _segment(query: str, vocabulary: set[str]) -> set[str]:
    """Material's query segmentation (integrations/search/query/segment/index.ts, 9.8), as is:
    the longest words of the index at each position, j stopping one short of the query's end."""
    n = len(query)
    cuts = [0] * n
    for i in range(n):
        for j in range(i + 1, n):
            if query[i:j] in vocabulary:
                cuts[i] = j - i
    segments, stack = set(), [0]
    while stack:
        p = stack.pop()
        for q in range(1, cuts[p]):
            if cuts[p + q] > cuts[p] - q:
                segments.add(query[p:p + q])
                stack.append(p + q)
        q = p + cuts[p]
        if q < n and cuts[q] and q < n - 1:
            stack.append(q)
        segments.add(query[p:q])
    return {query} if "" in segments else segments


def _query_terms(query: str, index: dict, vocabulary: set[str]) -> list[str]:
    han = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]+")
    query = han.sub(lambda m: " ".join(sorted(_segment(m.group(0), vocabulary))), query)
    return [t.lower() for t in re.split(index["config"]["separator"], query) if t.strip()]


def test_readers_words_are_in_the_index(indexes):
    fields = site_hook.search_fields()
    assert fields["en"] and fields["zh"], "hooks/glossary.yml has no `taught` or `search`"
    hidden = set(site_hook.FIELD_BOOST)
    for lang, index in indexes.items():
        assert hidden <= set(index["config"]["fields"]), index["config"]["fields"]
        by_location = {d["location"]: d for d in index["docs"]}
        for location, words in fields[lang].items():
            doc = by_location.get(location)
            assert doc is not None, f"{lang}: {location} (hooks/glossary.yml) not in the index"
            for field, expected in words.items():
                if field in (site_hook.TERM_FIELD, site_hook.PAGE_TERM_FIELD):
                    expected = site_hook.name_words(expected, index["config"]["separator"])
                assert doc[field].split("\u200b") == expected, (lang, location, field)
    # the hidden fields are Material's to index, never to render
    assert not hidden & {"title", "text", "tags"}


def test_chinese_compounds_and_parts(indexes):
    index = indexes["zh"]
    assert site_hook.PARTS_FIELD in index["config"]["fields"]
    seen = 0
    for doc in index["docs"]:
        words = site_hook.chinese_words(doc["title"]) + site_hook.chinese_words(doc["text"])
        have = set(words) | set(doc.get(site_hook.PARTS_FIELD, "").split("\u200b"))
        for part in site_hook.search_mode(words):
            assert part in have, f"{doc['location']}: search-mode part {part!r} not indexed"
            seen += 1
    assert seen > 1000, f"only {seen} Chinese words in the zh index: is jieba installed?"
    checkpoints = next(d for d in index["docs"] if d["location"] == "ddp/checkpoints/")
    tokens = set(_tokens(index, checkpoints))
    assert {"检查点", "检查"} <= tokens, "a compound and its parts both indexed"


@pytest.fixture(scope="module")
def page_words(indexes) -> dict[str, tuple[dict[str, set[str]], set[str]]]:
    """language -> (page -> its words as Material's tokenizer sees them, all the words)."""
    out = {}
    for lang, index in indexes.items():
        words: dict[str, set[str]] = {}
        for d in index["docs"]:
            words.setdefault(d["location"].split("#")[0], set()).update(_tokens(index, d))
        out[lang] = words, set().union(*words.values())
    return out


@pytest.mark.parametrize("query,expected,lang", READER_SEARCHES,
                         ids=[f"{lang}-{q}" for q, _, lang in READER_SEARCHES])
def test_reader_query_pieces_reach_the_page(indexes, page_words, query, expected, lang):
    """The query, cut as the browser cuts it, into pieces that each match the words they start
    (Material adds a trailing wildcard to every piece): no page matches more of the pieces than
    the best of the expected pages. tests/test_browser.py checks the ranking itself."""
    index = indexes[lang]
    words, vocabulary = page_words[lang]
    terms = _query_terms(query, index, vocabulary)
    assert terms, query
    matched = {page: sum(any(w.startswith(t) for w in ws) for t in terms) for page, ws in words.items()}
    best = max(matched.get(p, 0) for p in expected)
    assert best, f"{query!r} ({lang}) cut into {terms}: no word of {expected} starts with any piece"
    better = sorted(p for p, n in matched.items() if n > best)
    assert not better, (f"{query!r} ({lang}) cut into {terms}: {better} match more pieces than "
                        f"{expected} ({best}); add the readers' words to a `search` list in "
                        "hooks/glossary.yml")


# Ranking, with Material's own search. ------------------------------------------------------------

NODE = shutil.which("node")
LANGS = {"en": "search/search_index.json", "zh": "zh/search/search_index.json"}


def _ranked(queries: dict[str, list[str]]) -> dict[str, dict[str, dict]]:
    """language -> query -> {groups, pieces}, from Material's search worker (material_search.js)."""
    if NODE is None:
        if os.environ.get("CI") == "true":
            pytest.fail("node is not installed: the ranking tests need it (apt-get install nodejs)")
        pytest.skip("node is not installed: the ranking tests run Material's search in it")
    root, _ = sitebuild.built()
    out = {}
    for lang, qs in queries.items():
        proc = subprocess.run([NODE, str(pages.ROOT / "tests" / "material_search.js"), str(root),
                               LANGS[lang]], input=json.dumps(sorted(set(qs))),
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-3000:]
        out[lang] = json.loads(proc.stdout)
    return out


TERMS = [t for t in site_hook.load_glossary() if t.get("taught")]


def name_queries(term: dict, lang: str) -> list[str]:
    """What a reader types for the term: the term in that language and the words of its `search`
    lists without `pages` (its other names)."""
    return [term[lang]] + [w for s in site_hook.search_lists(term) if "pages" not in s
                           for w in s.get(lang, [])]


@pytest.fixture(scope="module")
def ranked():
    queries = {lang: [q for t in TERMS for q in name_queries(t, lang)] for lang in LANGS}
    for query, _, lang in READER_SEARCHES:
        queries[lang].append(query)
    for query, _, langs in SEARCHES:
        for lang in langs:
            queries[lang].append(query)
    return _ranked(queries)


def _hits(location: str, target: str) -> bool:
    """An index location is the target: the section itself, or any entry of a target page."""
    return location == target if "#" in target else location.split("#")[0] == target


def _reached(term: dict, lang: str, pieces: list[str], separator: str) -> set[str]:
    """The pieces of a query that start a word of one of the term's names (as its field has them)."""
    words = [w.lower() for name in site_hook.names(term, lang)
             for w in re.split(separator, name) if w.strip()]
    return {p for p in pieces if any(w.startswith(p) for w in words)}


@pytest.mark.parametrize("term", TERMS, ids=[t["en"] for t in TERMS])
def test_names_rank_their_teaching_entry_first(ranked, indexes, term):
    """Each name of the term brings the page (or section) that teaches it first: first in the
    results list and, for a section, the entry the list opens with Enter (the best score).

    A query that Material reduces to pieces that reach another term's names as well (gather for
    all-gather: lunr drops all, an English stop word; 分* for 分发 and 分片: Material searches a
    Chinese word of two characters as its first character) cannot tell the two apart: then the
    first result may teach the other term, and this one's page must be among the first three."""
    target = site_hook.location(term["taught"])
    bad = []
    for lang in LANGS:
        separator = indexes[lang]["config"]["separator"]
        for query in name_queries(term, lang):
            result = ranked[lang][query]
            groups, pieces = result["groups"], result["pieces"]
            top = groups[0][0][0] if groups else None
            if top is not None and _hits(top, target):
                continue
            mine = _reached(term, lang, pieces, separator)
            rivals = {site_hook.location(t["taught"]): t["en"] for t in TERMS
                      if t is not term and mine and _reached(t, lang, pieces, separator) >= mine}
            first3 = [item for group in groups[:TOP] for item, _ in group]
            if (top is not None and any(_hits(top, loc) for loc in rivals)
                    and any(_hits(item, target) for item in first3)):
                continue  # the query cannot tell this term from a rival's; see the docstring
            shown = [[(loc, round(score)) for loc, score in group[:2]] for group in groups[:3]]
            bad.append(f"{lang} {query!r} (searched as {pieces}): {shown}")
    assert not bad, (f"the first result for {term['en']!r} is not {target} (its `taught`):\n  "
                     + "\n  ".join(bad))


@pytest.mark.parametrize("query,expected,lang", READER_SEARCHES,
                         ids=[f"{lang}-{q}" for q, _, lang in READER_SEARCHES])
def test_reader_query_ranks_its_page(ranked, query, expected, lang):
    """Every reader query, ranked as the site ranks it: one of its pages among the first TOP."""
    groups = ranked[lang][query]["groups"]
    first = [group[0][0].split("#")[0] for group in groups[:TOP]]
    assert set(first) & set(expected), f"{query!r} ({lang}): none of {expected} in the first {TOP} {first}"


_found = [(q, pages, lang) for q, pages, langs in SEARCHES for lang in langs]


@pytest.mark.parametrize("query,expected,lang", _found,
                         ids=[f"{lang}-{q}-{'|'.join(p)}" for q, p, lang in _found])
def test_search_finds_its_pages(ranked, query, expected, lang):
    """Every query of tests/test_browser.py's SEARCHES finds one of its pages (anywhere in the
    results), as Material's search worker finds them in the browser; the browser types a few."""
    found = {item.split("#")[0] for group in ranked[lang][query]["groups"] for item, _ in group}
    assert found & set(expected), f"{query!r} ({lang}): none of {expected} among {sorted(found)}"
