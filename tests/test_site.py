"""The site as a whole: strict build, en/zh parity, explicit heading ids, no code in pages."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import yaml

import pages

EN = sorted(p.relative_to(pages.DOCS / "en").as_posix() for p in pages.pages("en"))
ZH = sorted(p.relative_to(pages.DOCS / "zh").as_posix() for p in pages.pages("zh"))


def test_strict_build(tmp_path):
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
                          cwd=pages.ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "site" / "index.html").exists()
    assert (tmp_path / "site" / "zh" / "index.html").exists()


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
    class Loader(yaml.SafeLoader):
        pass
    Loader.add_multi_constructor("", lambda loader, suffix, node: None)
    cfg = yaml.load((pages.ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=Loader)

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
    keys = {b.key for p in pages.pages() for b in pages.blocks(p) if b.key}
    stale = [p.relative_to(pages.ROOT).as_posix()
             for cls in (pages.ROOT / "outputs").iterdir() if cls.is_dir()
             for p in cls.rglob("*.txt") if p.relative_to(cls).with_suffix("").as_posix() not in keys]
    assert not stale, f"recorded outputs that no page shows (delete them): {stale}"
