"""The built site in a real browser: Chromium (Debian's /usr/bin/chromium) driven by Playwright.

The site is built once (tests/sitebuild.py) and served on a free port of 127.0.0.1. Every request
the browser makes is recorded; any request to another host is aborted and fails the run, as does
any console error. A screenshot of a chapter page per language goes to test-artifacts/.

Material's search worker builds the language's whole index on every page load (about a second of
Chromium's CPU on a 2-core machine): a test that does not search gets an index with the real
configuration and no entries (`Browser.search = False`, the default of the `clean` fixture);
the search tests load the real one. One Chromium serves this module and tests/test_calculator.py.

Chromium missing: this module fails on CI (CI=true), where .ci/run installs it, and is skipped with
the reason elsewhere. Never run `playwright install`: the browser is the distribution's.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
from pathlib import Path
import html
import re
from urllib.parse import unquote, urljoin, urlsplit

import pytest

import sitebuild

pagerun_background = sitebuild.pagerun_background  # the build starts with the blocks

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run"]
ARTIFACTS = sitebuild.ROOT / "test-artifacts"
# Material has started: DOMContentLoaded reached its document$, a ReplaySubject, which hands its
# last value to a new subscriber at once
MATERIAL_STARTED = ("() => { let seen = false; if (window.document$)"
                    " document$.subscribe(() => { seen = true; }).unsubscribe(); return seen; }")
CHAPTER = "devices/"  # the chapter page used for copy buttons, tabs and screenshots

# Search: query -> the pages (relative to the language root) any of which must be among the
# results, and the languages to search in. A query whose pages are not built yet is skipped with
# the reason; it starts to run as soon as one of its pages exists. Extend here.
SEARCHES = [
    ("数据并行", ["dp/"], ["zh"]),
    ("分布式", ["ddp/"], ["zh"]),
    ("固定内存", ["cuda/", "ddp/", "dp/"], ["zh"]),
    ("DataParallel", ["dp/"], ["en", "zh"]),
    ("set_epoch", ["ddp/"], ["en", "zh"]),
    ("non_blocking", ["cuda/", "ddp/"], ["en", "zh"]),
    # the Devices chapter, which exists now
    ("CUDA_VISIBLE_DEVICES", ["devices/"], ["en", "zh"]),
    ("torch.device", ["devices/"], ["en", "zh"]),
    ("显存", ["training/memory/"], ["zh"]),  # the glossary teaches GPU memory there
    ("设备", ["devices/"], ["zh"]),
    ("固定内存", ["glossary/"], ["zh"]),
]

# Readers' questions, typed the way readers type them (their words, not the pages'): one of the
# pages must be among the first TOP pages of the results. The words the pages do not use reach
# them through the glossary's `search` lists (hooks/glossary.yml, CONTRIBUTING.md "Search").
TOP = 3
READER_SEARCHES = [
    ("多机训练", ["ddp/multinode/"], "zh"),
    ("断点续训", ["ddp/multinode/", "ddp/checkpoints/"], "zh"),
    ("多机多卡", ["ddp/multinode/"], "zh"),
    ("单机多卡", ["ddp/"], "zh"),
    ("多卡训练", ["ddp/", "dp/"], "zh"),
    ("分布式训练", ["ddp/"], "zh"),
    ("爆显存", ["troubleshooting/", "training/memory/"], "zh"),
    ("显存不够", ["troubleshooting/", "training/memory/"], "zh"),
    ("OOM", ["troubleshooting/", "training/memory/"], "zh"),
    ("训练卡住", ["ddp/debugging/"], "zh"),
    ("梯度累积", ["ddp/techniques/", "model-parallel/fsdp-practice/"], "zh"),
    ("混合精度", ["training/"], "zh"),
    ("流水线显存", ["model-parallel/pipeline/"], "zh"),
    ("loss 变成 NaN", ["training/"], "zh"),
    ("多机训练怎么配置", ["ddp/multinode/"], "zh"),
    ("DDP 比单卡还慢", ["ddp/techniques/"], "zh"),
    ("FSDP 保存模型显存不足", ["model-parallel/fsdp/"], "zh"),
    ("显存估算", ["model-parallel/plan/"], "zh"),
    ("三维并行", ["model-parallel/all-dims/"], "zh"),
    ("3D parallelism", ["model-parallel/all-dims/"], "en"),
    ("梯度裁剪", ["model-parallel/fsdp/"], "zh"),
    ("锁页内存", ["cuda/"], "zh"),
    ("梯度检查点", ["model-parallel/", "ddp/techniques/"], "zh"),
    ("重计算", ["model-parallel/", "ddp/techniques/"], "zh"),
    ("僵尸进程", ["troubleshooting/"], "zh"),
    ("显存不释放", ["troubleshooting/"], "zh"),
    ("进程杀不掉", ["troubleshooting/"], "zh"),
    ("端口被占用", ["troubleshooting/"], "zh"),
    ("NCCL 卡住", ["troubleshooting/", "ddp/debugging/"], "zh"),
    ("4090 多卡卡住", ["troubleshooting/"], "zh"),
    ("num_workers 设多少", ["ddp/techniques/"], "zh"),
    ("DataLoader 内存暴涨", ["ddp/techniques/"], "zh"),
    ("数据加载慢", ["ddp/techniques/"], "zh"),
    ("完全分片数据并行", ["model-parallel/fsdp/"], "zh"),
    ("ZeRO-3", ["model-parallel/fsdp/"], "zh"),
    ("FSDP 多机慢", ["model-parallel/fsdp/"], "zh"),
    ("长序列训练", ["context/"], "zh"),
    ("128k 上下文", ["context/"], "zh"),
    ("迭代周期", ["ddp/techniques/"], "zh"),
    ("全收集", ["collectives/"], "zh"),
    ("自动微分", ["glossary/"], "zh"),
    ("MoE 负载不均衡", ["expert/"], "zh"),
    ("专家并行 all-to-all", ["expert/"], "zh"),
    ("multi-GPU", ["ddp/"], "en"),
    ("multi node training", ["ddp/multinode/"], "en"),
    ("out of memory", ["troubleshooting/", "training/memory/"], "en"),
    ("OOM", ["troubleshooting/", "training/memory/"], "en"),
    ("NaN loss", ["training/"], "en"),
    ("training hangs", ["ddp/debugging/"], "en"),
    ("deadlock", ["ddp/debugging/"], "en"),
    ("resume from checkpoint", ["ddp/multinode/", "ddp/checkpoints/"], "en"),
    ("gradient accumulation", ["ddp/techniques/", "model-parallel/fsdp-practice/"], "en"),
    ("pipeline bubble", ["model-parallel/pipeline/"], "en"),
    ("pipeline memory", ["model-parallel/pipeline/"], "en"),
    ("long context training", ["context/"], "en"),
    ("128k context", ["context/"], "en"),
    ("DDP slower than one GPU", ["ddp/techniques/"], "en"),
    ("merge distcp checkpoint into one file",
     ["model-parallel/fsdp/", "production/checkpoints/"], "en"),
    ("async_save blocks training", ["production/checkpoints/"], "en"),
    ("SIGTERM preemption checkpoint", ["production/faults/"], "en"),
    ("torchft lighthouse", ["production/faults/"], "en"),
    ("换卡数加载检查点", ["production/checkpoints/"], "zh"),
    ("任务被抢占 SIGTERM", ["production/faults/"], "zh"),
    ("FSDP clip_grad_norm", ["model-parallel/fsdp/"], "en"),
    ("ShardedGradScaler", ["model-parallel/fsdp/"], "en"),
    ("dry run", ["model-parallel/plan/"], "en"),
    ("pinned memory", ["cuda/"], "en"),
    ("gradient checkpointing", ["model-parallel/", "ddp/techniques/"], "en"),
    ("zombie processes", ["troubleshooting/"], "en"),
    ("Address already in use", ["troubleshooting/"], "en"),
    ("NCCL hangs on RTX 4090", ["troubleshooting/"], "en"),
    ("num_workers", ["ddp/techniques/"], "en"),
    ("ZeRO-3", ["model-parallel/fsdp/"], "en"),
    ("FSDP slow multi-node", ["model-parallel/fsdp/"], "en"),
    ("FSDP generate 报错", ["model-parallel/fsdp-practice/"], "zh"),
    ("加载预训练权重", ["model-parallel/fsdp-practice/"], "zh"),
    ("共享权重", ["model-parallel/fsdp-practice/"], "zh"),
    ("LoRA 微调", ["model-parallel/fsdp-practice/"], "zh"),
    ("参数不更新", ["model-parallel/fsdp-practice/"], "zh"),
    ("损失归一化", ["model-parallel/fsdp-practice/"], "zh"),
    ("流水线验证", ["model-parallel/pipeline/"], "zh"),
    ("权重初始化报错", ["model-parallel/tensor/"], "zh"),
    ("数据重复", ["ddp/techniques/"], "zh"),
    ("FSDP generate", ["model-parallel/fsdp-practice/"], "en"),
    ("生成长度不同卡死", ["model-parallel/fsdp-practice/"], "zh"),
    ("评估后参数没分片", ["model-parallel/fsdp-practice/"], "zh"),
    ("from_local 形状不对", ["model-parallel/tensor/"], "zh"),
    ("布尔掩码报错", ["model-parallel/tensor/"], "zh"),
    ("synced_gpus hang", ["model-parallel/fsdp-practice/"], "en"),
    ("reshard after evaluation", ["model-parallel/fsdp-practice/"], "en"),
    ("from_local uneven", ["model-parallel/tensor/"], "en"),
    ("aten.nonzero.default", ["model-parallel/tensor/"], "en"),
    ("tied embeddings", ["model-parallel/fsdp-practice/"], "en"),
    ("pretrained weights", ["model-parallel/fsdp-practice/"], "en"),
    ("pipeline evaluation", ["model-parallel/pipeline/"], "en"),
    ("IterableDataset duplicate data", ["ddp/techniques/"], "en"),
    ("_orig_mod", ["production/checkpoints/"], "en"),
    ("optimizer state not loaded", ["production/checkpoints/"], "en"),
    ("resume mid-epoch", ["ddp/techniques/"], "en"),
    ("same augmentation on every rank", ["ddp/techniques/"], "en"),
    ("编译后加载权重报错", ["production/checkpoints/"], "zh"),
    ("优化器状态没加载", ["production/checkpoints/"], "zh"),
    ("续训数据顺序", ["ddp/techniques/"], "zh"),
    ("数据增强一样", ["ddp/techniques/"], "zh"),
    ("MoE all-to-all", ["expert/"], "en"),
    ("token dropping", ["expert/"], "en"),
    ("save_on_cpu slow", ["production/activations/"], "en"),
    ("selective activation checkpointing policy", ["production/activations/"], "en"),
    ("float8 training CPU", ["production/precision/"], "en"),
    ("unscale gradients before clipping", ["production/precision/"], "en"),
    ("选择性激活检查点", ["production/activations/"], "zh"),
    ("激活卸载", ["production/activations/"], "zh"),
    ("FP8 训练", ["production/precision/"], "zh"),
]


def _missing_browser() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the Python package `playwright` is not installed (pip install playwright)"
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        return (f"{CHROMIUM} not found: install Debian's chromium and chromium-driver "
                "(apt-get install -y chromium chromium-driver; .ci/run does)")
    return None


class Browser:
    """One Chromium with a fresh profile; records requests, blocked hosts and console errors."""

    def __init__(self, base: str, profile: Path, root: Path | None = None):
        from playwright.sync_api import sync_playwright
        self.base, self.root = base, root  # root: the built site (for the empty search index)
        self.search = True  # serve the real search index (False: one without entries)
        self.searchable = False  # the page on screen was loaded with the real index
        self.requests: list[str] = []
        self.outside: list[str] = []
        self.errors: list[str] = []
        self._pw = sync_playwright().start()
        self.context = self._pw.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, args=ARGS,
            viewport={"width": 1280, "height": 900}, service_workers="block")
        # a guard against a page that never loads, not a speed check: on a busy 2-core machine
        # (the whole suite running beside it) a page load has taken more than 5 s
        self.context.set_default_timeout(30_000)
        self.context.route("**/*", self._route)
        self.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=base)
        self.page = self.context.pages[0] if self.context.pages else self.context.new_page()
        self.page.on("console", lambda m: m.type == "error" and not self._expected_404(m)
                     and self.errors.append(f"{self.page.url}: {m.text}"))
        self.page.on("pageerror", lambda e: self.errors.append(f"{self.page.url}: {e}"))
        self.page.on("response", lambda r: r.status >= 400 and not r.url.startswith(f"{base}/no/")
                     and self.errors.append(f"{r.status} {r.url}"))

    def _expected_404(self, message) -> bool:
        """test_not_found_pages asks for a missing page on purpose."""
        return "404" in message.text and self.page.url.startswith(f"{self.base}/no/")

    def _route(self, route):
        url = route.request.url
        self.requests.append(url)
        host = urlsplit(url).hostname
        if (not self.search and self.root is not None and host == "127.0.0.1"
                and urlsplit(url).path.endswith("/search/search_index.json")):
            route.fulfill(status=200, content_type="application/json",
                          body=_empty_index(self.root, urlsplit(url).path))
        elif url.startswith(("data:", "blob:")) or host == "127.0.0.1":
            route.continue_()
        else:
            self.outside.append(url)
            route.abort()

    def goto(self, path: str):
        self.searchable = self.search
        return _load(self.page, self.base + "/" + path.lstrip("/"))

    def close(self):
        self.context.close()
        self._pw.stop()


def _load(page, url: str, *, reader: bool = True):
    """Load the page and, as a reader would, press a key (Shift, which does nothing else), then
    wait until Material has started: it starts on the reader's first input, or 5 s after the
    load event (overrides/main.html); times out if Material's bundle never runs or never sees
    DOMContentLoaded. ``reader=False``: the page only, nothing pressed, nothing waited for."""
    resp = page.goto(url, wait_until="load")
    if reader:
        page.keyboard.press("Shift")
        page.wait_for_function(MATERIAL_STARTED, timeout=30_000)
    return resp


@functools.lru_cache(maxsize=None)
def _empty_index(root: Path, path: str) -> str:
    """The built search index at ``path`` with its configuration and no entries."""
    index = json.loads((root / path.lstrip("/")).read_text(encoding="utf-8"))
    return json.dumps(dict(index, docs=[]))


_SHARED: dict[str, Browser] = {}


@pytest.fixture(scope="module")
def browser(request, tmp_path_factory):
    """The session's Chromium (started by the first module that asks, closed at the end), and
    the check that this module's pages made no console error and no request to another host."""
    reason = _missing_browser()
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"browser tests cannot run on CI: {reason}")
        pytest.skip(reason)
    if "b" not in _SHARED:
        root, _ = sitebuild.built()
        base, server = sitebuild.serve(root)
        b = Browser(base, tmp_path_factory.mktemp("chromium-profile"), root)
        _SHARED["b"] = b

        def close():
            b.close()
            server.shutdown()

        request.config.add_cleanup(close)
    b = _SHARED["b"]
    n_err, n_out = len(b.errors), len(b.outside)
    yield b
    assert not b.outside[n_out:], f"requests left 127.0.0.1: {b.outside[n_out:]}"
    assert not b.errors[n_err:], f"console errors: {b.errors[n_err:]}"


