"""The site as a whole: strict build, en/zh parity, explicit heading ids, no code in pages; and in
the built site: nothing loaded from another host, a 404 page and a search index per language, a
"verified on" stamp on every page that shows outputs."""

from __future__ import annotations

import re

import json
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from pagerun import pages, recordings
import sitebuild

pagerun_background = sitebuild.pagerun_background  # the build starts with the blocks

EN = sorted(p.relative_to(pages.DOCS / "en").as_posix() for p in pages.pages("en"))
ZH = sorted(p.relative_to(pages.DOCS / "zh").as_posix() for p in pages.pages("zh"))


def test_strict_build():
    site, _seconds = sitebuild.built()  # mkdocs build --strict, once per session (tests/sitebuild.py)
    assert (site / "index.html").exists()
    assert (site / "zh" / "index.html").exists()


# What a browser loads by itself when it renders a page: (tag, attribute), and <link rel=...>.
LOADED = {("script", "src"), ("img", "src"), ("img", "srcset"), ("iframe", "src"), ("source", "src"),
          ("source", "srcset"), ("video", "src"), ("video", "poster"), ("audio", "src"),
          ("embed", "src"), ("object", "data"), ("input", "src")}
LOADED_LINK_RELS = {"stylesheet", "icon", "shortcut", "apple-touch-icon", "preload", "prefetch",
                    "preconnect", "dns-prefetch", "modulepreload", "manifest"}


class _Resources(HTMLParser):
    def __init__(self):
        super().__init__()
        self.loaded, self.links = [], []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for name, value in a.items():
            if value and (tag, name) in LOADED:
                self.loaded.extend(v.split()[0] for v in value.split(",") if v.strip())
        if tag == "link" and set((a.get("rel") or "").split()) & LOADED_LINK_RELS:
            self.loaded.append(a.get("href", ""))
        if tag == "a" and a.get("href"):
            self.links.append(a["href"])
        if a.get("style") and re.search(r"url\(|@import", a["style"]):
            self.loaded.append("inline style: " + a["style"])


def _html_files():
    site, _ = sitebuild.built()
    return site, sorted(site.rglob("*.html"))


def test_notebook_pages_are_mkdocs_jupyters_own():
    """The build took each notebook's page from .cache/notebooks (pagerun/nbcache.py), rendered
    there with the Jinja templates compiled once per process: the same HTML, table of contents
    and title as mkdocs-jupyter's functions give in a fresh interpreter that compiles them for
    each exporter, for the smallest notebook (`make bench` compares the whole site with one
    built by mkdocs-jupyter alone)."""
    import os
    import subprocess
    import sys

    from pagerun import nbcache

    if nbcache.OFF:
        pytest.skip("DOCS_NOTEBOOK_CACHE=off: mkdocs-jupyter rendered the notebooks alone")
    sitebuild.built()
    notebook = min((pages.DOCS / "zh" / "notebooks").glob("*.ipynb"),
                   key=lambda p: p.stat().st_size)
    entries = sorted(nbcache.CACHE.glob(f"zh-{notebook.stem}-*.json"))
    assert entries, f"the build left no rendering of {notebook} in {nbcache.CACHE}"
    cached = json.loads(entries[0].read_text(encoding="utf-8"))
    code = ("import json, sys; from pathlib import Path; from pagerun import nbcache; "
            "print(json.dumps(nbcache.render(Path(sys.argv[1]), json.loads(sys.argv[2]), "
            "compile_once=False)))")
    env = dict(os.environ, JUPYTER_PATH=os.pathsep.join(
        [str(nbcache.TEMPLATES)] + [p for p in os.environ.get("JUPYTER_PATH", "").split(
            os.pathsep) if p]))
    proc = subprocess.run([sys.executable, "-c", code, str(notebook),
                           json.dumps(cached["options"])],
                          capture_output=True, text=True, env=env, timeout=120, check=True)
    alone = json.loads(proc.stdout.splitlines()[-1])
    assert {k: cached[k] for k in alone} == alone


