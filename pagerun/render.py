"""Render ``<!-- output: KEY -->`` as content tabs with the recorded outputs (the MkDocs hook
``hooks/outputs.py`` is this module's ``on_page_markdown``).

One tab per device class that has a recording (``outputs/cpu/KEY.txt``, ``outputs/gpu/KEY.txt``,
and ``outputs/cpu-cuda-build/KEY.txt`` for an output that differs between builds of torch),
each with a stamp generated from the recording's own header: torch version, device, date. A
class with no recording says so instead of showing anything. Where an output has one tab per
build of torch, each tab's label also names the torch version of its recording. Under the page title, a page-level
stamp sums up the same headers for every recording the page shows ("verified on"). Nothing here is
typed by hand. A recording whose program changed since it was recorded (``recordings.stale``) is
still shown, labelled "recorded from an earlier version of this program".
"""

from __future__ import annotations

from pathlib import Path

from pagerun import pages, recordings

TEXT = {
    "en": {
        "cpu": "CPU",
        "cpu-cuda-build": "CPU, CUDA build of torch",
        "cpu_builds": "CPU, CPU-only build of torch",
        "gpu": "GPU",
        "gpu_label": "GPU ({gpu}, torch {torch})",
        "gpu_cpu_label": "GPU machine, CPU run ({gpu}, torch {torch})",
        "ran_cpu": "it ran on that machine's CPU: none of its processes held GPU memory",
        "missing_gpu": "No GPU run has been recorded for this example yet.",
        "missing_cpu": "This example needs a GPU; there is no CPU output.",
        "recorded": "Recorded {date} with torch {torch} on {device}",
        "exit": "exit status {exit}",
        "volatile": "Timings and addresses vary from run to run; the tests mask them.",
        "files": "Output file",
        "command": "Command",
        "verified": "Outputs on this page verified on",
        "verified_line": "**{cls}**: {devices}, torch {torch}, {dates} ({n} of {total} outputs)",
        "verified_none": "**{cls}**: no run recorded yet ({total} outputs)",
        "verified_gpu_note": "The GPU column is filled in only by running the suite on a GPU.",
        "verified_test": "This page's tests: `pytest --codeblocks {path}` (runs every command above and compares its output).",
        "stale": "Recorded from an earlier version of this program ({why}); it will be recorded again on the next {cls} run.",
        "stale_line": "{n} of them from an earlier version of their program",
        "cpu_line": "{n} of them ran on the GPU machine's CPU",
    },
    "zh": {
        "cpu": "CPU",
        "cpu-cuda-build": "CPU，CUDA 版 PyTorch",
        "cpu_builds": "CPU，CPU 版 PyTorch",
        "gpu": "GPU",
        "gpu_label": "GPU（{gpu}，torch {torch}）",
        "gpu_cpu_label": "GPU 机器上的 CPU 运行（{gpu}，torch {torch}）",
        "ran_cpu": "实际跑在这台机器的 CPU 上：它的进程都没有占用 GPU 显存",
        "missing_gpu": "这个示例还没有在 GPU 上录制过输出。",
        "missing_cpu": "这个示例需要 GPU，没有 CPU 输出。",
        "recorded": "{date} 录制 · torch {torch} · {device}",
        "exit": "退出状态 {exit}",
        "volatile": "耗时和内存地址每次运行都会不同，测试比较时会屏蔽它们。",
        "files": "输出文件",
        "command": "命令",
        "verified": "本页输出的验证环境",
        "verified_line": "**{cls}**：{devices}，torch {torch}，{dates}（{total} 段输出中的 {n} 段）",
        "verified_none": "**{cls}**：尚未录制（共 {total} 段输出）",
        "verified_gpu_note": "GPU 一栏只有在 GPU 上运行测试后才会填上。",
        "verified_test": "本页的测试：`pytest --codeblocks {path}`（运行本页的每条命令并核对输出）。",
        "stale": "这段输出录制自这个程序的旧版本（{why}），下次在 {cls} 上运行测试时会重新录制。",
        "stale_line": "其中 {n} 段录制自程序的旧版本",
        "cpu_line": "其中 {n} 段跑在 GPU 机器的 CPU 上",
        "why": {"program changed since: ": "此后改动过的程序：",
                "recorded from another command: ": "录制时的命令是 ",
                "recorded without program fingerprints": "录制时没有记下程序指纹"},
    },
}


def _indent(text: str, n: int = 4) -> str:
    pad = " " * n
    return "".join(pad + line if line.strip() else line for line in text.splitlines(True))


def _stale(rec, block) -> str | None:
    if rec is None or block is None:
        return None
    return recordings.stale(rec, " ".join(block.code.split()), block.snippets)


def ran_on_cpu(rec) -> bool:
    """A GPU machine's recording whose processes held no GPU memory (header ``ran on: CPU``)."""
    return rec.meta.get("ran on") == "CPU"


def short_torch(version: str) -> str:
    """``2.11.0+cu130`` -> ``2.11``: the release a tab's label names."""
    return ".".join(version.split("+")[0].split(".")[:2])


