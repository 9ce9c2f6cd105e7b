"""Pictures drawn from recorded outputs (``hooks/pictures.py`` publishes them with the site).

Every picture is a function of one or more recordings under ``outputs/`` and nothing else: a
small parser per recording format reads the lines the program printed, and matplotlib draws them
as SVG (text kept as text, ``svg.fonttype = 'none'``, so the browser draws the Chinese labels with
its own fonts). The same recording always gives the same bytes (``svg.hashsalt``, no date), so a
picture changes exactly when its recording does; ``tests/test_pictures.py`` checks it.

Each picture is published in both languages and in two colour schemes,
``<lang>/pictures/<name>.svg`` (light) and ``<name>-dark.svg`` (the light one with its text and
line colour swapped; the fills work on both backgrounds), which the pages show with Material's
``#only-light`` / ``#only-dark``. A GPU picture is drawn only from a recording under
``outputs/gpu/``: where none exists it is not published, and no page links to it.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from pagerun.recordings import OUTPUTS, ROOT

FG = "#202124"       # text and lines in the light picture ...
FG_DARK = "#dfe1e5"  # ... and in the dark one (the only colour that differs)
MUTED = "#8a9099"    # idle outlines, grid: readable on white and on Material's slate
# Okabe-Ito colours: told apart with colour-blindness, and legible on both schemes
COLOURS = {"F": "#56B4E9", "B": "#E69F00", "I": "#CC79A7", "W": "#009E73"}
SERIES = ["#56B4E9", "#E69F00", "#009E73", "#CC79A7", "#F0E442", "#D55E00"]
LABEL_BOX = {"boxstyle": "square,pad=0.15", "facecolor": "#ffffff", "edgecolor": "none",
             "alpha": 0.85}  # a number over a hatch: black on white, in both schemes
HATCHES = ["", "//", "\\\\", "xx", "--", "||"]

WORDS = {
    "en": {
        "rank": "rank {}", "slot": "time, in slots (1 slot: a forward through 1/{} of the layers)",
        "F": "F forward", "B": "B backward (input and weight gradients)",
        "I": "I input gradient", "W": "W weight gradient",
        "f": "{}: the rank's second stage", "idle": "idle",
        "bytes": "bytes per rank", "before": "before", "after": "after",
        "sum": "a sum of all ranks", "from": "from rank {}",
        "params": "parameters", "grads": "gradients", "adam": "Adam moments",
        "acts": "activations held at peak", "ranks": "{} ranks",
        "freed": "the peak had each I freed all its stage's outputs",
        "allocated": "allocated", "reserved": "reserved",
        "mib": "MiB after each line (allocated / reserved)",
        "later": "A GPU run of this program draws its picture here.",
        "kept": "kept for backward, bytes per rank", "total": "{:,} B",
        "one process": "one process",
        "norm's input, mean, 1/std": "the norm's input, mean and 1/std",
        "input of q, k, v": "the input of q, k, v",
        "q, k, v by head, softmax": "q, k, v by head and the softmax",
        "input of o": "the input of o",
        "rest": "held at\nrest:\n{:,} B", "ag fwd": "forward:\n{} all-gathers,\n{:,} B in",
        "held": "held after\nforward:\n{:,} B", "ag bwd": "backward:\n{} all-gathers,\n{:,} B in",
        "rs": "reduce-scatter:\n{} calls,\n{:,} B out", "grad": "gradient\nshard:\n{:,} B",
        "per rank": "bytes per rank; in: from other ranks, out: for other ranks",
        "batch": "the batch\n{}", "replica": "replica on {}\nin {}\nout {}",
        "output": "the output\n{}\non {}", "scatter": "scatter", "gather": "gather",
        "compute": "rank {}, main thread", "comm": "{} threads",
        "data": "data", "forward": "forward", "backward": "backward, until the last gradient",
        "wait": "backward, after it: waiting",
        "by hand": "all-reduce by hand: waiting", "optimizer": "optimizer",
        "all_reduce": "{}:all_reduce, in the order they began",
        "step ms": "ms from the start of step 4 (each rank its own; a CPU run)",
    },
    "zh": {
        "rank": "rank {}", "slot": "时间，以时隙计（1 个时隙：一次前向经过全部层的 1/{}）",
        "F": "F 前向", "B": "B 反向（输入梯度与权重梯度）",
        "I": "I 输入梯度", "W": "W 权重梯度",
        "f": "{}：该 rank 的第二个阶段", "idle": "空闲",
        "bytes": "每个 rank 的字节数", "before": "之前", "after": "之后",
        "sum": "所有 rank 之和", "from": "来自 rank {}",
        "params": "参数", "grads": "梯度", "adam": "Adam 的两个矩",
        "acts": "峰值时持有的激活值", "ranks": "{} 个 rank",
        "freed": "假如每个 I 释放该阶段全部输出时的峰值",
        "allocated": "已分配", "reserved": "已保留", "mib": "每行之后的 MiB（已分配 / 已保留）",
        "later": "在 GPU 上运行这个程序后，这里会画出它的图。",
        "kept": "为反向保留，每个 rank 的字节数", "total": "{:,} B",
        "one process": "单进程",
        "norm's input, mean, 1/std": "LayerNorm 的输入、均值和 1/std",
        "input of q, k, v": "q、k、v 的输入",
        "q, k, v by head, softmax": "按头划分的 q、k、v 与 softmax",
        "input of o": "o 的输入",
        "rest": "平时持有：\n{:,} B", "ag fwd": "前向：{} 次\nall-gather\n收 {:,} B",
        "held": "前向之后\n持有\n{:,} B", "ag bwd": "反向：{} 次\nall-gather\n收 {:,} B",
        "rs": "reduce-\nscatter：{} 次\n发 {:,} B", "grad": "梯度分片：\n{:,} B",
        "per rank": "每个 rank 的字节数；收：来自其他 rank，发：给其他 rank",
        "batch": "批次\n{}", "replica": "{} 上的副本\n输入 {}\n输出 {}",
        "output": "输出\n{}\n在 {} 上", "scatter": "scatter（分发）", "gather": "gather（汇集）",
        "compute": "rank {}，主线程", "comm": "{} 线程",
        "data": "数据", "forward": "前向", "backward": "反向，直到最后一个梯度",
        "wait": "反向余下部分：等待",
        "by hand": "手动 all-reduce：等待", "optimizer": "优化器",
        "all_reduce": "{}:all_reduce，按开始先后编号",
        "step ms": "从第 4 步开始算起的毫秒数（各 rank 各自计时；CPU 上的运行）",
    },
}


# ------------------------------------------------------------------ parsers, one per format
def body(path: Path) -> list[str]:
    """The printed lines of a recording, without its ``#:`` header."""
    return [line for line in path.read_text(encoding="utf-8").splitlines()
            if not line.startswith("#: ")]


