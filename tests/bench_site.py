"""Benchmark, not a test: what a reader's browser transfers for a chapter page, and the build.

    make bench-site        (or: python tests/bench_site.py)

Builds the site (--strict, timed), serves it on 127.0.0.1, opens a chapter page in each language in
Chromium (as tests/test_browser.py does), runs one search, and prints: the bytes transferred for the
page with all its assets (headers + bodies, uncompressed, as served here) at load and after one
search (Material fetches the search worker and index at load), the number of requests, how many left 127.0.0.1, and the size of each search index.
Targets: <= 600 KB per chapter page, 0 external requests, build <= 10 s.
"""

from __future__ import annotations

import gzip
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sitebuild  # noqa: E402
import test_browser  # noqa: E402

CHAPTER = test_browser.CHAPTER


def main() -> int:
    reason = test_browser._missing_browser()
    if reason:
        sys.exit(reason)
    root, build_s = sitebuild.built()
    base, server = sitebuild.serve(root)
    print(f"strict build:   {build_s:6.1f} s   (target <= 10 s)")
    worst, outside = 0, []
    for lang, query in (("en", "CUDA_VISIBLE_DEVICES"), ("zh", "显存")):
        # a fresh profile per language: nothing comes from the cache
        b = test_browser.Browser(base, Path(tempfile.mkdtemp(prefix="bench-profile-")))
        sized = []
        b.page.on("requestfinished", lambda r, sized=sized: sized.append(r.sizes()))
        n0 = 0
        b.goto(("" if lang == "en" else "zh/") + CHAPTER)
        b.page.wait_for_load_state("networkidle")
        load_kb = sum(s["responseBodySize"] + s["responseHeadersSize"] for s in sized) / 1024
        load_n = len(b.requests) - n0
        test_browser._search(b, lang, query)
        b.page.wait_for_load_state("networkidle")
        all_kb = sum(s["responseBodySize"] + s["responseHeadersSize"] for s in sized) / 1024
        worst = max(worst, all_kb)
        print(f"{lang} /{'' if lang == 'en' else 'zh/'}{CHAPTER}: {load_kb:6.0f} KB in {load_n} requests at load; "
              f"{all_kb:6.0f} KB in {len(b.requests) - n0} requests after one search (target <= 600 KB)")
        outside += b.outside
        b.close()
    print(f"requests that left 127.0.0.1: {len(outside)}   (target 0)")
    for index in sorted(root.rglob("search_index.json")):
        data = index.read_bytes()
        print(f"search index /{index.relative_to(root)}: {len(data) / 1024:6.0f} KB "
              f"({len(gzip.compress(data)) / 1024:.0f} KB gzipped)")
    server.shutdown()
    return 0 if worst <= 600 and not outside else 1


if __name__ == "__main__":
    sys.exit(main())