@pytest.fixture
def clean(browser):
    """Each test checks that it produced no console error and no request to another host.
    Its pages get a search index without entries unless the test searches (``_search``)."""
    n_err, n_out = len(browser.errors), len(browser.outside)
    browser.search = False
    yield browser
    assert browser.outside[n_out:] == [], "requests left 127.0.0.1"
    assert browser.errors[n_err:] == [], "console errors"


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_chapter_page_loads_and_screenshot(clean, lang):
    b = clean
    prefix = "" if lang == "en" else "zh/"
    resp = b.goto(prefix + CHAPTER)
    assert resp.status == 200
    assert b.page.locator("html").get_attribute("lang") == lang
    # the page-level "verified on" stamp is there
    assert "torch" in b.page.locator(".admonition.info").first.inner_text()
    # Chinese pages name Chinese fonts (overrides/main.html): the rule must win over Material's,
    # and they come before the Latin ones (one font draws a sentence: a faster first layout)
    family = b.page.evaluate("getComputedStyle(document.querySelector('.md-typeset p')).fontFamily")
    assert ("WenQuanYi Micro Hei" in family) == (lang == "zh"), family
    if lang == "zh":
        assert family.index("PingFang SC") < family.index("WenQuanYi") < family.index("Arial"), \
            family
    # no list starts with Material's placeholder "_", a font no system has (a lookup each)
    code = b.page.evaluate("getComputedStyle(document.querySelector('.md-typeset pre code'))"
                           ".fontFamily")
    assert not family.startswith("_") and not code.startswith("_"), (family, code)
    assert code.startswith("SFMono-Regular") and code.endswith("monospace"), code
    ARTIFACTS.mkdir(exist_ok=True)
    b.page.screenshot(path=str(ARTIFACTS / f"chapter-{lang}.png"), full_page=False)
    assert all(urlsplit(u).hostname == "127.0.0.1" for u in b.requests if u.startswith("http"))