_ROW = re.compile(r"^\s+(?P<name>\S.*?)?\s*rank (?P<rank>\d+) (?P<row>[A-Za-z.]+)$")


def timelines(lines: list[str]) -> dict[str, list[str]]:
    """Per schedule, one row per rank: a letter per slot (``FFFF..BB``), as
    ``zero_bubble.py`` (name on the line before) and ``pipeline_interleaved.py`` (name on the
    row of rank 0) print them."""
    out: dict[str, list[str]] = {}
    name = None
    for line in lines:
        head = re.match(r"^(?P<name>[^ ].*?), (?:idle slots|bubble|grads)", line)
        if head:
            name = head["name"]
        m = _ROW.match(line)
        if m:
            if m["name"] and m["rank"] == "0":
                name = m["name"]
            out.setdefault(name, []).append(m["row"])
    return out


_COST = re.compile(r"^(?P<label>.+?): predicted (?P<p>[\d,]+) B, counted (?P<c>[\d,]+) B$")


def counted_bytes(lines: list[str]) -> tuple[int, dict[str, dict[int, int]]]:
    """The world size and, per label, the counted bytes of each rank: ``X, rank N: ...``
    for one rank, ``X per rank ...: ...`` for all of them (the cost-line form of
    CONTRIBUTING, "Counting what a run costs")."""
    world = int(re.match(r"^(\d+) process", lines[0])[1])
    out: dict[str, dict[int, int]] = {}
    for line in lines:
        m = _COST.match(line)
        if not m:
            continue
        label, n = m["label"], int(m["c"].replace(",", ""))
        one = re.match(r"^(?P<label>.+), rank (?P<rank>\d+)$", label)
        if one:
            out.setdefault(one["label"], {})[int(one["rank"])] = n
        elif "per rank" in label:
            out[label] = dict.fromkeys(range(world), n)
    return world, out


_HOLDS = re.compile(r"^  rank (?P<rank>\d+): \[(?P<before>[^\]]*)\] -> \[(?P<after>[^\]]*)\]$")


def before_after(lines: list[str]) -> list[tuple[str, list[tuple[list[int], list[int]]]]]:
    """Per collective (its title line), what each rank held before and after."""
    out: list = []
    for line in lines:
        m = _HOLDS.match(line)
        if m:
            out[-1][1].append(tuple([int(v) for v in m[k].split(",")]
                                    for k in ("before", "after")))
        elif re.match(r"^\w.*: ", line) and not line[0].isdigit():
            out.append((line.split(":")[0], []))
    return [(title, rows) for title, rows in out if rows]


_PART = re.compile(r"^(?P<case>.+?), (?P<part>.+?): predicted [\d,]+ B, counted (?P<c>[\d,]+) B$")
_TOTAL = re.compile(r"^(?P<case>.+?), in all: predicted [\d,]+ B, counted (?P<c>[\d,]+) B$")


def parts(lines: list[str]) -> list[tuple[str, dict[str, int], int]]:
    """Per case, in order: the counted bytes of each part (``CASE, PART: predicted N B,
    counted N B``) and the case's total per rank (``CASE, in all: ...``), as
    ``tensor_memory.py`` prints them."""
    out: dict[str, tuple[dict[str, int], list[int]]] = {}
    for line in lines:
        m, t = _PART.match(line), _TOTAL.match(line)
        if t:  # a total matches _PART too
            out.setdefault(t["case"], ({}, []))[1].append(int(t["c"].replace(",", "")))
        elif m:
            out.setdefault(m["case"], ({}, []))[0][m["part"]] = int(m["c"].replace(",", ""))
    return [(case, p, total[0]) for case, (p, total) in out.items()]


