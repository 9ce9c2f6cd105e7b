"""The glossary (hooks/glossary.yml) is the one list of terms; the Chinese pages keep to it.

Every docs/zh page is read outside code (fences, inline code, HTML comments, link targets) and
must not contain any of the renderings a glossary entry lists under ``avoid``. To add a term or an
alternative to avoid, edit hooks/glossary.yml: the glossary pages and this test both read it.
"""

from __future__ import annotations

import re
from importlib import util as _util

import pytest

import sitebuild
from pagerun import pages

# hooks/site.py by path: "site" is also the name of a standard-library module
_spec = _util.spec_from_file_location("site_hook", pages.ROOT / "hooks" / "site.py")
site_hook = _util.module_from_spec(_spec)
_spec.loader.exec_module(site_hook)

TERMS = site_hook.load_glossary()
pagerun_background = sitebuild.pagerun_background  # the build starts with the blocks
ZH_PAGES = [p.relative_to(pages.DOCS).as_posix() for p in pages.pages("zh")]


def prose(text: str, inline_code: str = "") -> list[tuple[int, str]]:
    """(line number, text) of a page's prose: no code, no comments, no link targets.

    Inline code is replaced by ``inline_code`` (removed by default)."""
    text = re.sub(r"<!--.*?-->", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    out, fence = [], None
    for n, line in enumerate(text.split("\n"), 1):
        s = line.strip()
        if fence is None and s.startswith("```"):
            fence = s[: len(s) - len(s.lstrip("`"))]
            continue
        if fence is not None:
            if s.startswith(fence) and not s.strip("`"):
                fence = None
            continue
        line = re.sub(r"(`+).*?\1", lambda m: inline_code, line)  # inline code
        line = re.sub(r"\]\([^)]*\)", "]", line)           # link targets
        line = re.sub(r'--8<--\s*"[^"]*"', "", line)       # includes
        out.append((n, line))
    return out


def test_glossary_data_is_well_formed():
    seen_en, seen_zh = set(), set()
    for t in TERMS:
        assert {"en", "zh"} <= t.keys(), t
        assert t["en"] not in seen_en, f"duplicate English term {t['en']!r}"
        assert t["zh"] not in seen_zh, f"duplicate Chinese term {t['zh']!r}"
        seen_en.add(t["en"])
        seen_zh.add(t["zh"])
        for alt in t.get("avoid", []):
            # an alternative inside the term itself would flag every correct use
            assert alt not in t["zh"] and alt not in t.get("first", ""), (t["en"], alt)
    for t in TERMS:  # the pages search sends readers to exist, in both languages
        lists = site_hook.search_lists(t)
        targets = [t["taught"]] if t.get("taught") else []
        for s in lists:
            assert set(s) <= {"pages", "en", "zh"} and (s.get("en") or s.get("zh")), (t["en"], s)
            assert "pages" in s or t.get("taught"), f"{t['en']}: a `search` list without `pages` needs `taught`"
            targets += s.get("pages", [])
        for target in targets:
            src, _, anchor = target.partition("#")
            for lang in ("en", "zh"):
                page = pages.DOCS / lang / src
                assert page.is_file(), f"{t['en']}: {target} is not a page of docs/{lang}"
                if anchor:
                    assert re.search(rf"\{{\s*#{re.escape(anchor)}\s*\}}", page.read_text(encoding="utf-8")), \
                        f"{t['en']}: no section {{ #{anchor} }} in docs/{lang}/{src}"
    all_terms = {t["zh"] for t in TERMS} | {t.get("first", "") for t in TERMS}
    for t in TERMS:
        for alt in t.get("avoid", []):
            clash = [z for z in all_terms if z and alt in z]
            assert not clash, f"avoided {alt!r} ({t['en']}) is part of the glossary term(s) {clash}"


def test_glossary_pages_render_every_term():
    """Each term once, in the built glossary page of each language, in the table under the
    heading of the chapter that teaches it (the first table when none does), its name linking to
    that section."""
    site, _ = sitebuild.built()
    for lang, prefix in (("en", ""), ("zh", "zh/")):
        html = (site / prefix / "glossary" / "index.html").read_text(encoding="utf-8")
        sections = re.split(r'<h2 id="([\w-]+)"', html)  # text before, then (id, what follows)
        where = {}
        for chapter, text in zip(sections[1::2], sections[2::2]):
            for m in re.finditer(r"<tr>\s*<td><strong>(?:<a href=\"([^\"]*)\">)?([^<]+)<", text):
                where.setdefault(m.group(2), []).append((chapter, m.group(1)))
        assert sections[1:2] == ["general"], f"/{prefix}glossary/ has no table of general terms first"
        for t in TERMS:
            taught = t.get("taught")
            chapter = taught.split("/")[0] if taught else "general"
            href = None
            if taught:  # ddp/index.md#x -> ../ddp/#x, ddp/techniques.md -> ../ddp/techniques/
                path, _, anchor = taught.partition("#")
                path = path.removesuffix("index.md") if path.endswith("index.md") \
                    else path.removesuffix(".md") + "/"
                href = "../" + path + (f"#{anchor}" if anchor else "")
            assert where.get(t[lang]) == [(chapter, href)], (lang, t["en"], where.get(t[lang]))
    for lang in ("en", "zh"):
        text = (pages.DOCS / lang / "glossary.md").read_text(encoding="utf-8")
        assert site_hook.MARKER.search(text), f"docs/{lang}/glossary.md lost its <!-- glossary --> line"


@pytest.mark.parametrize("page", ZH_PAGES)
def test_zh_page_uses_glossary_terms(page):
    found = []
    for n, line in prose((pages.DOCS / page).read_text(encoding="utf-8")):
        for t in TERMS:
            for alt in t.get("avoid", []):
                if alt in line:
                    found.append(f"line {n}: {alt!r} -> use {t['zh']!r} ({t['en']})")
    assert not found, "use the glossary's terms (hooks/glossary.yml):\n" + "\n".join(found)


def test_prose_filter_sees_only_prose():
    text = "a 锁页内存 b\n```text\n锁页内存\n```\n`锁页内存` <!-- 锁页内存 --> [x](锁页内存.md)\n"
    assert [n for n, line in prose(text) if "锁页内存" in line] == [1]


# An English message a page quotes in inline code: three or more plain words, not a command or
# a call. The Chinese page quotes it verbatim too (readers search the text the program prints),
# adding a Chinese gloss beside it, never instead of it.
MESSAGE = re.compile(r"[A-Za-z][\w' ,.:;!?()%-]*")
NOT_MESSAGE = re.compile(r"^(?:python|torchrun|pip|export|nvidia|OMP|CUDA_|make|mkdocs|git)\b"
                         r"|\w\(")


def english_messages(text: str) -> set[str]:
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return {s for s in re.findall(r"`([^`\n]+)`", text)
            if len(s.split()) >= 3 and MESSAGE.fullmatch(s) and not NOT_MESSAGE.search(s)}


@pytest.mark.parametrize("page", ZH_PAGES)
def test_zh_page_quotes_english_messages_verbatim(page):
    en = pages.DOCS / "en" / page.removeprefix("zh/")
    zh = (pages.DOCS / page).read_text(encoding="utf-8")
    missing = sorted(m for m in english_messages(en.read_text(encoding="utf-8"))
                     if f"`{m}`" not in zh)
    assert not missing, "quote these messages in English, as the English page does:\n" + \
        "\n".join(f"  `{m}`" for m in missing)


@pytest.mark.parametrize("page", ZH_PAGES)
def test_zh_prose_uses_chinese_quotation_marks(page):
    text = (pages.DOCS / page).read_text(encoding="utf-8")
    bad = [f"line {n}: {line.strip()[:80]}" for n, line in prose(text)
           if '"' in re.sub(r"\{[^}]*\}|<[^>]+>", "", line)
           and not re.match(r"\s*(?:!!!|\?\?\?|===|#)", line)]  # admonition/tab titles: syntax
    assert not bad, "use “…” around quoted words in Chinese prose:\n" + "\n".join(bad)


def test_message_checks_can_fail():
    assert english_messages("x `Connection closed by peer` y `torchrun --nproc 2 a.py`") == {
        "Connection closed by peer"}
    assert [n for n, line in prose('说 "快" 了\n`"x"`\n') if '"' in line] == [1]


# Spacing between Chinese and Latin text: a space between a CJK character and a Latin letter, a
# digit or inline code (`x`), and no space between two CJK characters (Chinese has no spaces
# between words). Full-width punctuation (，。：“”（）) takes no space on either side. A link's
# brackets are not text: 见[float16 …](…) reads as 见float16 and is spaced as that.
CJK = r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]"
FULL_WIDTH = "，。：；！？（）“”‘’、《》「」"
WIDE = rf"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff{FULL_WIDTH}]"  # CJK or full-width punctuation
SPACING = re.compile(rf"{CJK}(?=[A-Za-z0-9`])|[A-Za-z0-9`](?={CJK})|{WIDE} +(?={WIDE})")
LINK_BRACKETS = str.maketrans("", "", "[]")


