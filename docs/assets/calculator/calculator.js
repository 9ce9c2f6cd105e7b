/* The memory and communication calculator of docs/en/calculator.md and docs/zh/calculator.md.
   Plain JavaScript served by the site itself: no build step, nothing from another host.
   The formulas are those of the site's cost programs; each is stated, with its source, on the
   page ("Formulas"), and tests/test_calculator.py checks them against the programs' recordings.
   State: the query parameters FIELDS, read on load and rewritten on every change. */
(function () {
  "use strict";

  const FIELDS = ["params", "shapes", "layers", "hidden", "heads", "vocab", "experts", "topk",
    "expert_params", "seq", "batch", "micro", "gpus", "zero", "tp", "pp", "cp", "ep",
    "precision", "optimizer", "checkpointing"];
  const CHOICES = {zero: ["0", "1", "2", "3"], precision: ["bf16-mixed", "fp32"],
    optimizer: ["adam", "sgd"], checkpointing: ["none", "full"]};
  // bytes per element: weights, gradients, activations; optimizer state per parameter
  const BYTES = {"bf16-mixed": {w: 2, g: 2, x: 2, adam: 12, sgd: 4},
    "fp32": {w: 4, g: 4, x: 4, adam: 8, sgd: 0}};
  const SUFFIX = {"": 1, k: 1e3, K: 1e3, M: 1e6, B: 1e9, G: 1e9, T: 1e12};

  const MESSAGES = {
    en: {
      count: (f) => `${f}: a count such as 7.5e9, 7.5B or 662026`,
      integer: (f) => `${f}: a whole number`,
      positive: (f) => `${f}: at least 1`,
      choice: (f, c) => `${f}: one of ${c.join(", ")}`,
      shapes: () => "shapes: tensor shapes separated by commas, such as 512x256,512",
      model: () => "give params, shapes, or layers and hidden",
      layout: (n, k) => `gpus (${n}) must be a multiple of tp × pp × cp (${k})`,
      divides: (a, b) => `${b} must be a multiple of ${a}`,
      alone: () => "shapes describe one replica: only with tp = pp = ep = 1 and no experts",
      ep: () => "ep > 1 needs experts",
      moe: () => "experts need params and expert_params (counts), with tp = 1",
      topk: () => "topk: from 1 to experts",
      more: () => "expert_params cannot exceed params",
      needs: () => "needs layers, hidden, seq and batch",
      stage: {first: "the first stage", middle: "a middle stage", last: "the last stage"},
    },
    zh: {
      count: (f) => `${f}：填一个数量，例如 7.5e9、7.5B 或 662026`,
      integer: (f) => `${f}：填一个整数`,
      positive: (f) => `${f}：至少为 1`,
      choice: (f, c) => `${f}：只能是 ${c.join("、")} 之一`,
      shapes: () => "shapes：用逗号分隔的张量形状，例如 512x256,512",
      model: () => "请填写 params、shapes，或 layers 和 hidden",
      layout: (n, k) => `gpus（${n}）必须是 tp × pp × cp（${k}）的倍数`,
      divides: (a, b) => `${b} 必须是 ${a} 的倍数`,
      alone: () => "shapes 描述的是一个副本：只能配合 tp = pp = ep = 1 且不设 experts",
      ep: () => "ep > 1 需要设置 experts",
      moe: () => "专家需要 params 和 expert_params（数量），并且 tp = 1",
      topk: () => "topk：取 1 到 experts 之间",
      more: () => "expert_params 不能大于 params",
      needs: () => "需要 layers、hidden、seq 和 batch",
      stage: {first: "第一个阶段", middle: "中间的阶段", last: "最后一个阶段"},
    },
  };
  let msg = MESSAGES.en;

  class Refusal extends Error {}
  const refuse = (text) => { throw new Refusal(text); };

  // ---- reading the inputs ----------------------------------------------------------------
  function parseCount(name, text) {
    const t = text.replace(/[,_\s]/g, "");
    const m = /^(\d+(?:\.\d+)?(?:[eE]\+?\d+)?)([kKMBGT]?)$/.exec(t);
    if (!m) refuse(msg.count(name));
    return Math.round(Number(m[1]) * SUFFIX[m[2]]);
  }

  function parseInteger(name, text, min) {
    const t = text.replace(/[,_\s]/g, "");
    if (!/^\d+$/.test(t)) refuse(msg.integer(name));
    const v = Number(t);
    if (v < min) refuse(msg.positive(name));
    return v;
  }

  function parseShapes(text) {  // "65x16,65" -> [[rows, elements per row], ...]
    return text.split(",").map((s) => s.trim()).filter(Boolean).map((s) => {
      if (!/^\d+(?:x\d+)*$/.test(s)) refuse(msg.shapes());
      const dims = s.split("x").map(Number);
      return [dims[0], dims.slice(1).reduce((a, b) => a * b, 1)];
    });
  }

  function read(raw) {  // raw: field -> text; returns the typed state, or refuses
    const s = {};
    const opt = (f, parse) => (raw[f] || "").trim() === "" ? null : parse(f, raw[f]);
    s.params = opt("params", parseCount);
    s.expert_params = opt("expert_params", parseCount);
    s.shapes = (raw.shapes || "").trim() ? parseShapes(raw.shapes) : null;
    for (const f of ["layers", "hidden", "heads", "vocab", "experts", "topk", "seq", "batch"]) {
      s[f] = opt(f, (n, t) => parseInteger(n, t, 0));
    }
    for (const f of ["micro", "gpus", "tp", "pp", "cp", "ep"]) {
      s[f] = parseInteger(f, (raw[f] || "").trim() || "1", 1);
    }
    for (const [f, choices] of Object.entries(CHOICES)) {
      if (!choices.includes(raw[f])) refuse(msg.choice(f, choices));
      s[f] = raw[f];
    }
    s.zero = Number(s.zero);
    return s;
  }

  // ---- the model: what one GPU holds ---------------------------------------------------------
  // A part of the model is {list: [[rows, per row], ...]} (tensors known: FSDP pads each one's
  // rows to a multiple of the group) or {count: n} (a count: split evenly), with the size of the
  // group that shards it (ZeRO / FSDP over data and context parallel ranks).
  const elements = (part) => part.list ? part.list.reduce((a, [r, k]) => a + r * k, 0)
    : part.count;
  const shard = (part, n) => part.list ? part.list.reduce((a, [r, k]) => a + Math.ceil(r / n) * k, 0)
    : part.count / n;

  function layerTensors(h, t) {  // one GPT block under tensor parallelism (tensor.md#cost)
    const ff = 4 * h;
    return [[h / t, h], [h / t, 1], [h / t, h], [h / t, 1], [h / t, h], [h / t, 1],  // q, k, v
      [h, h / t], [h, 1],                                                    // o (row-wise)
      [h, 1], [h, 1], [h, 1], [h, 1],                                        // two LayerNorms
      [ff / t, h], [ff / t, 1], [h, ff / t], [h, 1]];                        // the MLP
  }

  function parts(s, stage, d) {  // the parts of the model on one GPU of pipeline stage `stage`
    const {tp: t, pp: p, cp: c, ep: e} = s;
    if (s.shapes) return [{list: s.shapes, group: d * c}];
    if (s.params !== null) {
      const experts = s.experts ? s.expert_params : 0;
      return [{count: (s.params - experts) / (t * p), group: d * c},
        {count: experts / (e * p), group: d * c / e}];
    }
    const h = s.hidden, v = s.vocab || 0;
    let list = [];
    for (let i = 0; i < s.layers / p; i++) list = list.concat(layerTensors(h, t));
    if (v && stage === 0) list.push([v / t, h]);                     // embedding (vocab-parallel)
    if (v && stage === p - 1) list.push([h, 1], [h, 1], [v / t, h]);  // final norm, output layer
    return [{list, group: d * c}];
  }

  // ZeRO 2 and 3 under a pipeline (pp > 1) are FSDP2 as torch.distributed.pipelining and
  // torchtitan run it: reshard_after_forward=False, gradient sync only after the last
  // micro-batch. The stage's weights stay gathered and its gradients accumulate unsharded
  // for the whole step: one all-gather and one reduce-scatter per step, no shard saved then.
  const pipelined = (s) => s.pp > 1 && s.zero >= 2;

  function memory(s, stage, d) {
    const B = BYTES[s.precision], o = B[s.optimizer], z = s.zero;
    let params = 0, grads = 0, optimizer = 0;
    for (const part of parts(s, stage, d)) {
      const whole = elements(part), own = shard(part, part.group);
      params += (z >= 3 ? own : whole) * B.w;
      grads += (z >= 2 ? own : whole) * B.g;
      optimizer += (z >= 1 ? own : whole) * o;
      if (pipelined(s) && part.group > 1) {  // the unsharded stage, beside the shards
        if (z >= 3) params += whole * B.w;
        grads += whole * B.g;
      }
      if (part.list && s.optimizer === "adam") optimizer += 4 * part.list.length;  // step
    }
    return {params, grads, optimizer};
  }

  function dataParallel(s, stage, d) {  // bytes one GPU sends per step for the ZeRO stage
    const B = BYTES[s.precision], m = s.micro;
    let sent = 0;
    for (const part of parts(s, stage, d)) {
      const n = part.group;
      if (n <= 1) continue;
      const whole = elements(part), other = (n - 1) * shard(part, n);  // ring: n - 1 chunks
      if (s.zero === 0) sent += 2 * (n - 1) / n * whole * B.g;  // all-reduce, once a step
      else if (s.zero === 1 || pipelined(s)) sent += other * (B.g + B.w);  // once a step:
      // a reduce-scatter of the gradients, an all-gather of the (updated) weights
      else if (s.zero === 2) sent += other * (m * B.g + B.w);    // gradients every micro-batch
      else sent += m * other * (2 * B.w + B.g);  // all-gather forward and backward, reduce-scatter
    }
    return sent;
  }

  function activations(s) {  // bytes kept for backward on the first stage (null: unknown)
    const {layers: L, hidden: h, seq, batch: b, tp: t, pp: p, cp: c} = s;
    const u = b * (seq / c) * h * BYTES[s.precision].x / 2;  // s·b·h at 16 bits
    // a GPT-3 layer (Korthikanti et al.): a SwiGLU (Llama) layer keeps more than 34
    const perLayer = (s.experts ? 15 + 19 * s.topk : t > 1 ? 4 + 30 / t : 34) * u;
    const inFlight = Math.min(s.micro, p) * L / p;  // 1F1B: min(m, p) micro-batches of L/p layers
    return s.checkpointing === "none" ? inFlight * perLayer : inFlight * 2 * u / t + perLayer;
  }

  function activationTraffic(s) {  // TP, CP and EP bytes per step; PP per micro-batch boundary
    const {hidden: h, seq, batch: b, tp: t, pp: p, cp: c, ep: e, micro: m} = s;
    const x = BYTES[s.precision].x, L = s.layers / p, again = s.checkpointing === "full";
    const act = b * (seq / c) * h * x;  // one layer's input on one GPU, whole
    const out = {tp: 0, cp: 0, ep: 0, boundary: act / t};
    if (t > 1) out.tp = L * m * (again ? 6 : 4) * 2 * (t - 1) / t * act;
    if (c > 1) {  // K and V all-gathered, forward (twice with recomputation) and backward;
      const kv = 2 * b * (seq / c) * (h / t);  // their fp32 gradients passed round the ring
      out.cp = L * m * ((again ? 3 : 2) * (c - 1) * kv * x + c * kv * 4);
    }
    if (e > 1) out.ep = L * m * (again ? 6 : 4) * (b * seq / c) * s.topk * (e - 1) / e * h * x;
    return out;
  }

  function compute(s) {
    const {gpus: n, tp: t, pp: p, cp: c, ep: e} = s;
    if (n % (t * p * c)) refuse(msg.layout(n, t * p * c));
    const d = n / (t * p * c);
    const shaped = s.layers > 0 && s.hidden > 0;
    if (s.shapes && (t > 1 || p > 1 || e > 1 || s.experts)) refuse(msg.alone());
    if (!s.shapes && s.params === null && !shaped) refuse(msg.model());
    if (e > 1 && !s.experts) refuse(msg.ep());
    if (s.experts) {
      if (s.params === null || s.expert_params === null || t > 1 || s.shapes) refuse(msg.moe());
      if (!(s.topk >= 1 && s.topk <= s.experts)) refuse(msg.topk());
      if (s.expert_params > s.params) refuse(msg.more());
      if (s.experts % e) refuse(msg.divides("ep", "experts"));
      if ((d * c) % e) refuse(msg.divides("ep", "gpus / (tp × pp)"));
    }
    if (shaped) {
      if (s.layers % p) refuse(msg.divides("pp", "layers"));
      if (s.hidden % t) refuse(msg.divides("tp", "hidden"));
      if (s.heads && s.hidden % s.heads) refuse(msg.divides("heads", "hidden"));
      if (s.heads && s.heads % t) refuse(msg.divides("tp", "heads"));
      if (!s.shapes && s.params === null && (s.vocab || 0) % t) refuse(msg.divides("tp", "vocab"));
    }
    if (s.seq && s.seq % c) refuse(msg.divides("cp", "seq"));

    const r = memory(s, 0, d);
    const known = shaped && s.seq > 0 && s.batch > 0;
    r.activations = known ? activations(s) : null;
    r.total = r.params + r.grads + r.optimizer + (r.activations || 0);
    const traffic = known ? activationTraffic(s) : null;
    const needsActivations = t > 1 || p > 1 || c > 1 || e > 1;
    r.comm = null;
    r.parts = {dp: null, tp: null, pp: null, cp: null, ep: null};
    if (needsActivations && !known) return r;
    // each stage sends its data-parallel share; PP: the first and last stage m activations or
    // gradients, a middle stage both: report the GPU that sends most
    const stages = p >= 3 ? [0, 1, p - 1] : p === 2 ? [0, 1] : [0];
    for (const i of stages) {
      const pp = p === 1 ? 0 : (i === 0 || i === p - 1 ? 1 : 2) * s.micro * traffic.boundary;
      const dp = dataParallel(s, i, d);
      const sum = dp + pp + (traffic ? traffic.tp + traffic.cp + traffic.ep : 0);
      if (r.comm === null || sum > r.comm) {
        r.comm = sum;
        r.stage = i === 0 ? "first" : i === p - 1 ? "last" : "middle";
        r.parts = {dp, pp, tp: traffic ? traffic.tp : 0, cp: traffic ? traffic.cp : 0,
          ep: traffic ? traffic.ep : 0};
      }
    }
    return r;
  }

  // ---- the page ------------------------------------------------------------------------------
  const exact = (v) => `${Math.round(v).toLocaleString("en-US")} B`;
  function human(v) {
    for (const [unit, size] of [["TB", 1e12], ["GB", 1e9], ["MB", 1e6], ["kB", 1e3]]) {
      if (v >= size) return `${(v / size).toFixed(2)} ${unit}`;
    }
    return `${Math.round(v)} B`;
  }

  function show(form, root, raw) {
    const error = root.querySelector("[data-error]");
    let r;
    try {
      r = compute(read(raw));
      error.textContent = "";
      error.hidden = true;
    } catch (e) {
      if (!(e instanceof Refusal)) throw e;
      error.textContent = e.message;
      error.hidden = false;
      r = null;
    }
    const set = (sel, v, why) => {
      for (const el of root.querySelectorAll(sel)) {
        el.textContent = v === null || v === undefined ? "—" : exact(v);
        const h = el.closest("tr") && el.closest("tr").querySelector("[data-human]");
        if (h) h.textContent = v === null || v === undefined ? (r ? why : "") : human(v);
      }
    };
    for (const k of ["params", "grads", "optimizer", "activations", "total", "comm"]) {
      set(`[data-result="${k}"]`, r && r[k], msg.needs());
    }
    for (const k of ["dp", "tp", "pp", "cp", "ep"]) {
      set(`[data-comm="${k}"]`, r && r.parts[k], msg.needs());
    }
    const stage = root.querySelector("[data-stage]");
    if (stage) stage.textContent = r && r.stage ? msg.stage[r.stage] : "";
    root.dataset.state = r ? "ok" : "refused";
  }

  function init() {
    const root = document.querySelector("[data-calculator]");
    if (!root) return;
    msg = MESSAGES[document.documentElement.lang] || MESSAGES.en;
    const form = root.querySelector("form");
    const query = new URLSearchParams(window.location.search);
    for (const f of FIELDS) {
      if (query.has(f) && form.elements[f]) form.elements[f].value = query.get(f);
    }
    const raw = () => Object.fromEntries(FIELDS.map((f) => [f, form.elements[f].value]));
    const update = () => {
      const values = raw();
      show(form, root, values);
      const q = new URLSearchParams(values).toString().replace(/%2C/g, ",");
      history.replaceState(null, "", `${window.location.pathname}?${q}${window.location.hash}`);
    };
    form.addEventListener("input", update);
    form.addEventListener("change", update);
    form.addEventListener("submit", (ev) => ev.preventDefault());
    show(form, root, raw());  // the address stays as it came until the reader changes something
  }

  window.memoryCalculator = {compute, read};  // for the browser's console
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init, {once: true});
  else init();
})();