_COUNTED = re.compile(r"^(?P<label>.+): predicted [\d,]+ (?P<unit>\w+), counted (?P<c>[\d,]+) "
                      r"(?P=unit)$")


def counted(lines: list[str]) -> dict[str, int]:
    """Every cost line's counted figure, by its label (bytes or calls)."""
    return {m["label"]: int(m["c"].replace(",", "")) for m in map(_COUNTED.match, lines) if m}


_IN_MODEL = re.compile(r"^  In Model on (?P<dev>\S+): input (?P<i>\[[^\]]*\]), "
                       r"output (?P<o>\[[^\]]*\])$")
_OUTSIDE = re.compile(r"^Outside: input (?P<i>\[[^\]]*\]), output (?P<o>\[[^\]]*\]) "
                      r"on (?P<dev>\S+)$")


def dp_call(lines: list[str]):
    """The first call of a DataParallel model in ``dp/classic.py``'s output: each replica's
    (device, input shape, output shape), by device, and the call's (input, output, device)."""
    replicas = []
    for line in lines:
        m, out = _IN_MODEL.match(line), _OUTSIDE.match(line)
        if m:
            replicas.append((m["dev"], m["i"], m["o"]))
        elif out:
            return lines[0], sorted(replicas), (out["i"], out["o"], out["dev"])
    raise ValueError("no DataParallel call in the recording")


_SPAN = re.compile(r"(-?[\d.]+) ms \.\.\s*(-?[\d.]+) ms")


def step_timelines(lines: list[str]) -> list[tuple[str, list[tuple[str, list[tuple]]]]]:
    """Per case (``NAME, step 4, start .. end in ms from its start:``), its rows in order:
    (name, [(start, end) of rank 0, of rank 1, ...]), as ``profile_step.py`` prints them."""
    out: list = []
    for line in lines:
        head = re.match(r"^(?P<case>[\w-]+), step \d+, start \.\. end in ms", line)
        spans = _SPAN.findall(line)
        if head:
            out.append((head["case"], []))
        elif spans and out and line.startswith("  "):
            name = line[:line.index(spans[0][0])].strip()
            out[-1][1].append((name, [(float(a), float(b)) for a, b in spans]))
    return out


_MEMORY = re.compile(r"^(?P<label>\S.*?)\s+allocated\s+(?P<a>\d+) MiB\s+reserved\s+(?P<r>\d+) MiB$")


def memory_series(lines: list[str]) -> list[tuple[str, int, int]]:
    """(label, allocated MiB, reserved MiB) of each ``LABEL allocated N MiB reserved N MiB``."""
    return [(m["label"], int(m["a"]), int(m["r"])) for m in map(_MEMORY.match, lines) if m]


def device(path: Path) -> str:
    """The ``#: device:`` of a recording's header."""
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#: device: "):
            return line[len("#: device: "):]
    return "?"


# ------------------------------------------------------------------ drawing
def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import font_manager

    have = {f.name for f in font_manager.fontManager.ttflist}
    # text stays text: these names only measure it here; the browser draws it with its fonts
    cjk = [n for n in ("WenQuanYi Micro Hei", "Noto Sans CJK SC", "Noto Sans SC") if n in have]
    matplotlib.rcParams.update({
        "svg.fonttype": "none", "svg.hashsalt": "pictures", "font.size": 10,
        "font.family": ["DejaVu Sans", *cjk, "sans-serif"],
        "text.color": FG, "axes.edgecolor": FG, "axes.labelcolor": FG,
        "xtick.color": FG, "ytick.color": FG, "hatch.color": FG,
        "figure.facecolor": "none", "axes.facecolor": "none", "savefig.transparent": True,
        "legend.frameon": False, "axes.spines.top": False, "axes.spines.right": False,
    })
    return plt


def _svg(fig) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None}, bbox_inches="tight")
    fig.clear()
    _plt().close(fig)
    return buf.getvalue()


def dark(svg: str) -> str:
    """The same picture for the dark scheme: text and lines light, fills as they are."""
    return svg.replace(FG, FG_DARK)


def _blocks(row: str, wide: bool):
    """The actions of one row: (letter, first slot, length). A run of one letter is split
    into actions by their cost in the replay: F, I, W one slot (two for the wider stages of
    GPipe and 1F1B), B twice that."""
    for m in re.finditer(r"([A-Za-z])\1*", row):
        letter, n = m[1], len(m[0])
        size = (2 if wide else 1) * (2 if letter in "Bb" else 1)
        step = size if n % size == 0 else n
        for k in range(0, n, step):
            yield letter, m.start() + k, step