def test_nothing_is_loaded_from_another_host():
    """Pages load only files of the site itself; links to other sites stay links in the text."""
    site, files = _html_files()
    outside, external_links = [], 0
    for f in files:
        parser = _Resources()
        text = f.read_text(encoding="utf-8")
        parser.feed(text)
        outside += [f"{f.relative_to(site)}: {u}" for u in parser.loaded
                    if urlsplit(u).scheme or u.startswith("//") or u.startswith("inline style")]
        external_links += sum(1 for u in parser.links if urlsplit(u).scheme in ("http", "https"))
        assert "fonts.googleapis" not in text and "fonts.gstatic" not in text, f
    for css in site.rglob("*.css"):
        body = css.read_text(encoding="utf-8")
        outside += [f"{css.relative_to(site)}: {m}" for m in
                    re.findall(r"(?:url\(\s*['\"]?|@import\s+['\"])((?:https?:)?//[^'\")\s]+)", body)]
    assert not outside, "loaded from another host (bundle it or remove it):\n" + "\n".join(outside)
    assert external_links > 0, "expected the pages' links to other sites to be found (parser check)"


def test_tab_sets_are_left_to_the_site_and_underlined():
    """Material's tabs component is kept off the tab sets (no data-tabs: hooks/site.py), and
    overrides/main.html's underline rule covers as many tabs as the widest set has."""
    site, files = _html_files()
    rule = (Path(__file__).parents[1] / "overrides" / "main.html").read_text(encoding="utf-8")
    covered = {int(n) for n in re.findall(r"input:nth-child\((\d+)\):checked ~ \.tabbed-labels",
                                          rule)}
    widest = 0
    for f in files:
        text = f.read_text(encoding="utf-8")
        assert "data-tabs=" not in text, f
        widest = max([widest] + [m.count("<label") for m in
                      re.findall(r'<div class="tabbed-labels">(.*?)</div>', text, re.S)])
    assert widest >= 2 and set(range(1, widest + 1)) <= covered, (widest, covered)


def test_pictures_load_near_the_screen_and_keep_their_place():
    """hooks/pictures.py: every picture on a page loads lazily (its hidden twin for the other
    scheme not at all) and carries its drawn size, so nothing moves when it arrives."""
    site, files = _html_files()
    seen = 0
    for f in files:
        for tag in re.findall(r"<img [^>]*>", f.read_text(encoding="utf-8")):
            src = re.search(r'src="([^"#]+)', tag).group(1)
            assert 'loading="lazy"' in tag, (f, tag[:120])
            svg = (f.parent / src).resolve().read_text(encoding="utf-8")
            w, h = (float(x) * 4 / 3 for x in
                    re.search(r'<svg [^>]*?width="([\d.]+)pt" height="([\d.]+)pt"', svg).groups())
            size = re.search(r'width="(\d+)" height="(\d+)"', tag)
            assert size and (int(size[1]), int(size[2])) == (round(w), round(h)), (f, tag[:120])
            seen += 1
    assert seen >= 20, seen


def test_a_404_page_per_language():
    site, _ = sitebuild.built()
    en = (site / "404.html").read_text(encoding="utf-8")
    zh = (site / "zh" / "404.html").read_text(encoding="utf-8")
    assert '<html lang="en"' in en and "Page not found" in en
    assert '<html lang="zh"' in zh and "页面不存在" in zh


def test_a_search_index_per_language():
    site, _ = sitebuild.built()
    en = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))
    zh = json.loads((site / "zh" / "search" / "search_index.json").read_text(encoding="utf-8"))
    assert {d["location"].split("#")[0] for d in en["docs"]} == {d["location"].split("#")[0] for d in zh["docs"]}
    assert not any(d["location"].startswith("zh/") for d in en["docs"] + zh["docs"])
    han = re.compile(r"[\u4e00-\u9fff]")
    assert not han.search(" ".join(d["title"] for d in en["docs"])), "Chinese titles in the English index"
    zh_text = " ".join(d["text"] for d in zh["docs"])
    assert "\u200b" in zh_text, "Chinese text was not segmented (jieba) for the search index"
    assert "\u200b" in zh["config"]["separator"] or "\\u200b" in zh["config"]["separator"]
    assert zh["config"]["lang"] == ["en", "zh"] and en["config"]["lang"] == ["en"]
    # the Chinese pages' search reads their own index
    page = (site / "zh" / "devices" / "index.html").read_text(encoding="utf-8")
    assert '"base": "../../zh/"' in page