@pytest.mark.parametrize("start,target", [(CHAPTER, "zh/" + CHAPTER), ("zh/" + CHAPTER, CHAPTER)])
def test_language_switch_keeps_the_page(clean, start, target):
    b = clean
    b.goto(start)
    lang = "zh" if target.startswith("zh/") else "en"
    b.page.hover(".md-header__option .md-select")
    b.page.locator(f'.md-select__link[hreflang="{lang}"]').click()
    b.page.wait_for_load_state("load")
    assert b.page.url == f"{b.base}/{target}"


def test_dark_mode_toggle_switches_and_is_remembered(clean):
    """overrides/partials/palette.html: one button shown, a click or Enter switches the scheme,
    and the next page (any language) opens in the reader's choice, with the other button."""
    b = clean
    b.goto(CHAPTER)
    b.page.evaluate("localStorage.clear()")
    b.goto(CHAPTER)
    body = b.page.locator("body")
    shown = b.page.locator("[data-md-palette] label:visible")

    def scheme():
        assert shown.count() == 1
        return body.get_attribute("data-md-color-scheme"), shown.get_attribute("title")

    assert scheme() == ("default", "Dark mode")
    shown.click()
    assert scheme() == ("slate", "Light mode")
    # the page really changed colour, not only the attribute
    assert b.page.evaluate("getComputedStyle(document.body).colorScheme") == "dark"
    b.goto("zh/" + CHAPTER)
    assert body.get_attribute("data-md-color-scheme") == "slate"
    b.page.locator("[data-md-palette] input:checked").focus()
    b.page.keyboard.press("Enter")
    assert body.get_attribute("data-md-color-scheme") == "default"
    b.page.keyboard.press("ArrowRight")  # a radio group: the arrows choose too
    assert body.get_attribute("data-md-color-scheme") == "slate"
    b.goto(CHAPTER)
    assert scheme() == ("slate", "Light mode")
    b.page.evaluate("localStorage.clear()")


