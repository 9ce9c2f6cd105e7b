"""The search index, without a browser: readers' words reach their pages, Chinese in search mode.

tests/test_browser.py types the readers' queries (READER_SEARCHES) into Material's search in
Chromium. This reads the built index (/search/search_index.json, /zh/search/search_index.json)
and checks the parts of it that make those searches work, in a second:

- every page or section named in a glossary `search` list is in both indexes and carries the
  readers' words in its hidden field, which the index config declares as a searched field;
- every Chinese word of the zh index is there with its search-mode parts (jieba.cut_for_search):
  检查点 also as 检查 and 查点;
- each reader query, cut the way Material's search cuts it in the browser (the longest words of
  the index, from its `segment` function), finds a word of the expected page for each of its
  pieces.
"""

from __future__ import annotations

import json
import re
from importlib import util as _util

import pytest

import sitebuild
from pagerun import pages
from test_browser import READER_SEARCHES

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
    also = site_hook.searched_as()
    assert also["en"] and also["zh"], "hooks/glossary.yml has no `search` lists"
    for lang, index in indexes.items():
        assert site_hook.ALSO_FIELD in index["config"]["fields"], index["config"]["fields"]
        by_location = {d["location"]: d for d in index["docs"]}
        for location, words in also[lang].items():
            doc = by_location.get(location)
            assert doc is not None, f"{lang}: {location} (hooks/glossary.yml search) not in the index"
            assert doc[site_hook.ALSO_FIELD].split("\u200b") == words
    # the hidden fields are Material's to index, never to render
    assert not {site_hook.ALSO_FIELD, site_hook.PARTS_FIELD} & {"title", "text", "tags"}


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


@pytest.mark.parametrize("query,expected,lang", READER_SEARCHES,
                         ids=[f"{lang}-{q}" for q, _, lang in READER_SEARCHES])
def test_reader_query_pieces_reach_the_page(indexes, query, expected, lang):
    """The query, cut as the browser cuts it, into pieces that each match the words they start
    (Material adds a trailing wildcard to every piece): no page matches more of the pieces than
    the best of the expected pages. tests/test_browser.py checks the ranking itself."""
    index = indexes[lang]
    words: dict[str, set[str]] = {}
    for d in index["docs"]:
        words.setdefault(d["location"].split("#")[0], set()).update(_tokens(index, d))
    vocabulary = set().union(*words.values())
    terms = _query_terms(query, index, vocabulary)
    assert terms, query
    matched = {page: sum(any(w.startswith(t) for w in ws) for t in terms) for page, ws in words.items()}
    best = max(matched.get(p, 0) for p in expected)
    assert best, f"{query!r} ({lang}) cut into {terms}: no word of {expected} starts with any piece"
    better = sorted(p for p, n in matched.items() if n > best)
    assert not better, (f"{query!r} ({lang}) cut into {terms}: {better} match more pieces than "
                        f"{expected} ({best}); add the readers' words to a `search` list in "
                        "hooks/glossary.yml")