WITH_OUTPUTS = [p for p in [f"en/{p}" for p in EN] + [f"zh/{p}" for p in ZH]
                if any(b.key for b in pages.blocks(pages.DOCS / p))]


@pytest.mark.parametrize("page", WITH_OUTPUTS)
def test_pages_with_outputs_say_what_they_were_verified_on(page):
    keys = [b.key for b in pages.blocks(pages.DOCS / page) if b.key]
    site, _ = sitebuild.built()
    rel = page[3:].removesuffix("index.md").removesuffix(".md")
    html = (site / ("" if page.startswith("en/") else "zh") / rel / "index.html").read_text(encoding="utf-8")
    m = re.search(r'<div class="admonition info">(.*?)</div>', html, re.S)
    assert m, "no 'verified on' stamp under the title"
    for cls in ("cpu", "gpu"):
        for key in keys:
            rec = recordings.load(cls, key)
            if rec is not None:
                for field in ("torch", "device"):
                    assert rec.meta[field] in m.group(1), f"{field} of {rec.path.name} not in the stamp"
                # several dates show as a range, "first – last": a date between them is in it
                spans = re.findall(r"(\d{4}-\d\d-\d\d)(?: – (\d{4}-\d\d-\d\d))?", m.group(1))
                assert any(a <= rec.meta["date"] <= (b or a) for a, b in spans), \
                    f"date of {rec.path.name} not in the stamp"


def test_same_pages_in_both_languages():
    assert EN == ZH


@pytest.mark.parametrize("page", EN)
def test_parity(page):
    en, zh = pages.DOCS / "en" / page, pages.DOCS / "zh" / page
    if not zh.exists():
        pytest.fail(f"docs/zh/{page} is missing")
    assert pages.includes(en) == pages.includes(zh), "the two pages include different code or files"
    assert pages.heading_ids(en) == pages.heading_ids(zh), "heading ids differ"
    key = lambda b: (b.syntax, b.code, sorted(b.marks), b.key, b.exit)  # noqa: E731
    assert [key(b) for b in pages.blocks(en)] == [key(b) for b in pages.blocks(zh)], \
        "runnable blocks (commands, marks, recordings) differ"


@pytest.mark.parametrize("page", [f"en/{p}" for p in EN] + [f"zh/{p}" for p in ZH])
def test_headings_have_explicit_ids(page):
    missing = [h for h in pages.heading_ids(pages.DOCS / page)[1:] if h.startswith("<no id")]
    assert not missing, f"give these headings an id ({{ #some-id }}), the same in both languages: {missing}"


@pytest.mark.parametrize("page", [f"en/{p}" for p in EN] + [f"zh/{p}" for p in ZH])
def test_no_code_copied_into_pages(page):
    """Python code on a page comes from snippets/ through --8<--, never typed into the page."""
    text = (pages.DOCS / page).read_text(encoding="utf-8")
    bad = []
    for m in re.finditer(r"^( *)(`{3,})(python|py)\b[^\n]*\n(.*?)^\1\2\s*$", text, re.S | re.M):
        body = [l for l in m.group(4).splitlines() if l.strip()]
        if any(not pages.INCLUDE.search(l) for l in body):
            bad.append(body[0] if body else "")
    assert not bad, f"python blocks must only include snippets: {bad}"


def test_nav_is_translated():
    cfg = pages.mkdocs_config()

    def labels(nav):
        for entry in nav:
            if isinstance(entry, dict):
                for k, v in entry.items():
                    yield k
                    if isinstance(v, list):
                        yield from labels(v)
    i18n = next(p["i18n"] for p in cfg["plugins"] if isinstance(p, dict) and "i18n" in p)
    zh = next(l for l in i18n["languages"] if l["locale"] == "zh")
    missing = [l for l in labels(cfg["nav"]) if l not in zh.get("nav_translations", {})]
    assert not missing, f"nav labels without a Chinese translation: {missing}"


def test_every_recording_is_used():
    keys = {b.key for b in pages.all_blocks() if b.key}
    stale = [p.relative_to(pages.ROOT).as_posix()
             for cls in (pages.ROOT / "outputs").iterdir() if cls.is_dir()
             for p in cls.rglob("*.txt") if p.relative_to(cls).with_suffix("").as_posix() not in keys]
    assert not stale, f"recorded outputs that no page shows (delete them): {stale}"
