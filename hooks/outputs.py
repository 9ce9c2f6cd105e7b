"""MkDocs hook: render ``<!-- output: KEY -->`` as content tabs with the recorded outputs.

One tab per device class that has a recording (``outputs/cpu/KEY.txt``, ``outputs/gpu/KEY.txt``),
each with a stamp generated from the recording's own header: torch version, device, date. A
class with no recording says so instead of showing anything. Nothing here is typed by hand.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import recordings  # noqa: E402

TEXT = {
    "en": {
        "cpu": "CPU",
        "gpu": "GPU",
        "missing_gpu": "No GPU run has been recorded for this example yet.",
        "missing_cpu": "This example needs a GPU; there is no CPU output.",
        "recorded": "Recorded {date} with torch {torch} on {device}",
        "exit": "exit status {exit}",
        "volatile": "Timings and addresses vary from run to run; the tests mask them.",
        "files": "Output file",
        "command": "Command",
    },
    "zh": {
        "cpu": "CPU",
        "gpu": "GPU",
        "missing_gpu": "这个示例还没有在 GPU 上录制过输出。",
        "missing_cpu": "这个示例需要 GPU，没有 CPU 输出。",
        "recorded": "{date} 录制 · torch {torch} · {device}",
        "exit": "退出状态 {exit}",
        "volatile": "耗时和内存地址每次运行都会不同，测试比较时会屏蔽它们。",
        "files": "输出文件",
        "command": "命令",
    },
}


def _indent(text: str, n: int = 4) -> str:
    pad = " " * n
    return "".join(pad + line if line.strip() else line for line in text.splitlines(True))


def render(key: str, needs_gpu: bool, lang: str) -> str:
    t = TEXT.get(lang, TEXT["en"])
    tabs = []
    for cls in recordings.CLASSES:
        rec = recordings.load(cls, key)
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
            label = t["cpu"] if cls == "cpu" else f'{t["gpu"]} ({recordings.short_gpu_name(rec.meta.get("device", ""))})'
            fence = "````" if "```" in rec.body else "```"
            stamp = t["recorded"].format(
                date=rec.meta.get("date", "?"),
                torch=rec.meta.get("torch", "?"),
                device=rec.meta.get("device", "?"),
            )
            if rec.exit:
                stamp += " · " + t["exit"].format(exit=rec.exit)
            if recordings.is_volatile(rec.body):
                stamp += " · " + t["volatile"]
            rel = rec.path.relative_to(recordings.ROOT).as_posix()
            body = (
                f"{fence}text\n{rec.body.rstrip()}\n{fence}\n\n"
                f'<p class="recorded-stamp"><small>{stamp} · {t["files"]}: <code>{rel}</code></small></p>\n'
            )
        tabs.append(f'=== "{label}"\n\n{_indent(body)}\n')
    return "\n".join(tabs)


def on_page_markdown(markdown: str, page, config, files) -> str:
    lang = getattr(page.file, "locale", None) or "en"
    out = []
    in_fence = None
    marks, block_marks = [], []  # <!--pytest.mark.needs_cuda--> lines before the last code block
    for line in markdown.split("\n"):
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
            out.append(render(key, needs_gpu, lang))
        else:
            out.append(line)
    return "\n".join(out)