def test_copy_button_copies_the_code(clean):
    b = clean
    b.goto(CHAPTER)
    button = "button[data-md-type='copy']"  # Material 9.8; earlier versions: button.md-clipboard
    # content.lazy (mkdocs.yml): a block gets its button when it scrolls into view
    assert b.page.locator(button).count() < b.page.locator("div.highlight pre").count()
    # one element, held: a locator such as "the first block with a button" is looked up again
    # at each use, and finds another block once scrolling has mounted more buttons
    block = b.page.locator("div.highlight pre >> visible=true").last.element_handle()
    block.scroll_into_view_if_needed()
    block.wait_for_selector(button)
    expected = block.query_selector("code").inner_text().strip()
    block.hover()
    block.query_selector(button).click()
    b.page.wait_for_selector(".md-dialog--active")
    copied = b.page.evaluate("navigator.clipboard.readText()").strip()
    assert copied == expected


def test_output_tabs_switch(clean):
    b = clean
    b.goto(CHAPTER)
    tabs = b.page.locator(".tabbed-set").filter(has=b.page.locator(".tabbed-labels label", has_text="GPU")).first
    labels = tabs.locator(".tabbed-labels > label")
    blocks = tabs.locator(".tabbed-content > .tabbed-block")
    n = labels.count()  # CPU and GPU; an output that differs between builds has two CPU tabs
    assert n >= 2
    labels.nth(n - 1).click()
    assert blocks.nth(n - 1).is_visible() and not blocks.nth(0).is_visible()
    # text_content: code below the fold is not laid out (content-visibility), so has no
    # innerText until scrolled near
    assert "gpu" in blocks.nth(n - 1).text_content().lower()
    labels.nth(0).click()
    assert blocks.nth(0).is_visible() and not blocks.nth(n - 1).is_visible()
    assert "torch" in blocks.nth(0).text_content()
    # the build tabs: CPU-only build, CUDA build (both without a GPU), GPU
    three = b.page.locator(".tabbed-set").filter(
        has=b.page.locator(".tabbed-labels label", has_text="CUDA build")).first
    assert three.locator(".tabbed-labels > label").count() == 3


