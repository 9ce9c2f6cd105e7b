"""The memory and communication calculator (docs/*/calculator.md, docs/assets/calculator/) in
Chromium: given the inputs of the cost programs' recorded runs, its results equal the
figures parsed from those recordings (exact where the program counts exactly, else within half a
unit of the last digit printed), and those of the ZeRO paper's Figure 1. Browser and skips: the
fixtures of tests/test_browser.py."""

from __future__ import annotations

import ast
import operator
import re
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest

import sitebuild
from pagerun import pages, recordings
from test_browser import ARTIFACTS, browser, clean  # noqa: F401 - the fixtures, skip logic

pagerun_background = sitebuild.pagerun_background  # the build starts with the blocks

# every input, as the page's address holds them: nothing left to the page's example
BASE = {"params": "", "shapes": "", "layers": "", "hidden": "", "heads": "", "kv_heads": "",
        "ffn": "", "vocab": "", "experts": "0", "topk": "1", "shared": "", "expert_ffn": "",
        "expert_params": "", "seq": "", "batch": "", "micro": "1", "gpus": "1", "zero": "0",
        "tp": "1", "sp": "on", "pp": "1", "cp": "1", "ep": "1", "precision": "bf16-mixed",
        "reduce_dtype": "same", "optimizer": "adam", "checkpointing": "none", "loss": "float32"}
READ = """() => ({state: document.querySelector('[data-calculator]').dataset.state,
  error: document.querySelector('[data-error]').textContent,
  ...Object.fromEntries([...document.querySelectorAll('[data-result]')]
     .map(e => [e.dataset.result, e.textContent])),
  ...Object.fromEntries([...document.querySelectorAll('[data-comm]')]
     .map(e => ['comm:' + e.dataset.comm, e.textContent]))})"""


@pytest.fixture(autouse=True)
def patient(browser):  # noqa: F811 - a busy machine loads a page in more than 5 s
    browser.page.set_default_timeout(30_000)
    yield


def calculate(b, lang="en", **inputs) -> dict:
    """The page's results for these inputs, as integers of bytes (None: not computed).

    The first time in a language the page is opened at the address that holds the inputs; after
    that they are put into its form, as a reader who changes a field does (what calculator.js
    does with an address is the same: it sets each field and computes). A page load costs
    Chromium CPU even with the empty search index the `clean` fixture serves."""
    values = BASE | {k: str(v) for k, v in inputs.items()}
    path = f"/{'' if lang == 'en' else 'zh/'}calculator/"
    if urlsplit(b.page.url).path != path:
        # the calculator's script runs before DOMContentLoaded: no need to wait for the rest
        b.page.goto(f"{b.base}{path}?{urlencode(values)}", wait_until="domcontentloaded")
        b.page.wait_for_function("() => document.querySelector('[data-calculator]').dataset.state")
    else:
        b.page.evaluate("""values => {
            const form = document.querySelector('[data-calculator] form');
            for (const [k, v] of Object.entries(values)) form.elements[k].value = v;
            form.dispatchEvent(new Event('change', {bubbles: true}));
        }""", values)
        assert parse_qs(urlsplit(b.page.url).query, keep_blank_values=True) == {
            k: [v] for k, v in values.items()}, "the address does not hold the inputs"
    raw = b.page.evaluate(READ)
    assert raw.pop("state") == "ok", f"the page refused {inputs}: {raw['error']}"
    raw.pop("error")
    out = {}
    for k, text in raw.items():
        m = re.fullmatch(r"([\d,]+) B", text)
        assert m or text == "—", f"{k}: {text!r} is not a byte count with its unit"
        out[k] = int(m.group(1).replace(",", "")) if m else None
    return out


def check(what, got, expected, tolerance=0.0):
    assert got is not None and abs(got - expected) <= tolerance, \
        f"{what}: the page gives {got:,}, expected {expected:,} (tolerance {tolerance:,})"


# ---- figures from the recordings and constants from the programs -----------------------------
def body(key: str) -> str:
    rec = recordings.load("cpu", key)
    assert rec is not None, f"no CPU recording {key}"
    return rec.body


def counted(key: str, what: str) -> int:
    """The counted N of the line `what: predicted N U, counted N U`."""
    m = re.search(rf"^{re.escape(what)}: predicted [\d,]+ \S+, counted ([\d,]+) \S+$", body(key),
                  re.M)
    assert m, f"{key}: no line {what!r}"
    return int(m.group(1).replace(",", ""))


UNITS = {"B": 1, "MB": 1e6, "GB": 1e9}


def printed(key: str, label: str, units: str = "GB|MB|B") -> tuple[float, float]:
    """The first figure in `units` after `label` in a recording, in bytes, and half a unit of
    its last printed digit (the rounding the figure may hide)."""
    text = body(key)
    at = text.find(label)
    assert at >= 0, f"{key}: no {label!r}"
    m = re.compile(rf"([\d,]+(?:\.(\d+))?) ({units})\b").search(text, at + len(label))
    assert m, f"{key}: no figure after {label!r}"
    unit = UNITS[m.group(3)]
    return float(m.group(1).replace(",", "")) * unit, 0.5 * 10 ** -len(m.group(2) or "") * unit


OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
       ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Pow: operator.pow}


def constants(path: str) -> dict:
    """Names the program assigns numbers to (NAME = 7e9, A, B = 8, 2 * 4), in order."""
    names = {}

    def value(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.Name):
            return names[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in OPS:
            return OPS[type(node.op)](value(node.left), value(node.right))
        raise ValueError

    tree = ast.parse((pages.ROOT / path).read_text(encoding="utf-8"))
    for node in sorted((n for n in ast.walk(tree) if isinstance(n, ast.Assign)),
                       key=lambda n: n.lineno):  # in the order the program runs them
        if len(node.targets) != 1:
            continue
        target, source = node.targets[0], node.value
        pairs = (zip(target.elts, source.elts) if isinstance(target, ast.Tuple)
                 and isinstance(source, ast.Tuple) else [(target, source)])
        for t, v in pairs:
            try:
                if isinstance(t, ast.Name):
                    names[t.id] = value(v)
            except (ValueError, KeyError):
                pass
    return names


def linear_shapes(path: str) -> str:
    """The `shapes` input of a program's nn.Linear(in, out) layers: weight out x in, bias out."""
    layers = re.findall(r"nn\.Linear\((\d+), (\d+)\)", (pages.ROOT / path).read_text("utf-8"))
    assert layers, path
    return ",".join(f"{o}x{i},{o}" for i, o in layers)


def processes(key: str) -> int:
    return int(re.match(r"(\d+) processes", body(key)).group(1))


# ---- exact: the programs that count ----------------------------------------------------------
def test_ddp_cost(clean):
    key = "ddp/cost"
    r = calculate(clean, shapes=linear_shapes("snippets/ddp/cost.py"), gpus=processes(key),
                  precision="fp32")
    check("parameters", r["params"], counted(key, "parameters per rank"))
    check("gradients", r["grads"], counted(key, "gradients per rank"))
    check("Adam", r["optimizer"],
          counted(key, "Adam moments per rank")
          + counted(key, "Adam step counters per rank (a float32 per tensor)"))
    ring = re.search(r"bytes sent per rank: .* = ([\d,]+) B", body(key))
    check("ring all-reduce", r["comm"], int(ring.group(1).replace(",", "")))
    assert r["activations"] is None  # no layers given: not computed, not zero


@pytest.mark.parametrize("key", ["model_parallel/fsdp_cost", "model_parallel/fsdp_cost-4"])
def test_fsdp_cost(clean, key):
    r = calculate(clean, shapes=linear_shapes("snippets/model_parallel/fsdp_cost.py"),
                  gpus=processes(key), zero=3, precision="fp32")
    check("parameters", r["params"], counted(key, "parameters per rank (padded shards)"))
    check("gradients", r["grads"], counted(key, "gradients per rank (padded shards)"))
    check("Adam, rank 0", r["optimizer"],
          counted(key, "Adam moments (exp_avg, exp_avg_sq), rank 0")
          + counted(key, "Adam step counters per rank (a float32 per tensor)"))
    sent = sum(counted(key, f"reshard=True, {what}") for what in (
        "forward, bytes received", "backward, bytes received",
        "reduce-scatter, bytes sent"))
    check("all-gathers and reduce-scatter", r["comm"], sent)


def test_tensor_cost(clean):
    key, c = "model_parallel/tensor_cost", constants("snippets/model_parallel/tensor_cost.py")
    assert c["FF"] == 4 * c["D"], "the page's block has an MLP of 4 * hidden"
    r = calculate(clean, layers=1, hidden=c["D"], heads=c["HEADS"], vocab=0, seq=c["S"],
                  batch=c["B"], tp=processes(key), gpus=processes(key), precision="fp32")
    check("parameters per rank", r["params"], counted(key, "TP, parameters per rank"))
    ring = re.search(r"both ([\d,]+) B \(formula only\)", body(key))
    check("ring bytes per block", r["comm:tp"], int(ring.group(1).replace(",", "")))
    check("all of it tensor parallel", r["comm"], r["comm:tp"])


def test_pipeline_cost(clean):
    key = "model_parallel/pipeline_cost"
    m = re.search(r"(\d+) micro-batches of (\d+) x (\d+) float32", body(key))
    p = processes(key)
    assert p == 2, "with 2 stages each rank sends every crossing of the one boundary"
    c = constants("snippets/model_parallel/pipeline_cost.py")
    r = calculate(clean, params=c["L"] * (c["H"] ** 2 + c["H"]), layers=c["L"], hidden=c["H"],
                  seq=1, batch=m.group(2), micro=m.group(1), pp=p, gpus=p, precision="fp32")
    check("activations sent forward", r["comm"],
          counted(key, "GPipe, activations sent per step"))


# ---- printed: the problems' figures ----------------------------------------------------------
def near(what, got, figure):
    expected, tolerance = figure
    check(what, got, expected, tolerance)


def test_ddp_and_collectives_problems(clean):
    c = constants("snippets/ddp/problems.py")
    ddp = calculate(clean, params=c["P"], gpus=c["N"], zero=0)
    near("DDP ring bytes", ddp["comm"], printed("ddp/problem-1", "bytes each GPU sends on a ring:"))
    c = constants("snippets/collectives/problems.py")
    ddp = calculate(clean, params=c["params"], gpus=c["n"], zero=0)
    fsdp = calculate(clean, params=c["params"], gpus=c["n"], zero=3)
    near("DDP", ddp["comm"], printed("collectives/problem-2", "DDP:"))
    near("FSDP2", fsdp["comm"],
         printed("collectives/problem-2", "reshard_after_forward=True:"))


def test_fsdp_problems(clean):
    c = constants("snippets/model_parallel/fsdp_problems.py")
    runs = {z: calculate(clean, params=c["P"], gpus=c["N"], zero=z) for z in range(4)}
    key = "model_parallel/fsdp_problem-1"
    near("FSDP", runs[3]["comm"], printed(key, "FSDP, reshard_after_forward=True:"))
    near("DDP", runs[0]["comm"], printed(key, "DDP (if it fitted):"))
    key = "model_parallel/fsdp_problem-2"
    for z, name in enumerate(["DDP:", "ZeRO-1:", "ZeRO-2:", "ZeRO-3 / FSDP:"]):
        near(name, runs[z]["total"], printed(key, name, units="GB"))


def test_tensor_and_pipeline_problems(clean):
    c = constants("snippets/model_parallel/tensor_problems.py")
    r = calculate(clean, params=c["LAYERS"] * c["PL"], layers=c["LAYERS"], hidden=c["H"],
                  seq=c["TOKENS"], batch=1, tp=c["n"], gpus=c["n"])
    near("TP per micro-batch", r["comm:tp"],
         printed("model_parallel/tensor_problems-1", "MB per layer, "))
    c = constants("snippets/model_parallel/pipeline_problems.py")
    shape = dict(params=c["P"], layers=c["LAYERS"], hidden=c["h"], seq=c["s"], batch=c["b"],
                 pp=c["p"], gpus=c["p"])
    m = int(re.search(r"GPipe and 1F1B: m = (\d+)", body("model_parallel/pipeline-problem-2"))[1])
    r = calculate(clean, micro=m, **shape)
    near("a middle rank's sends", r["comm:pp"],
         printed("model_parallel/pipeline-problem-2", "a middle rank sends"))
    key = "model_parallel/pipeline-problem-3"
    near("weights, gradients, Adam", r["params"] + r["grads"] + r["optimizer"],
         printed(key, "weights, gradients and Adam per rank:"))
    near("1F1B's first rank", r["activations"], printed(key, "first rank, 1F1B:"))


def test_twod_problems(clean):
    c = constants("snippets/model_parallel/twod_problems.py")
    tokens = 8 * c["SEQ"]
    assert re.search(r"tokens = 8 \* SEQ", (pages.ROOT / "snippets/model_parallel/"
                                           "twod_problems.py").read_text("utf-8"))
    shape = dict(params=c["P"], layers=c["LAYERS"], hidden=c["D"], seq=c["SEQ"],
                 batch=tokens // c["SEQ"], tp=c["TP"], gpus=c["NODES"] * c["TP"], zero=3)
    r = calculate(clean, **shape)
    near("TP", r["comm:tp"], printed("model_parallel/twod-problem-1", "TP all-reduces over NVLink:"))
    near("FSDP", r["comm:dp"], printed("model_parallel/twod-problem-1", "FSDP over InfiniBand:"))
    key = "model_parallel/twod-problem-2"
    near("model state", r["params"] + r["grads"] + r["optimizer"], printed(key, "GPUs:"))
    full = calculate(clean, **shape | {"checkpointing": "full"})
    one = calculate(clean, **shape | {"layers": 1})  # the layer recomputed at a time
    near("checkpointed inputs, SP", full["activations"] - one["activations"],
         printed(key, "with sequence parallelism"))


def test_fsdp_under_a_pipeline_as_all_dims_counts_it(clean):
    """ZeRO 2 or 3 with pp > 1: torch's pipelining reduces the gradients once, after the last
    micro-batch, and all_dims.py gathers each block once (reshard_after_forward=False). Its
    recording counts one all-gather and one reduce-scatter per block and step, M micro-batches
    or not, and their bytes are the calculator's, not M times them."""
    key = "model_parallel/all_dims-fsdp-tp-pp"
    dims = {d: int(k) for d, k in re.findall(r"\b(pp|dp|fsdp|cp|tp) (\d+)\b",
                                             re.search(r"mesh (.*)", body(key))[1])}
    assert dims["dp"] == dims["cp"] == 1 and "--ep" not in recordings.load("cpu", key).meta[
        "command"], "the calculator's model: FSDP over the fsdp ranks, experts not split"
    c = (constants("snippets/model_parallel/all_dims_model.py")
         | constants("snippets/model_parallel/all_dims.py"))
    D, E, FF, L, B, S, M = (c[k] for k in ("D", "E", "FF", "LAYERS", "B", "S", "M"))
    n, t, p, N = processes(key), dims["tp"], dims["pp"], dims["fsdp"]
    for what in ("fsdp, forward, all_gather calls", "fsdp, backward, reduce_scatter calls"):
        assert counted(key, what) == n * L // p, f"{what}: once per block and step, not M"
    # a block on one rank: wq, wk, wv, wo split by TP; the router and the experts whole
    block = 4 * D * D // t + E * D + 2 * E * D * FF
    buffers = sum(counted(key, f"fsdp, {w} bytes") for w in ("forward, all_gather",
                                                             "backward, reduce_scatter"))
    for zero in (2, 3):  # the same traffic: under a pipeline both are FSDP2 without resharding
        r = calculate(clean, params=block * L * t, layers=L, hidden=D, seq=S,  # count / (t p)
                      batch=B // (N * M), micro=M, gpus=n, tp=t, pp=p, zero=zero,
                      precision="fp32")  # is one rank's: (L / p) blocks
        # all_dims counts whole buffers (S) summed over the ranks, in float64; the calculator
        # the bytes one rank sends, (N - 1) / N of each, in float32
        check(f"ZeRO {zero}, FSDP's bytes sent per rank", r["comm:dp"],
              buffers // n * (N - 1) // N // 2)


def test_zero_under_a_pipeline_the_reviews_case(clean):
    """The review of 2026-11-28 (item 1): 70B parameters (80 layers of 8,192) on 64 GPUs, 8
    stages, 32 micro-batches, bf16. One stage's weights are 17.5 GB; each GPU sends 7/8 of them
    once as weights and once as gradients, 30.6 GB per step, not 32 times that; in exchange it
    holds the whole stage unsharded during the step (FSDP2 with gradient sync off), beside its
    shards of 17.5 / 8 GB."""
    P, n, p, m = 70e9, 64, 8, 32
    stage, N = 2 * P / p, n // p  # bf16 bytes of a stage's weights; data-parallel ranks
    for zero in (2, 3):
        r = calculate(clean, params=P, layers=80, hidden=8192, seq=4096, batch=1, micro=m,
                      gpus=n, pp=p, zero=zero)
        check(f"ZeRO {zero}: bytes sent", r["comm:dp"], (N - 1) / N * 2 * stage, 1)
        assert abs(r["comm:dp"] - 30.6e9) < 0.05e9
        check(f"ZeRO {zero}: gradients", r["grads"], stage + stage / N, 1)
        check(f"ZeRO {zero}: weights", r["params"], stage + (stage / N if zero == 3 else 0), 1)
    one = calculate(clean, params=P, layers=80, hidden=8192, seq=4096, batch=1, micro=m,
                    gpus=N, zero=3)  # no pipeline: FSDP2's default, every micro-batch
    check("ZeRO 3 without a pipeline", one["comm:dp"], m * (N - 1) / N * 3 * 2 * P, 1)


def test_expert_problem(clean):
    c = constants("snippets/expert/problems.py")
    experts = c["E"] * c["LAYERS"] * 3 * c["H"] * c["F"]  # a SwiGLU expert: 3 H x F matrices
    r = calculate(clean, params=experts, expert_params=experts, experts=c["E"], topk=c["K"],
                  ep=c["N"], gpus=c["N"], layers=c["LAYERS"], hidden=c["H"], seq=c["TOKENS"],
                  batch=1)
    near("expert weights", r["params"], printed("expert/problem-1", "GB replicated,"))
    near("all-to-alls", r["comm"], printed("expert/problem-1", f"{c['LAYERS']} layers:"))


# ZeRO (Rajbhandari et al., arXiv 1910.02054), Figure 1: 7.5B parameters, 64 GPUs, K = 12
PAPER = {"params": 7.5e9, "gpus": 64, "GB": [120, 31.4, 16.6, 1.9]}


def test_zero_paper_figure_1(clean):
    key = "model_parallel/memory-zero-paper"
    for z, (paper, row) in enumerate(zip(PAPER["GB"], ["DDP", "ZeRO-1", "ZeRO-2",
                                                       "ZeRO-3 / FSDP"])):
        r = calculate(clean, params=PAPER["params"], gpus=PAPER["gpus"], zero=z)
        check(f"stage {z}, the paper", r["total"], paper * 1e9, 0.05e9)
        line = re.search(rf"^{re.escape(row)} .* ([\d.]+)$", body(key), re.M)
        check(f"stage {z}, memory.py", r["total"], float(line[1]) * 1e9, 0.05e9)
        assert r["activations"] is None


# ---- the checks can fail; both languages; the address ---------------------------------------
def test_a_wrong_expectation_is_caught(clean):
    key = "ddp/cost"
    r = calculate(clean, shapes=linear_shapes("snippets/ddp/cost.py"), gpus=processes(key),
                  precision="fp32")
    with pytest.raises(AssertionError):
        check("parameters, one byte off", r["params"], counted(key, "parameters per rank") + 1)
    with pytest.raises(AssertionError):  # a figure outside its printed rounding
        near("ZeRO-1", r["params"], (31.4e9, 0.05e9))
    wrong = calculate(clean, shapes=linear_shapes("snippets/ddp/cost.py"), gpus=processes(key),
                      precision="bf16-mixed")  # the wrong precision for that run
    with pytest.raises(AssertionError):
        check("parameters, bf16", wrong["params"], counted(key, "parameters per rank"))


def test_both_languages_give_the_same_results(clean):
    inputs = dict(layers=32, hidden=4096, heads=32, vocab=32000, seq=4096, batch=2, micro=4,
                  gpus=64, zero=3, tp=2, pp=2, cp=2, checkpointing="full")
    en, zh = calculate(clean, "en", **inputs), calculate(clean, "zh", **inputs)
    assert en == zh
    assert all(v is not None for v in en.values()), en
    parts = sum(en[f"comm:{k}"] for k in ("dp", "tp", "pp", "cp", "ep"))
    assert abs(en["comm"] - parts) <= 5, "the parts, each rounded to the byte, add up"


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_an_input_changes_the_address_and_a_link_reproduces_it(clean, lang):
    b = clean
    before = calculate(b, lang, params="7e9", gpus=8, zero=0)
    b.page.fill("input[name=gpus]", "16")
    b.page.select_option("select[name=zero]", "3")
    query = parse_qs(urlsplit(b.page.url).query, keep_blank_values=True)
    assert query["gpus"] == ["16"] and query["zero"] == ["3"] and query["params"] == ["7e9"]
    assert set(query) == set(BASE), "every input is in the address"
    shown = b.page.evaluate(READ)
    b.goto(b.page.url.removeprefix(b.base))  # the link, opened again
    assert b.page.evaluate(READ) == shown
    assert shown["params"] != f"{before['params']:,} B"


def test_a_refused_layout_says_why(clean):
    b = clean
    b.goto("calculator/?" + urlencode(BASE | {"params": "7B", "gpus": "6", "tp": "4"}))
    b.page.wait_for_function("() => document.querySelector('[data-calculator]').dataset.state")
    raw = b.page.evaluate(READ)
    assert raw["state"] == "refused" and "tp × pp × cp" in raw["error"]
    assert raw["total"] == "—"


# ---- the models people train now: presets, grouped K/V heads, SwiGLU, SP, logits ---------------
# Each preset's shapes as its config.json gives them (the page links each file), and the count
# its publisher prints, with half a unit of the last digit printed as the tolerance.
HF = "https://huggingface.co"
CONFIG_NAMES = {"num_hidden_layers": "layers", "hidden_size": "hidden",
                "num_attention_heads": "heads", "num_key_value_heads": "kv_heads",
                "intermediate_size": "ffn", "vocab_size": "vocab",
                "num_local_experts": "experts", "num_experts": "experts",
                "num_experts_per_tok": "topk", "moe_intermediate_size": "expert_ffn"}
PRESETS = {
    "llama-3-8b": {
        "config": f"{HF}/meta-llama/Meta-Llama-3-8B/blob/main/config.json",
        "shapes": {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
                   "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256},
        "published": (8.03e9, 0.005e9), "source": f"{HF}/meta-llama/Meta-Llama-3-8B"},
    "llama-3-70b": {
        "config": f"{HF}/meta-llama/Meta-Llama-3-70B/blob/main/config.json",
        "shapes": {"num_hidden_layers": 80, "hidden_size": 8192, "num_attention_heads": 64,
                   "num_key_value_heads": 8, "intermediate_size": 28672, "vocab_size": 128256},
        "published": (70.6e9, 0.05e9), "source": f"{HF}/meta-llama/Meta-Llama-3-70B"},
    # the card gives 7.61B and, without the embedding and output layer, 6.53B; the shapes give
    # 7.6155B (7.6156B with the q, k, v biases the calculator leaves out): the card cuts its
    # last digit off where it rounds the other count, so the total is held to one unit
    "qwen2.5-7b": {
        "config": f"{HF}/Qwen/Qwen2.5-7B/blob/main/config.json",
        "shapes": {"num_hidden_layers": 28, "hidden_size": 3584, "num_attention_heads": 28,
                   "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064},
        "published": (7.61e9, 0.01e9), "non-embedding": (6.53e9, 0.005e9),
        "source": f"{HF}/Qwen/Qwen2.5-7B"},
    "mixtral-8x7b": {
        "config": f"{HF}/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json",
        "shapes": {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
                   "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000,
                   "num_local_experts": 8, "num_experts_per_tok": 2},
        "published": (46.7e9, 0.05e9), "active": (12.9e9, 0.05e9),
        "source": "https://mistral.ai/news/mixtral-of-experts"},
    "qwen1.5-moe-a2.7b": {
        "config": f"{HF}/Qwen/Qwen1.5-MoE-A2.7B/blob/main/config.json",
        "shapes": {"num_hidden_layers": 24, "hidden_size": 2048, "num_attention_heads": 16,
                   "num_key_value_heads": 16, "intermediate_size": 5632, "vocab_size": 151936,
                   "num_experts": 60, "num_experts_per_tok": 4, "moe_intermediate_size": 1408,
                   "shared_expert_intermediate_size": 5632},
        "published": (14.3e9, 0.05e9), "active": (2.7e9, 0.05e9),
        "source": f"{HF}/Qwen/Qwen1.5-MoE-A2.7B"},
}
COUNT = """k => document.querySelector(`[data-count="${k}"]`).textContent"""


def count(b, which: str) -> int | None:
    text = b.page.evaluate(COUNT, which)
    m = re.match(r"([\d,]+)\D", text + " ")
    return int(m.group(1).replace(",", "")) if m else None


def preset_inputs(name: str) -> dict:
    shapes = dict(PRESETS[name]["shapes"])
    shared = shapes.pop("shared_expert_intermediate_size", 0)
    inputs = {CONFIG_NAMES[k]: str(v) for k, v in shapes.items()}
    if "num_local_experts" in shapes:  # Mixtral: every expert is an MLP of intermediate_size
        inputs["expert_ffn"] = inputs["ffn"]
    if shared:  # Qwen1.5-MoE: its shared expert, as shared experts of the routed ones' width
        assert shared % shapes["moe_intermediate_size"] == 0
        inputs["shared"] = str(shared // shapes["moe_intermediate_size"])
    return inputs


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_presets_count_the_published_parameters(clean, lang):
    """Choosing a preset fills the model's inputs with its config.json's shapes; the count the
    calculator makes from them is the one its publisher prints."""
    b = clean
    calculate(b, lang, layers=1, hidden=64, seq=1, batch=1)
    for name, p in PRESETS.items():
        b.page.select_option("select[name=preset]", name)
        form = b.page.evaluate("""() => Object.fromEntries([...document.querySelector(
            '[data-calculator] form').elements].filter(e => e.name).map(e => [e.name, e.value]))""")
        for field, value in preset_inputs(name).items():
            assert form[field] == value, f"{name}: {field} is {form[field]}, config.json {value}"
        assert form["params"] == form["shapes"] == "", "the count comes from the shapes"
        query = parse_qs(urlsplit(b.page.url).query)
        assert query["layers"] == [form["layers"]], "a preset's shapes are in the address"
        total = count(b, "total")
        near(f"{name}: parameters", total, p["published"])
        assert f"{total:,}" in b.page.text_content("article"), \
            f"{name}: the page's table of presets does not give {total:,}"
        if "non-embedding" in p:  # without the embedding and the output layer, V x h each
            s = p["shapes"]
            near(f"{name}: without embeddings", total - 2 * s["vocab_size"] * s["hidden_size"],
                 p["non-embedding"])
        if "active" in p:
            near(f"{name}: active", count(b, "active"), p["active"])
        else:
            assert count(b, "active") is None
    b.page.fill("input[name=layers]", "33")
    assert b.page.input_value("select[name=preset]") == "", "changed shapes are no preset"


LLAMA_8B = preset_inputs("llama-3-8b")


def test_a_swiglu_layer_with_grouped_heads(clean):
    """The page's formula for a Llama layer (#activations), term by term, in u = s b h 16-bit
    values: norms' inputs 4, inputs of q/k/v and of the MLP 4, Q 2, K and V 4 x 8 / 32, the
    attention's output 2, and the SwiGLU MLP's four F-wide tensors 8 x 14336 / 4096: 41; the
    counted run's recording agrees (test_layer_units_as_the_shapes_program_counts_them)."""
    s, b = 4096, 2
    r = calculate(clean, **LLAMA_8B, seq=s, batch=b, gpus=8, zero=3)
    check("activations", r["activations"], 32 * 41 * s * b * 4096)
    gpt = calculate(clean, **LLAMA_8B | {"ffn": "0"}, seq=s, batch=b, gpus=8, zero=3)
    check("the GPT layer, ffn 0", gpt["activations"], 32 * (34 - 4 + 1) * s * b * 4096)
    assert gpt["params"] < r["params"], "a GeLU MLP of 4h is smaller than SwiGLU's 3 x 3.5h"


def shapes_rows() -> list[tuple[str, dict, tuple[float, float]]]:
    """The published shapes snippets/shapes/activations.py prints, with their fused-norm bytes
    per s·b·h per layer (a formula it checks by counting a small layer's saved tensors) and
    half a unit of the last printed digit; and GPT-3 175B's (h 12,288, 96 heads, byte masks)."""
    text, rows = body("shapes/activations"), []
    for m in re.finditer(r"^(\S+)\s+([\d,]+)\s+([\d,]+)\s+([\d,]+)\s+(\d+)\s+[\d.]+\s+"
                         r"(\d+\.(\d+))$", text, re.M):
        h, h_kv, f, heads = (int(m.group(i).replace(",", "")) for i in range(2, 6))
        shape = dict(hidden=h, heads=heads, kv_heads=heads * h_kv // h, ffn=f)
        rows.append((m.group(1), shape, (float(m.group(6)), 0.5 * 10 ** -len(m.group(7)))))
    m = re.search(r"^GPT-3 175B: (\d+\.(\d+)) with byte masks", text, re.M)
    assert m, "shapes/activations: no GPT-3 175B line"
    rows.append(("GPT-3 175B", dict(hidden=12288, heads=96, kv_heads="", ffn=0),
                 (float(m.group(1)), 0.5 * 10 ** -len(m.group(2)))))
    return rows


def test_layer_units_as_the_shapes_program_counts_them(clean):
    """Each shape the activations program prints: the calculator's bytes per s·b·h of one
    layer (bf16, no TP) within the program's printed rounding of its fused-norm column. The
    calculator leaves out the log-sum-exp and the norms' 1/rms (4 heads / h + 8 / h, 0.03)."""
    rows = shapes_rows()
    assert len(rows) >= 5, f"shapes/activations: only {[r[0] for r in rows]}"
    seq, batch = 64, 2
    for name, shape, figure in rows:
        r = calculate(clean, layers=1, vocab=0, seq=seq, batch=batch, **shape)
        units = r["activations"] / (seq * batch * shape["hidden"])
        check(f"{name}, bytes per s·b·h", units, *figure)
    with pytest.raises(AssertionError):  # one unit of the last printed digit off is caught
        check(f"{name}, one digit off", units, figure[0] + 2 * figure[1], figure[1])


def test_tensor_parallel_without_sequence_parallelism(clean):
    """Korthikanti et al., eq. 2 (no SP): 10 + 24 / t units per GPT layer; with SP as DTensor
    runs it, 4 + 30 / t. The bytes TP sends are the same (an all-reduce is a reduce-scatter
    and an all-gather); full checkpointing keeps each layer's input whole without SP."""
    shape = dict(layers=8, hidden=4096, heads=32, vocab=0, seq=2048, batch=1, gpus=8, tp=8)
    u = 2048 * 4096
    on, off = calculate(clean, **shape), calculate(clean, **shape, sp="off")
    check("SP", on["activations"], 8 * (4 + 30 / 8) * u, 1)
    check("no SP", off["activations"], 8 * (10 + 24 / 8) * u, 1)
    assert on["comm:tp"] == off["comm:tp"]
    full = calculate(clean, **shape, sp="off", checkpointing="full")
    check("checkpointed inputs, no SP", full["activations"], 8 * 2 * u + (10 + 24 / 8) * u, 1)


def test_logits_and_the_float32_copy_for_the_loss(clean):
    """b s V logits in bf16 and the float32 log-probabilities cross_entropy keeps (torchtitan
    computes the loss on pred.float()); split by vocabulary with loss_parallel; a chunked loss
    never holds them; on the last stage, in the first stage's total only without a pipeline."""
    shape = LLAMA_8B | dict(seq=4096, batch=2, gpus=8, zero=3)
    n = 2 * 4096 * 128256
    r = calculate(clean, **shape)
    check("logits", r["logits"], n * (2 + 4))
    check("in the total", r["total"], r["params"] + r["grads"] + r["optimizer"]
          + r["activations"] + r["logits"], 4)
    check("loss_parallel", calculate(clean, **shape, tp=2, loss="parallel")["logits"], n * 6 / 2)
    check("chunked", calculate(clean, **shape, loss="chunked")["logits"], 0)
    two = calculate(clean, **shape, pp=2)
    check("pp 2: the last stage's", two["logits"], n * 6)
    check("pp 2: not the first stage's", two["total"],
          two["params"] + two["grads"] + two["optimizer"] + two["activations"], 4)


def test_reduce_dtype_float32_doubles_the_gradients(clean):
    P, n = 7e9, 8
    same = calculate(clean, params=P, gpus=n, zero=1)
    fp32 = calculate(clean, params=P, gpus=n, zero=1, reduce_dtype="float32")
    check("ZeRO 1, bf16 gradients", same["comm:dp"], (n - 1) / n * P * (2 + 2), 1)
    check("ZeRO 1, float32 gradients", fp32["comm:dp"], (n - 1) / n * P * (4 + 2), 1)
    check("gradients held", fp32["grads"], 4 * P, 1)


# ---- the answer at a glance --------------------------------------------------------------------
SEGMENTS = """() => [...document.querySelectorAll('[data-bar] span')]
  .map(s => [s.closest('[data-bar]').dataset.bar, s.dataset.part, s.style.width])"""
# a reader's edits, top to bottom of the form: each changes what one GPU holds or sends
EDITS = [("layers", "40"), ("tp", "2"), ("pp", "2"), ("micro", "4"), ("zero", "1"),
         ("checkpointing", "full"), ("pp", "1"), ("loss", "chunked")]


def visible(b, selector: str) -> dict:
    box = b.page.locator(selector).bounding_box()
    view = b.page.viewport_size
    assert box and box["y"] >= 0 and box["y"] + box["height"] <= view["height"] \
        and box["x"] >= 0 and box["x"] + box["width"] <= view["width"], \
        f"{selector} is not on screen: {box} in {view}"
    return box


@pytest.mark.parametrize("size", [(1280, 900), (390, 844)])
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_answer_and_its_picture_stay_on_screen_while_a_reader_edits(clean, size, lang):
    """At 1280 x 900 the summary stays beside the form, at 390 x 844 in a bar under the
    header: after each edit the totals and both stacked bars are in the viewport, the edited
    input too and not under the summary, and the bars' segments have changed."""
    b = clean
    w, h = size
    b.page.set_viewport_size({"width": w, "height": h})
    try:
        b.goto(f"{'' if lang == 'en' else 'zh/'}calculator/?" + urlencode(
            BASE | LLAMA_8B | dict(seq=4096, batch=1, gpus=64, zero=3)))
        b.page.wait_for_function("() => document.querySelector('[data-calculator]').dataset.state")
        for name, value in EDITS:
            before = b.page.evaluate(SEGMENTS)
            field = b.page.locator(f"[data-calculator] [name={name}]")
            field.focus()  # the browser scrolls it into view, as for a reader's Tab or tap
            if field.evaluate("e => e.tagName") == "SELECT":
                field.select_option(value)
            else:
                b.page.keyboard.press("Control+A")
                b.page.keyboard.type(value)
            assert b.page.evaluate(READ)["state"] == "ok"
            after = b.page.evaluate(SEGMENTS)
            assert after != before, f"{name} = {value}: the bars did not change"
            summary = visible(b, ".calc-summary")
            for sel in ('[data-headline="total"]', '[data-headline="comm"]',
                        '[data-bar="memory"]', '[data-bar="comm"]'):
                visible(b, sel)
            box = visible(b, f"[data-calculator] [name={name}]")
            apart = (box["y"] >= summary["y"] + summary["height"]
                     or box["y"] + box["height"] <= summary["y"]
                     or box["x"] >= summary["x"] + summary["width"]
                     or box["x"] + box["width"] <= summary["x"])
            assert apart, f"{name} is under the summary: {box}, {summary}"
        bars = b.page.locator("[data-bar][role=img]")
        assert bars.count() == 2
        label = bars.first.get_attribute("aria-label")
        assert re.search(r"\d+(\.\d+)? [kMGT]?B \(\d+%\)", label), label
        ARTIFACTS.mkdir(exist_ok=True)
        b.page.screenshot(path=str(ARTIFACTS / f"calculator-{lang}-{w}x{h}.png"))
    finally:
        b.page.set_viewport_size({"width": 1280, "height": 900})


def test_the_bars_are_labelled_in_both_schemes(clean):
    """Every segment wide enough carries its short name, and a legend entry its full name and
    figure: colour is never the only label. Its text stays legible in light and dark."""
    b = clean
    calculate(b, **LLAMA_8B, seq=4096, batch=1, gpus=8, zero=0, tp=2)
    for scheme in ("default", "slate"):
        b.page.evaluate("s => document.body.setAttribute('data-md-color-scheme', s)", scheme)
        segs = b.page.evaluate("""() => [...document.querySelectorAll('[data-bar] span')].map(s =>
            [s.dataset.part, s.textContent, s.getBoundingClientRect().width,
             getComputedStyle(s).color, getComputedStyle(s).backgroundColor])""")
        legend = b.page.locator("[data-legend=memory] li").all_inner_texts()
        assert any("weights" in t and "GB" in t for t in legend), legend
        for part, text, width, fg, bg in segs:
            assert text or width < 40, f"{part}: {width} px wide and no label"
            assert fg != bg
    b.page.evaluate("() => document.body.setAttribute('data-md-color-scheme', 'default')")


def test_an_address_from_before_the_new_inputs_keeps_its_meaning(clean):
    """A link written before kv_heads, ffn, sp, reduce_dtype and loss existed holds none of
    them: it still describes the GPT block it meant, not the page's default Llama shapes."""
    old = {k: v for k, v in BASE.items() if k not in (
        "kv_heads", "ffn", "shared", "expert_ffn", "sp", "reduce_dtype", "loss")}
    old |= dict(layers="32", hidden="4096", heads="32", vocab="32000", seq="4096", batch="1",
                gpus="8", zero="3", tp="2")
    b = clean
    b.goto("calculator/?" + urlencode(old))
    b.page.wait_for_function("() => document.querySelector('[data-calculator]').dataset.state")
    shown = b.page.evaluate(READ)
    gpt = calculate(b, **old)  # every input given, the new ones as BASE has them
    assert shown["params"] == f"{gpt['params']:,} B"
    assert shown["activations"] == f"{gpt['activations']:,} B"
    assert b.page.input_value("input[name=ffn]") == "" and b.page.input_value(
        "select[name=sp]") == "on"