def draw_timelines(data: dict[str, list[str]], lang: str) -> str:
    w = WORDS[lang]
    plt = _plt()
    rows = sum(len(r) for r in data.values()) + len(data) - 1
    width = max(len(r) for rs in data.values() for r in rs)
    # about the page's column (~7 in at 96 px/in), so that its text is read at its size
    fig, ax = plt.subplots(figsize=(6.2, 0.3 * rows + 1.1))
    y, ticks, labels, used = 0, [], [], set()
    for name, ranks in data.items():
        wide = name in ("GPipe", "1F1B")
        for r, row in enumerate(ranks):
            for letter, start, n in _blocks(row, wide):
                up = letter.upper()
                used.add(up)
                second = letter.islower()
                used.update({"f", letter}) if second else None  # "f": any second stage
                ax.add_patch(plt.Rectangle((start, -y - 0.4), n, 0.8, facecolor=COLOURS[up],
                                           edgecolor=FG, linewidth=0.6, hatchcolor="#ffffff",
                                           hatch="//" if second else None))
                ax.text(start + n / 2, -y, letter, ha="center", va="center", color="#000000",
                        fontsize=7)
            for m in re.finditer(r"\.+", row):  # idle: a dashed outline
                ax.add_patch(plt.Rectangle((m.start(), -y - 0.4), len(m[0]), 0.8,
                                           fill=False, edgecolor=MUTED, linewidth=0.6,
                                           linestyle=(0, (2, 2))))
            ticks.append(-y)
            labels.append(f"{name}   {w['rank'].format(r)}" if r == 0 else w["rank"].format(r))
            y += 1
        y += 1
    ax.set_xlim(0, width)
    ax.set_ylim(-y + 0.4, 0.6)
    ax.set_yticks(ticks, labels)
    ax.tick_params(axis="y", length=0)
    ax.spines["left"].set_visible(False)
    ax.set_xlabel(w["slot"].format(2 * max(len(r) for r in data.values())))
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor=COLOURS[k], edgecolor=FG, linewidth=0.6,
                             label=w[k]) for k in "FBIW" if k in used]
    if "f" in used:
        handles.append(plt.Rectangle((0, 0), 1, 1, facecolor=MUTED, edgecolor=FG, hatch="//",
                                     hatchcolor="#ffffff", linewidth=0.6,
                                     label=w["f"].format(", ".join(k for k in "fbiw" if k in used))))
    handles.append(plt.Rectangle((0, 0), 1, 1, fill=False, edgecolor=MUTED,
                                 linestyle=(0, (2, 2)), label=w["idle"]))
    ax.legend(handles=handles, loc="lower left", bbox_to_anchor=(0, 1.0), ncol=3, fontsize=9)
    return _svg(fig)


def draw_bars(groups: list[tuple[str, dict[str, dict[int, int]]]], lang: str,
              series: dict[str, str], marks: dict[tuple[str, int], int] | None = None) -> str:
    """Stacked bars, one per rank, one group per run: ``groups`` is [(title, {label: {rank:
    bytes}})], ``series`` the labels to stack and their names (keys of WORDS); ``marks``, a
    dashed line across the bar of (title, rank) at another value where it is lower."""
    w = WORDS[lang]
    plt = _plt()
    n = sum(max(len(v) for v in d.values()) for _, d in groups) + len(groups) - 1
    fig, ax = plt.subplots(figsize=(min(6.4, max(3.6, 0.6 * n + 1.4)), 3.2))
    x, ticks, labels, top, marked, crowded = 0, [], [], 0, False, n > 10
    for title, data in groups:
        ranks = sorted({r for v in data.values() for r in v})
        first = x
        for r in ranks:
            bottom = 0
            for k, (label, word) in enumerate(series.items()):
                if label not in data:
                    continue
                value = data[label].get(r, 0)
                ax.bar(x, value, 0.7, bottom=bottom, color=SERIES[k], hatch=HATCHES[k],
                       edgecolor=FG, linewidth=0.6, label=w[word] if x == 0 else None)
                if value:  # upright where the bars are many, so that it fits in one
                    ax.text(x, bottom + value / 2, f"{value:,}", ha="center", va="center",
                            color="#000000", fontsize=7, bbox=LABEL_BOX,
                            rotation=90 if crowded else 0)
                bottom += value
            mark = (marks or {}).get((title, r))
            if mark is not None and mark < bottom:
                ax.hlines(mark, x - 0.45, x + 0.45, colors=FG, linestyles=(0, (3, 2)),
                          linewidth=1.2, label=None if marked else w["freed"])
                ax.text(x + 0.45, mark, f" {mark:,}", va="center", ha="left", fontsize=7)
                marked = True
            top = max(top, bottom)
            ticks.append(x)
            labels.append(str(r) if crowded else w["rank"].format(r))
            x += 1
        if len(groups) > 1:
            ax.text((first + x - 1) / 2, -0.16, textwrap.fill(title, 14) if crowded else title,
                    ha="center",
                    va="top", transform=ax.get_xaxis_transform(), fontsize=9)
        x += 1
    ax.set_xticks(ticks, labels, fontsize=9)
    if crowded:  # the ticks are rank numbers: say so once, left of them
        ax.text(-0.01, -0.02, w["rank"].format("").strip(), ha="right", va="top",
                fontsize=9, transform=ax.transAxes)
    ax.set_ylim(0, top * 1.05)
    ax.yaxis.set_major_formatter(lambda v, _: f"{v:,.0f}")
    if len(series) > 1 or marks:
        ax.set_ylabel(w["bytes"] if len(series) > 1 else
                      f"{w[next(iter(series.values()))]}, {w['bytes']}")
        ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=len(series), fontsize=9)
    else:  # one series: it names the axis
        ax.set_ylabel(f"{w[next(iter(series.values()))]}, {w['bytes']}")
    return _svg(fig)