def test_output_tabs_are_linked_and_remembered(clean):
    """overrides/partials/javascripts/content.html: choosing a tab in one set chooses the same
    tab in every set, or else one of its kind ("GPU (H200)" chooses "GPU (H100)"); the set
    clicked stays where it was on the screen; the chosen tab is underlined; the next page opens
    on the reader's choice. Material's tabs component is not mounted (no data-tabs)."""
    b = clean
    b.goto(CHAPTER)
    b.page.evaluate("localStorage.clear()")
    b.goto(CHAPTER)
    assert b.page.locator("[data-tabs]").count() == 0
    sets = b.page.locator(".tabbed-set").filter(
        has=b.page.locator(".tabbed-labels > label", has_text="GPU"))
    assert sets.count() >= 3

    def chosen():
        return sets.evaluate_all("""sets => sets.map(set => {
            const input = set.querySelector(':scope > input:checked');
            const label = set.querySelector(`label[for="${input.id}"]`);
            return [label.textContent.trim(), getComputedStyle(label).borderBottomColor];
        })""")

    def click(set, text):  # a click in the page: Playwright's own scrolls the label into view
        set.locator(".tabbed-labels > label", has_text=text).evaluate("label => label.click()")

    assert not any(text.startswith("GPU") for text, _ in chosen())
    clicked = sets.nth(sets.count() - 1)
    # as in Safari, which has no scroll anchoring (and with every block laid out, so that the
    # page above does not move by itself): the script, not Chromium, keeps the set still
    b.page.add_style_tag(content="html { overflow-anchor: none } .md-typeset .highlight, "
                         ".md-typeset .tabbed-set { content-visibility: visible !important }")
    clicked.evaluate("set => { set.scrollIntoView(); scrollBy(0, -300); }")
    top = clicked.bounding_box()["y"]
    click(clicked, "GPU")
    assert abs(clicked.bounding_box()["y"] - top) < 2
    labels = {text for text, _ in chosen()}
    assert {t.split(" ")[0] for t in labels} == {"GPU"} and len(labels) >= 2, labels  # H100, H200
    assert all(line not in ("rgba(0, 0, 0, 0)", "transparent") for _, line in chosen())
    # the same label before one of its kind: "CUDA build" in one build set chooses it in the
    # other, not that set's first CPU tab; the sets without it choose their CPU tab
    builds = sets.filter(has=b.page.locator(".tabbed-labels > label", has_text="CUDA build"))
    assert builds.count() == 2
    click(builds.nth(0), "CUDA build")
    assert sorted(text.split(" ")[1] if "build" in text else text for text, _ in chosen()) == \
        ["CPU"] * (sets.count() - 2) + ["CUDA"] * 2
    b.goto("zh/" + CHAPTER)  # remembered, in the other language too
    assert sets.count() >= 3 and all(text.startswith("CPU") for text, _ in chosen())
    b.page.evaluate("localStorage.clear()")