def render(key: str, needs_gpu: bool, lang: str, block=None) -> str:
    t = TEXT.get(lang, TEXT["en"])
    tabs = []
    for cls in recordings.CLASSES:
        rec = recordings.load(cls, key)
        if rec is None and cls == "cpu-cuda-build":
            continue  # only outputs that differ between builds have this tab
        if rec is None:
            if cls == "gpu":
                label = t["gpu"]
                body = f'!!! note ""\n    {t["missing_gpu"]}\n'
            elif needs_gpu:
                label = t["cpu"]
                body = f'!!! note ""\n    {t["missing_cpu"]}\n'
            else:
                continue
        else:
            if cls == "gpu":
                # where it ran and with which torch, from the header (``ran on``: pagerun.runner)
                label = t["gpu_cpu_label" if ran_on_cpu(rec) else "gpu_label"].format(
                    gpu=recordings.short_gpu_name(rec.meta.get("device", "")),
                    torch=short_torch(rec.meta.get("torch", "?")))
            elif cls == "cpu" and recordings.load("cpu-cuda-build", key):
                label = t["cpu_builds"]  # beside the CUDA build's tab
            else:
                label = t[cls]
            if cls == "cpu-cuda-build" or label == t["cpu_builds"]:
                # two builds side by side: the label names each one's version, from the header
                label += " " + rec.meta.get("torch", "?")
            fence = "````" if "```" in rec.body else "```"
            stamp = t["recorded"].format(
                date=rec.meta.get("date", "?"),
                torch=rec.meta.get("torch", "?"),
                device=rec.meta.get("device", "?"),
            )
            if cls == "gpu" and ran_on_cpu(rec):
                stamp += " · " + t["ran_cpu"]
            if rec.exit:
                stamp += " · " + t["exit"].format(exit=rec.exit)
            if recordings.is_volatile(rec.body):
                stamp += " · " + t["volatile"]
            rel = rec.path.relative_to(recordings.ROOT).as_posix()
            why = _stale(rec, block)
            for en, local in t.get("why", {}).items():
                why = why.replace(en, local) if why else why
            warn = (f'!!! warning ""\n    {t["stale"].format(why=why, cls=t[cls])}\n\n'
                    if why else "")
            body = warn + (
                f"{fence}text\n{rec.body.rstrip()}\n{fence}\n\n"
                f'<p class="recorded-stamp"><small>{stamp} · {t["files"]}: <code>{rel}</code></small></p>\n'
            )
        tabs.append(f'=== "{label}"\n\n{_indent(body)}\n')
    return "\n".join(tabs)


def verified_on(directives: list[tuple[str, bool]], lang: str, page_path: str | None = None,
                by_key: dict | None = None) -> str:
    """The page-level stamp: what the recordings this page shows were recorded on.

    Built from the ``#:`` headers of the very recordings the page renders (torch version, device,
    date), one line per device class, so it cannot drift from what the page shows.
    """
    t = TEXT.get(lang, TEXT["en"])
    lines, gpu_missing = [], False
    for cls in recordings.CLASSES:
        recs = [r for r in (recordings.load(cls, key) for key, _ in directives) if r is not None]
        label = t[cls]
        if not recs and cls == "cpu-cuda-build":
            continue  # only outputs that differ between builds have this tab
        if not recs:
            lines.append("- " + t["verified_none"].format(cls=label, total=len(directives)))
            gpu_missing |= cls == "gpu"
            continue
        meta = lambda name: sorted({r.meta.get(name, "?") for r in recs})  # noqa: E731
        dates = meta("date")
        lines.append("- " + t["verified_line"].format(
            cls=label, devices="; ".join(meta("device")), torch=", ".join(meta("torch")),
            dates=dates[0] if len(dates) == 1 else f"{dates[0]} – {dates[-1]}",
            n=len(recs), total=len(directives)))
        old = sum(1 for r in recs if _stale(r, (by_key or {}).get(r.key)))
        if old:
            lines[-1] += "; " + t["stale_line"].format(n=old)
        on_cpu = sum(1 for r in recs if cls == "gpu" and ran_on_cpu(r))
        if on_cpu:
            lines[-1] += "; " + t["cpu_line"].format(n=on_cpu)
    if gpu_missing:
        lines += ["", t["verified_gpu_note"]]
    if page_path:
        lines += ["", t["verified_test"].format(path=page_path)]
    body = "\n".join(lines)
    return f'!!! info "{t["verified"]}"\n\n{_indent(body)}\n'


def on_page_markdown(markdown: str, page, config, files) -> str:
    lang = getattr(page.file, "locale", None) or "en"
    src = getattr(page.file, "abs_src_path", None)
    by_key = {b.key: b for b in pages.blocks(Path(src))} if src and "<!-- output:" in markdown \
        else {}
    out = []
    in_fence = None
    marks, block_marks = [], []  # <!--pytest.mark.needs_cuda--> lines before the last code block
    directives = []  # (key, needs_gpu) of every recording the page shows, for the page stamp
    title_at = None  # where the page's title ends, to put the stamp under it
    for line in markdown.split("\n"):
        if in_fence is None and title_at is None and line.startswith("# "):
            title_at = len(out) + 1
        stripped = line.strip()
        if in_fence is None and stripped.startswith("<!--pytest.mark."):
            marks.append(stripped)
        if in_fence is None and stripped.startswith("```"):
            in_fence = stripped[: len(stripped) - len(stripped.lstrip("`"))]
            block_marks, marks = marks, []
        elif in_fence is not None and stripped.startswith(in_fence) and stripped.strip("`") == "":
            in_fence = None
        parsed = recordings.parse_directive(line) if in_fence is None else None
        if parsed:
            key, _opts = parsed
            needs_gpu = any("needs_cuda" in m or "needs_2_gpus" in m for m in block_marks)
            directives.append((key, needs_gpu))
            # inside an admonition (`??? note`), the tabs keep the directive's indent
            out.append(_indent(render(key, needs_gpu, lang, by_key.get(key)),
                               len(line) - len(line.lstrip())))
        else:
            out.append(line)
    if directives:
        try:
            page_path = Path(page.file.abs_src_path).resolve().relative_to(recordings.ROOT).as_posix()
        except (TypeError, ValueError):
            page_path = None
        out.insert(title_at or 0, "\n" + verified_on(directives, lang, page_path, by_key))
    return "\n".join(out)