def draw_collectives(data, lang: str) -> str:
    w = WORDS[lang]
    plt = _plt()
    cols = 2
    rows = (len(data) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(7.2, 1.7 * rows))
    cell = 1.0
    for ax, (title, ranks) in zip(axes.flat, data):
        summed = "sum" in title
        for r, (before, after) in enumerate(ranks):
            for side, values, x0 in (("before", before, 0), ("after", after, 5.5)):
                for i, v in enumerate(values):
                    colour = MUTED if (summed and side == "after") else SERIES[(v // 10) % 6]
                    ax.add_patch(plt.Rectangle((x0 + i * cell, -r - 0.4), cell * 0.92, 0.8,
                                               facecolor=colour, edgecolor=FG, linewidth=0.5))
                    ax.text(x0 + i * cell + 0.46, -r, str(v), ha="center", va="center",
                            fontsize=7, color="#000000")
            ax.text(-0.3, -r, w["rank"].format(r), ha="right", va="center", fontsize=8)
            ax.annotate("", xy=(5.2, -r), xytext=(4.2, -r),
                        arrowprops={"arrowstyle": "->", "color": FG, "lw": 0.8})
        ax.text(0, 0.75, w["before"], fontsize=8)
        ax.text(5.5, 0.75, w["after"], fontsize=8)
        ax.set_title(title, fontsize=9, loc="left", pad=14)
        ax.set_xlim(-2.2, 13.8)
        ax.set_ylim(-len(ranks) + 0.4, 1.1)
        ax.axis("off")
    for ax in list(axes.flat)[len(data):]:
        ax.axis("off")
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor=SERIES[r % 6], edgecolor=FG, lw=0.5,
                             label=w["from"].format(r)) for r in range(len(data[0][1]))]
    handles.append(plt.Rectangle((0, 0), 1, 1, facecolor=MUTED, edgecolor=FG, lw=0.5,
                                 label=w["sum"]))
    fig.legend(handles=handles, loc="upper center", ncol=len(handles), fontsize=8,
               bbox_to_anchor=(0.5, 0.1), handlelength=1.2, columnspacing=1.0)
    fig.subplots_adjust(hspace=0.5, wspace=0.12)
    return _svg(fig)


def draw_parts(data, lang: str) -> str:
    """One stacked bar per case: its parts (the recording's names, in the page's language
    where WORDS has them) and the counted total above it."""
    w = WORDS[lang]
    plt = _plt()
    names = list(dict.fromkeys(n for _, p, _ in data for n in p))
    fig, ax = plt.subplots(figsize=(5.6, 3.4))
    for x, (case, p, total) in enumerate(data):
        bottom = 0
        for k, name in enumerate(names):
            value = p.get(name, 0)
            ax.bar(x, value, 0.6, bottom=bottom, color=SERIES[k], hatch=HATCHES[k],
                   edgecolor=FG, linewidth=0.6, label=w.get(name, name) if x == 0 else None)
            if value:
                ax.text(x, bottom + value / 2, f"{value:,}", ha="center", va="center",
                        color="#000000", fontsize=7, bbox=LABEL_BOX)
            bottom += value
        ax.text(x, bottom, w["total"].format(total), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(data)), [w.get(case, case) for case, _, _ in data], fontsize=9)
    ax.set_xlim(-0.6, len(data) - 0.4)
    ax.set_ylim(0, max(t for _, _, t in data) * 1.1)
    ax.yaxis.set_major_formatter(lambda v, _: f"{v:,.0f}")
    ax.set_ylabel(w["kept"])
    ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=2, fontsize=8)
    return _svg(fig)