def test_recorded_outputs_wrap_on_a_wide_screen_and_scroll_on_a_phone(clean):
    """overrides/main.html: on a 1280 px screen no recorded output scrolls sideways (a line of
    torch's own words wider than the column wraps); on a 390 px phone they keep Material's
    sideways scroll, so that a printed table stays aligned."""
    b = clean
    outputs = ".tabbed-block > .highlight:not([class*=\"language-\"]) pre > code"
    for path in ("ddp/", "troubleshooting/", "model-parallel/fsdp/"):
        b.goto(path)
        b.page.add_style_tag(content=".md-typeset .highlight, .md-typeset .tabbed-set "
                             "{ content-visibility: visible !important }")
        wide = b.page.locator(outputs).evaluate_all(
            "codes => codes.filter(c => c.offsetParent && c.scrollWidth > c.clientWidth + 1)"
            ".map(c => c.textContent.split('\\n').reduce((a, l) => l.length > a.length ? l : a))")
        assert wide == [], (path, wide)
        assert b.page.locator(outputs).first.evaluate("c => getComputedStyle(c).whiteSpace") \
            == "pre-wrap"
    b.page.set_viewport_size({"width": 390, "height": 844})
    try:
        b.goto("ddp/")
        assert b.page.locator(outputs).first.evaluate("c => getComputedStyle(c).whiteSpace") \
            == "pre"
    finally:
        b.page.set_viewport_size({"width": 1280, "height": 900})


BUNDLE_REQUESTED = ("performance.getEntriesByType('resource')"
                    ".filter(e => /bundle\\.[0-9a-f]+\\.min\\.js$/.test(e.name))"
                    ".map(e => e.startTime)")
LOADED = "performance.getEntriesByType('navigation')[0].loadEventEnd"


def test_material_waits_for_the_reader(browser):
    """overrides/main.html: while the page loads, Material's bundle is neither fetched nor run
    (nor, through it, the search index); it starts 5 s after the load event when the reader does
    nothing, and at once on the reader's first key (or tap, scroll...), and then works."""
    b = browser
    page = b.context.new_page()  # its own page: the listener below must not reach the others
    try:
        # nothing pressed: Material starts by itself 5 s after the load event, and nothing of
        # it (the bundle, the search index it asks for) is fetched before
        _load(page, f"{b.base}/{CHAPTER}", reader=False)
        started, since_load = page.evaluate(f"[typeof window.document$, performance.now() - {LOADED}]")
        if since_load < 4000:  # else a busy machine took too long to ask
            assert started == "undefined", f"Material started {since_load:.0f} ms after load"
        page.wait_for_function(MATERIAL_STARTED, timeout=30_000)
        (bundle,), loaded = page.evaluate(BUNDLE_REQUESTED), page.evaluate(LOADED)
        assert bundle >= loaded + 4900, f"bundle at {bundle:.0f} ms, load event at {loaded:.0f} ms"
        index = page.evaluate("performance.getEntriesByType('resource')"
                              ".filter(e => e.name.includes('search_index')).map(e => e.startTime)")
        assert all(t > bundle for t in index), (index, bundle)
        # a key: Material starts on it, not on the timer
        page.add_init_script("addEventListener('keydown', e => { window.key = performance.now(); },"
                             " {capture: true, once: true});")
        _load(page, f"{b.base}/{CHAPTER}", reader=False)
        page.keyboard.press("Shift")
        page.wait_for_function(MATERIAL_STARTED, timeout=30_000)
        (bundle,), loaded, key = (page.evaluate(BUNDLE_REQUESTED), page.evaluate(LOADED),
                                  page.evaluate("window.key"))
        assert key is not None and bundle >= key, (key, bundle)
        if key < loaded + 4000:  # else a busy machine pressed it too late to tell the two apart
            assert bundle < loaded + 4900, f"bundle at {bundle:.0f} ms, key at {key:.0f} ms"
        # and it works: a code block on screen gets Material's copy button
        block = page.locator("div.highlight pre >> visible=true").first.element_handle()
        block.scroll_into_view_if_needed()
        block.wait_for_selector("button[data-md-type='copy']", state="attached")
    finally:
        page.close()