def spacing_slips(text: str) -> list[tuple[int, str]]:
    """(line number, excerpt) of each place where Chinese and Latin text are spaced wrongly."""
    found = []
    for n, line in prose(text, inline_code="`code`"):
        line = line.translate(LINK_BRACKETS)
        for m in SPACING.finditer(line):
            found.append((n, line[max(0, m.start() - 12):m.end() + 13].strip()))
    return found


@pytest.mark.parametrize("page", ZH_PAGES)
def test_zh_prose_spaces_between_chinese_and_latin(page):
    bad = spacing_slips((pages.DOCS / page).read_text(encoding="utf-8"))
    assert not bad, ("a space between Chinese and Latin letters, digits or inline code, none "
                     "between two Chinese characters:\n"
                     + "\n".join(f"  docs/{page}:{n}: …{excerpt}…" for n, excerpt in bad))


def test_spacing_check_can_fail():
    text = ("装的是CPU 版\n这类操作有`.item()`、\n更小的kernel都\n遍历 自动求导图\n"
            "第2步\n"                                    # digit next to CJK, on both sides
            "好的：CPU 版，`x` 和 `y`（见[文档](a b.md)、**粗体**）\n"  # fine
            "```text\n装的是CPU\n```\n<!-- 装的是CPU -->\n"
            "见[float16 何时上溢](a.md)\n下面的[交错式 1F1B](#i)一节\n见 [张量 API 文档](b.md)\n"  # 11-13
            "在[数据并行（DDP）](c.md) 之上\n")                                           # 14
    assert [n for n, _ in spacing_slips(text)] == [1, 2, 3, 3, 4, 5, 5, 11, 12, 13, 14]