def draw_fsdp_step(c: dict[str, int], lang: str) -> str:
    """FSDP2's step per rank, one row per ``reshard_after_forward``: what each rank holds and
    what its collectives move, from ``fsdp_cost.py``'s counted lines."""
    w = WORDS[lang]
    plt = _plt()
    settings = [k.split(",")[0] for k in c if k.endswith(", forward all-gathers")]
    fig, ax = plt.subplots(figsize=(6.8, 1.4 * len(settings) + 0.5))
    rest, grad = c["parameters per rank (padded shards)"], c["gradients per rank (padded shards)"]
    for row, name in enumerate(settings):
        v = lambda label: c[f"{name}, {label}"]  # noqa: E731
        boxes = [("rest", (rest,), MUTED), ("ag fwd", (v("forward all-gathers"),
                  v("forward, bytes received")), COLOURS["F"]),
                 ("held", (v("params held after forward"),), MUTED),
                 ("ag bwd", (v("backward all-gathers"), v("backward, bytes received")),
                  COLOURS["F"]),
                 ("rs", (v("reduce-scatters"), v("reduce-scatter, bytes sent")),
                  COLOURS["B"]), ("grad", (grad,), MUTED)]
        y = -row * 1.4  # the recording's reshard=X is reshard_after_forward=X
        ax.text(-0.1, y + 0.55, name.replace("reshard=", "reshard_after_forward="),
                ha="left", va="bottom", fontsize=9)
        for i, (key, values, colour) in enumerate(boxes):
            ax.add_patch(plt.Rectangle((i * 1.3, y - 0.5), 1.05, 1.0, facecolor=colour,
                                       edgecolor=FG, linewidth=0.6,
                                       hatch="//" if colour == MUTED else None,
                                       hatchcolor="#ffffff"))
            ax.text(i * 1.3 + 0.525, y, w[key].format(*values), ha="center", va="center",
                    fontsize=7, color="#000000", bbox=LABEL_BOX, linespacing=1.2)
            if i:
                ax.annotate("", xy=(i * 1.3, y), xytext=(i * 1.3 - 0.25, y),
                            arrowprops={"arrowstyle": "->", "color": FG, "lw": 0.8})
    bottom = -(len(settings) - 1) * 1.4 - 0.6
    ax.set_xlim(-0.15, len(boxes) * 1.3 - 0.2)
    ax.set_ylim(bottom, 1.0)
    ax.axis("off")
    ax.text(0, bottom, w["per rank"], ha="left", va="top", fontsize=8)
    return _svg(fig)


def draw_dp_call(data, lang: str) -> str:
    """The batch scattered to the replicas and their outputs gathered, with the shapes and
    devices the recording printed."""
    w = WORDS[lang]
    plt = _plt()
    title, replicas, (x, y, dev) = data
    n = len(replicas)
    fig, ax = plt.subplots(figsize=(6.2, 0.75 * n + 1.0))
    mid = -(n - 1) / 2
    box = {"ha": "center", "va": "center", "fontsize": 8, "color": "#000000",
           "linespacing": 1.3}
    for cx, text in ((0, w["batch"].format(x)), (6, w["output"].format(y, dev))):
        ax.add_patch(plt.Rectangle((cx - 0.9, mid - 0.4), 1.8, 0.8, facecolor=MUTED,
                                   edgecolor=FG, linewidth=0.6))
        ax.text(cx, mid, text, **box)
    for k, (d, i, o) in enumerate(replicas):
        ax.add_patch(plt.Rectangle((2.1, -k - 0.4), 1.8, 0.8, facecolor=SERIES[k % 6],
                                   hatch=HATCHES[k % 6], hatchcolor="#ffffff", edgecolor=FG,
                                   linewidth=0.6))
        ax.text(3, -k, w["replica"].format(d, i, o), bbox=LABEL_BOX, **box)
        for x0, y0, x1, y1 in ((0.9, mid, 2.1, -k), (3.9, -k, 5.1, mid)):
            ax.annotate("", xy=(x1, y1), xytext=(x0, y0),
                        arrowprops={"arrowstyle": "->", "color": FG, "lw": 0.8})
    for cx, word in ((1.5, "scatter"), (4.5, "gather")):
        ax.text(cx, 0.55, w[word], ha="center", va="bottom", fontsize=8)
    ax.text(-0.9, -n + 0.35, title, ha="left", va="top", fontsize=8)
    ax.set_xlim(-1, 7)
    ax.set_ylim(-n, 0.9)
    ax.axis("off")
    return _svg(fig)


def _lanes(spans):
    """Overlapping spans in sub-rows: the first sub-row free at each span's start."""
    ends, out = [], []
    for start, end in spans:
        row = next((i for i, e in enumerate(ends) if e <= start), len(ends))
        ends[row:row + 1] = [end]
        out.append(row)
    return out, max(1, len(ends))