def _search(b, lang: str, query: str) -> list[str]:
    """Type a query into the search box of the language's home page; the result pages' paths."""
    prefix = "" if lang == "en" else "zh/"
    b.search = True
    if (not b.searchable or not b.page.url.startswith(f"{b.base}/{prefix}")
            or (lang == "en" and "/zh/" in b.page.url)):
        b.goto(prefix)
    box = b.page.locator("input.md-search__input")
    box.click()
    box.fill("")
    box.press("End")  # an empty query: Material clears the previous results, so that the
    b.page.wait_for_function(  # wait below cannot read the previous query's results as these
        "() => { const m = document.querySelector('.md-search-result__meta');"
        " return !m || /Type to start|键入以开始/.test(m.textContent) }")
    box.fill(query)
    box.press("End")  # Material searches on key events, which fill() (needed for Chinese) does not send
    b.page.wait_for_function(
        "q => { const m = document.querySelector('.md-search-result__meta');"
        " return m && document.querySelector('input.md-search__input').value === q"
        " && !/Type to start|键入以开始/.test(m.textContent) }", arg=query)
    try:  # the results render after the count; on a busy machine that can take a while
        b.page.wait_for_function("() => document.querySelectorAll('.md-search-result__link').length > 0",
                                 timeout=10_000)
    except Exception:  # noqa: BLE001 - no result at all: the caller's assertion says so
        pass
    hrefs = b.page.evaluate("[...document.querySelectorAll('.md-search-result__link')].map(a => a.href)")
    b.page.keyboard.press("Escape")
    return list(dict.fromkeys(urlsplit(h).path for h in hrefs))


# In the browser, a few of SEARCHES (each search costs Chromium about a second of CPU):
# tests/test_search.py finds every one of them with Material's own search in node. Grouped by
# language: a search in the other language loads its home page, whose search worker then builds
# that language's index again.
IN_BROWSER_SEARCHES = {("DataParallel", "en"), ("CUDA_VISIBLE_DEVICES", "en"),
                       ("数据并行", "zh"), ("固定内存", "zh"), ("torch.device", "zh")}
_cases = sorted(((q, pages, lang) for q, pages, langs in SEARCHES for lang in langs
                 if (q, lang) in IN_BROWSER_SEARCHES), key=lambda case: case[2] == "zh")


@pytest.mark.parametrize("query,expected,lang", _cases,
                         ids=[f"{lang}-{q}-{'|'.join(p)}" for q, p, lang in _cases])
def test_search(clean, query, expected, lang):
    b = clean
    prefix = "" if lang == "en" else "zh/"
    present = [p for p in expected if (b.root / prefix / p / "index.html").exists()]
    if not present:
        pytest.skip(f"no page {expected} in this build yet; this query runs once one exists")
    paths = _search(b, lang, query)
    assert paths, f"no results for {query!r}"
    wanted = [f"/{prefix}{p}" for p in present]
    assert any(p in wanted for p in paths), f"{query!r} in {lang}: {wanted} not among {paths}"
    for p in paths:  # results come from this language's pages only
        assert p.startswith("/zh/") == (lang == "zh"), f"{p} is not a {lang} page"


# In the browser: a dozen of them, each language's hardest (Chinese compounds, words the pages do
# not use, phrases with spaces); tests/test_search.py ranks every one with Material's own search
# in node, as this does (about 0.6 s a query saved from the suite's time).
IN_BROWSER = {"多机训练", "断点续训", "爆显存", "训练卡住", "loss 变成 NaN", "DDP 比单卡还慢",
              "锁页内存", "梯度检查点", "multi node training", "out of memory", "training hangs",
              "resume from checkpoint", "DDP slower than one GPU", "ShardedGradScaler"}
BROWSER_SEARCHES = sorted((s for s in READER_SEARCHES if s[0] in IN_BROWSER),
                          key=lambda s: s[2] == "en")  # zh first: test_search ended there


@pytest.mark.parametrize("query,expected,lang", BROWSER_SEARCHES,
                         ids=[f"{lang}-{q}" for q, _, lang in BROWSER_SEARCHES])
def test_search_readers_words(clean, query, expected, lang):
    b = clean
    prefix = "" if lang == "en" else "zh/"
    missing = [p for p in expected if not (b.root / prefix / p / "index.html").exists()]
    assert not missing, f"pages {missing} are not in the site: fix READER_SEARCHES"
    paths = _search(b, lang, query)
    wanted = [f"/{prefix}{p}" for p in expected]
    assert any(p in wanted for p in paths[:TOP]), \
        f"{query!r} in {lang}: none of {wanted} among the first {TOP} results {paths[:TOP]}"


@pytest.mark.parametrize("path,lang,title", [("no/such/page/", "en", "Page not found"),
                                             ("zh/404.html", "zh", "页面不存在")])
def test_not_found_pages(clean, path, lang, title):
    b = clean
    resp = b.goto(path)
    assert resp.status == (404 if path.startswith("no/") else 200)
    assert b.page.locator("html").get_attribute("lang") == lang
    assert title in b.page.locator("h1").first.inner_text()


def _built_pages(root: Path) -> list[str]:
    """Every HTML page of the built site, as a path under the site root ('' is the home page)."""
    return sorted(p.relative_to(root).as_posix().removesuffix("index.html")
                  for p in root.rglob("*.html") if p.name == "index.html" or p.name == "404.html")


class _Refs:
    """The ids, link targets and image sources of one built page (the HTML Material writes)."""
    ID = re.compile(r'\sid="([^"]*)"')
    HREF = re.compile(r'<a\s[^>]*?href="([^"]*)"')
    IMG = re.compile(r'<img\s[^>]*?src="([^"]*)"')

    def __init__(self, text: str):
        self.ids = set(self.ID.findall(text))
        self.links = [html.unescape(h) for h in self.HREF.findall(text)]
        self.images = self.IMG.findall(text)


def _refs(root: Path, page: str) -> _Refs:
    path = root / (page if page.endswith(".html") else page + "index.html")
    return _Refs(path.read_text(encoding="utf-8"))


def test_every_internal_link_resolves():
    """Every link from one page of the site to another (or to a file of it) finds its target,
    and a #fragment finds an element with that id there. Both languages, every page."""
    root, _ = sitebuild.built()
    bad, checked = [], 0
    cache: dict[str, _Refs] = {}

    def refs(key: str) -> _Refs:
        if key not in cache:
            cache[key] = _refs(root, key)
        return cache[key]

    for page in _built_pages(root):
        for href in refs(page if page.endswith(".html") else page + "index.html").links:
            parts = urlsplit(href)
            if parts.scheme or href.startswith(("//", "mailto:")) or not (parts.path or parts.fragment):
                continue
            target = urljoin("/" + page, parts.path).lstrip("/") if parts.path else page
            file = root / target
            if file.is_dir() or target.endswith("/") or target == "":
                file = file / "index.html"
            checked += 1
            if not file.exists():
                bad.append(f"/{page}: {href} -> /{target} (not found)")
                continue
            if parts.fragment and file.suffix == ".html":
                key = file.relative_to(root).as_posix()
                if unquote(parts.fragment) not in refs(key).ids:
                    bad.append(f"/{page}: {href} (no id {parts.fragment!r} in /{key})")
    assert checked > 500, f"only {checked} internal links found: is the parser still right?"
    assert not bad, f"{len(bad)} broken internal links:\n" + "\n".join(bad[:50])


def test_every_image_loads(clean):
    """Every <img> on every page, both languages, is loaded by the browser (naturalWidth > 0).

    Each page's sources are resolved against that page's own address, as the page would (the
    ``new URL(src, page)`` below), and loaded by the browser from one page: loading every page
    with its scripts to look at its images took a minute of CPU beside the blocks."""
    b = clean
    with_images = {p: _refs(b.root, p).images for p in _built_pages(b.root)}
    with_images = {p: srcs for p, srcs in with_images.items() if srcs}
    assert any(p.startswith("zh/") for p in with_images) and with_images, with_images
    b.goto("404.html")
    broken = b.page.evaluate("""async pages => {
        const broken = [];
        for (const [page, srcs] of Object.entries(pages)) {
            for (const src of srcs) {
                const url = new URL(src, location.origin + "/" + page).href;
                const img = new Image();
                img.src = url;
                try { await img.decode(); } catch (e) {}
                if (!(img.naturalWidth > 0)) broken.push(`/${page}: ${url}`);
            }
        }
        return broken;
    }""", {p: [html.unescape(s) for s in srcs] for p, srcs in with_images.items()})
    n = sum(len(srcs) for srcs in with_images.values())
    assert n > 20, f"only {n} images found: is the parser still right?"
    assert not broken, "images that did not load:\n" + "\n".join(broken)