def draw_step_timelines(data, lang: str) -> str:
    """Per case and rank, two lanes: the main thread's ranges (the backward split at the end
    of the last gradient) and the all-reduces themselves, overlapping ones in sub-rows."""
    w = WORDS[lang]
    plt = _plt()
    ranks = len(data[0][1][0][1])
    lanes = len(data) * (ranks * 2 + 1)
    fig, ax = plt.subplots(figsize=(6.2, 0.3 * lanes + 1.3))
    style = {"data": (SERIES[4], ""), "forward": (COLOURS["F"], ""),
             "backward": (COLOURS["B"], ""), "wait": (MUTED, "//"),
             "by hand": (MUTED, "xx"), "optimizer": (COLOURS["W"], ""),
             "all_reduce": (COLOURS["I"], "")}
    used, y, ticks, labels, backend, right = [], 0, [], [], "", 0

    def bar(key, x0, x1, lane_y, h=0.8, text=None):
        used.append(key) if key not in used else None
        colour, hatch = style[key]
        ax.add_patch(plt.Rectangle((x0, lane_y - h / 2), x1 - x0, h, facecolor=colour,
                                   hatch=hatch or None, edgecolor=FG, linewidth=0.5))
        if text:
            ax.text((x0 + x1) / 2, lane_y, text, ha="center", va="center", fontsize=6,
                    color="#000000")

    for case, rows in data:
        ax.text(0, -y, case, ha="left", va="center", fontsize=9)
        y += 1
        spans = dict(rows)
        comm = [(n, s) for n, s in rows if re.search(r":all_reduce \d+$", n)]
        backend = comm[0][0].split(":")[0] if comm else backend
        for r in range(ranks):
            (g0, g1) = spans["last gradient (AddmmBackward0)"][r]
            for name in ("data", "forward", "backward", "all-reduce by hand", "optimizer"):
                if name not in spans:
                    continue
                x0, x1 = spans[name][r]
                right = max(right, x1)
                if name == "backward":
                    bar("backward", x0, min(g1, x1), -y)
                    if x1 > g1:
                        bar("wait", g1, x1, -y)
                else:
                    bar({"all-reduce by hand": "by hand"}.get(name, name), x0, x1, -y)
            ticks.append(-y)
            labels.append(w["compute"].format(r))
            y += 1
            rows_of, n = _lanes([s[r] for _, s in comm])
            h = 0.8 / n
            for (name, s), sub in zip(comm, rows_of):
                lane_y = -y + 0.4 - h * (sub + 0.5)
                bar("all_reduce", s[r][0], s[r][1], lane_y, h, name.rsplit(" ", 1)[1])
                right = max(right, s[r][1])
            ticks.append(-y)
            labels.append(w["comm"].format(backend))
            y += 1
    ax.set_xlim(0, right * 1.02)
    ax.set_ylim(-y + 0.4, 0.6)
    ax.set_yticks(ticks, labels, fontsize=8)
    ax.tick_params(axis="y", length=0)
    ax.spines["left"].set_visible(False)
    ax.set_xlabel(w["step ms"])
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor=style[k][0], hatch=style[k][1] or None,
                             edgecolor=FG, linewidth=0.5,
                             label=w[k].format(backend) if k == "all_reduce" else w[k])
               for k in style if k in used]
    ax.legend(handles=handles, loc="lower left", bbox_to_anchor=(0, 1.0), ncol=2, fontsize=8)
    return _svg(fig)


def draw_memory(series, title: str, lang: str) -> str:
    w = WORDS[lang]
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 3.0))
    xs = range(len(series))
    ax.fill_between(xs, [r for _, _, r in series], step="post", facecolor=SERIES[1],
                    alpha=0.45, hatch="//", hatchcolor=SERIES[1], edgecolor=SERIES[1],
                    linewidth=1, label=w["reserved"])
    ax.step(xs, [a for _, a, _ in series], where="post", color=SERIES[0], linewidth=2,
            label=w["allocated"])
    for x, (_, a, r) in zip(xs, series):
        ax.text(x + 0.05, r, f"{a} / {r}", va="bottom", ha="left", fontsize=8, color=FG)
    ax.set_xticks(list(xs), [label for label, _, _ in series], rotation=20, ha="right",
                  fontsize=8)
    ax.set_ylabel(w["mib"])
    ax.set_title(title, fontsize=9, loc="left")
    ax.legend(loc="upper right", fontsize=9)
    return _svg(fig)


# ------------------------------------------------------------------ the pictures
@dataclass(frozen=True)
class Picture:
    sources: tuple[str, ...]  # recordings, relative to outputs/ (gpu/... for a GPU picture)
    draw: Callable[[list[Path], str], str]  # (recording paths, lang) -> SVG


def _bars(titles, series):
    def draw(paths, lang):
        groups = []
        for title, path in zip(titles, paths):
            world, data = counted_bytes(body(path))
            groups.append((WORDS[lang]["ranks"].format(world) if title is None else title,
                           data))
        return draw_bars(groups, lang, series)
    return draw


_FREED = re.compile(r"^(?P<title>.+), rank (?P<rank>\d+): peak (?P<n>[\d,]+) B had each I "
                    r"freed all its outputs$")


def _pipeline_bars(paths, lang):
    """The peak per rank and schedule (``pipeline_memory.py``, ``zero_bubble_memory.py``),
    and what it would be had each I freed all (the latter only)."""
    lines = body(paths[0])
    _, data = counted_bytes(["0 processes", *lines])  # these print no world size
    label = ", peak"  # the activations held at the peak
    groups = [(k[:-len(label)], {label: v}) for k, v in data.items() if k.endswith(label)]
    marks = {(m["title"], int(m["rank"])): int(m["n"].replace(",", ""))
             for m in map(_FREED.match, lines) if m}
    return draw_bars(groups, lang, {label: "acts"}, marks)


PICTURES: dict[str, Picture] = {
    "pipeline-schedules": Picture(
        ("cpu/model_parallel/pipeline_interleaved.txt",),
        lambda paths, lang: draw_timelines(timelines(body(paths[0])), lang)),
    "zero-bubble-schedules": Picture(
        ("cpu/model_parallel/zero_bubble.txt",),
        lambda paths, lang: draw_timelines(timelines(body(paths[0])), lang)),
    "ddp-memory": Picture(
        ("cpu/ddp/cost.txt",),
        _bars([None], {"parameters per rank": "params", "gradients per rank": "grads",
                       "Adam moments per rank": "adam"})),
    "fsdp-memory": Picture(
        ("cpu/model_parallel/fsdp_cost.txt", "cpu/model_parallel/fsdp_cost-4.txt"),
        _bars([None, None], {"parameters per rank (padded shards)": "params",
                             "gradients per rank (padded shards)": "grads",
                             "Adam moments (exp_avg, exp_avg_sq)": "adam"})),
    "pipeline-memory": Picture(("cpu/model_parallel/pipeline_memory.txt",), _pipeline_bars),
    "tensor-memory": Picture(
        ("cpu/model_parallel/tensor_memory.txt",),
        lambda paths, lang: draw_parts(parts(body(paths[0])), lang)),
    "zero-bubble-memory": Picture(("cpu/model_parallel/zero_bubble_memory.txt",),
                                  _pipeline_bars),
    "fsdp-step": Picture(
        ("cpu/model_parallel/fsdp_cost.txt",),
        lambda paths, lang: draw_fsdp_step(counted(body(paths[0])), lang)),
    "collectives": Picture(
        ("cpu/collectives/collectives.txt",),
        lambda paths, lang: draw_collectives(before_after(body(paths[0])), lang)),
    "profile-step": Picture(
        ("cpu/production/profile_step.txt",),
        lambda paths, lang: draw_step_timelines(step_timelines(body(paths[0])), lang)),
    # a GPU picture: from outputs/gpu only; without that recording it is not drawn
    "dp-classic-gpu": Picture(
        ("gpu/dp/classic.txt",), lambda paths, lang: draw_dp_call(dp_call(body(paths[0])), lang)),
    "cuda-allocator-gpu": Picture(
        ("gpu/cuda/allocator.txt",),
        lambda paths, lang: draw_memory(memory_series(body(paths[0])), device(paths[0]), lang)),
}

_CODE = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]
# gitignored; a build without it draws everything (DOCS_PICTURE_CACHE: elsewhere, e.g. an empty
# folder, as `make bench` does to time a cold build as CI runs it)
CACHE = Path(os.environ.get("DOCS_PICTURE_CACHE") or ROOT / ".cache" / "pictures")


_BLOCK = re.compile(r"<!-- picture: (?P<name>[\w-]+) -->\n(?P<body>.*?)<!-- /picture -->\n",
                    re.S)


def on_page_markdown(markdown: str, page, config, files) -> str:
    """``<!-- picture: NAME -->`` … ``<!-- /picture -->``: the picture and its caption where its
    recordings exist, else one sentence saying that a GPU run draws it (no placeholder)."""
    lang = page.file.src_uri.split("/")[0]
    return _BLOCK.sub(lambda m: m["body"] if available(m["name"]) else
                      WORDS.get(lang, WORDS["en"])["later"] + "\n", markdown)


def render(name: str, lang: str, paths: list[Path] | None = None) -> str:
    """The light SVG of a picture, from its recordings (or from ``paths`` instead)."""
    pic = PICTURES[name]
    return pic.draw(paths or [OUTPUTS / s for s in pic.sources], lang)


def available(name: str) -> bool:
    """Whether every recording the picture needs exists (a GPU one only after a GPU run)."""
    return all((OUTPUTS / s).exists() for s in PICTURES[name].sources)


def cache_path(name: str, lang: str, scheme: str = "") -> Path:
    """Where ``.cache/pictures`` keeps a picture: named by a hash of its recordings and of this
    file (``scheme``: ``""`` for the light picture, ``"-dark"`` for the dark one)."""
    h = hashlib.sha256(_CODE.encode())
    for s in PICTURES[name].sources:
        h.update((OUTPUTS / s).read_bytes())
    return CACHE / f"{name}-{lang}-{h.hexdigest()[:16]}{scheme}.svg"


def cached(name: str, lang: str) -> str:
    """``render``, kept in ``.cache/pictures`` (light and dark) unless it is there already."""
    path = cache_path(name, lang)
    both = (path, path.with_name(path.stem + "-dark.svg"))  # cache_path(name, lang, "-dark")
    if all(p.exists() for p in both):
        return path.read_text(encoding="utf-8")
    svg = render(name, lang)
    CACHE.mkdir(parents=True, exist_ok=True)
    for old in set(CACHE.glob(f"{name}-{lang}-*.svg")) - set(both):  # older recordings'
        old.unlink(missing_ok=True)
    for target, text in zip(both, (svg, dark(svg))):
        tmp = target.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, target)  # a build reading the cache sees a whole picture or none
    return svg


if __name__ == "__main__":  # python -m pagerun.pictures NAME:LANG ...: draw into the cache
    import sys

    for pair in sys.argv[1:]:
        cached(*pair.split(":"))
