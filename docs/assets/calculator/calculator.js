/* The memory and communication calculator of docs/en/calculator.md and docs/zh/calculator.md.
   Plain JavaScript served by the site itself: no build step, nothing from another host.
   The formulas are those of the site's cost programs; each is stated, with its source, on the
   page ("Formulas"), and tests/test_calculator.py checks them against the programs' recordings.
   State: the query parameters FIELDS, read on load and rewritten on every change. */
(function () {
  "use strict";

  const FIELDS = ["params", "shapes", "layers", "hidden", "heads", "kv_heads", "ffn", "vocab",
    "experts", "topk", "shared", "expert_ffn", "expert_params", "seq", "batch", "micro", "gpus",
    "zero", "tp", "sp", "pp", "cp", "ep", "precision", "reduce_dtype", "optimizer",
    "checkpointing", "loss"];
  const CHOICES = {zero: ["0", "1", "2", "3"], sp: ["on", "off"], precision: ["bf16-mixed", "fp32"],
    reduce_dtype: ["same", "float32"], optimizer: ["adam", "sgd"],
    checkpointing: ["none", "full"], loss: ["float32", "parallel", "chunked"]};
  // bytes per element: weights, gradients, activations; optimizer state per parameter
  const BYTES = {"bf16-mixed": {w: 2, g: 2, x: 2, adam: 12, sgd: 4},
    "fp32": {w: 4, g: 4, x: 4, adam: 8, sgd: 0}};
  // public models' shapes, from their config.json (linked on the page, #presets)
  const MODEL = ["params", "shapes", "layers", "hidden", "heads", "kv_heads", "ffn", "vocab",
    "experts", "topk", "shared", "expert_ffn", "expert_params"];
  const PRESETS = {
    "llama-3-8b": {layers: 32, hidden: 4096, heads: 32, kv_heads: 8, ffn: 14336, vocab: 128256},
    "llama-3-70b": {layers: 80, hidden: 8192, heads: 64, kv_heads: 8, ffn: 28672, vocab: 128256},
    "qwen2.5-7b": {layers: 28, hidden: 3584, heads: 28, kv_heads: 4, ffn: 18944, vocab: 152064},
    "mixtral-8x7b": {layers: 32, hidden: 4096, heads: 32, kv_heads: 8, ffn: 14336, vocab: 32000,
      experts: 8, topk: 2, expert_ffn: 14336},
    // its one shared expert of 5632 = 4 x 1408 rows: four shared experts of expert_ffn
    "qwen1.5-moe-a2.7b": {layers: 24, hidden: 2048, heads: 16, kv_heads: 16, ffn: 5632,
      vocab: 151936, experts: 60, topk: 4, shared: 4, expert_ffn: 1408},
  };
  // what an address written before a field existed meant by it: a GPT block, every head its
  // own K and V, no shared experts, sequence parallelism, gradients in their own dtype, and
  // (the logits were not counted then) the float32 loss
  const BEFORE = {kv_heads: "", ffn: "", shared: "", expert_ffn: "", sp: "on",
    reduce_dtype: "same", loss: "float32"};
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
      moe: () => "experts need tp = 1, and params with expert_params, or layers, hidden and ffn",
      topk: () => "topk: from 1 to experts",
      more: () => "expert_params cannot exceed params",
      needs: () => "needs layers, hidden, seq and batch",
      logits: () => "needs vocab, layers, hidden, seq and batch",
      stage: {first: "the first stage", middle: "a middle stage", last: "the last stage"},
      count1: (v) => `${v.toLocaleString("en-US")} (${(v / 1e9).toFixed(2)} billion)`,
      holds: "one GPU holds", sends: "sends", perStep: "per step",
      memory: "memory of one GPU", comm: "bytes sent per step",
      notHere: "on the last stage, not in this total",
      formula: (w, sp, t, v, kind) => `${kind}: ${t > 1 ? `${w} + ${sp} / ${t} = ` : ""}` +
        `${+v.toFixed(2)} · u per layer`,
      kinds: {gpt: "GPT layer", swiglu: "SwiGLU layer", moe: "MoE layer"},
      sp: {on: "sequence parallel", off: "tensor parallel without SP"},
      parts: {weights: ["W", "weights"], grads: ["G", "gradients"],
        optimizer: ["O", "optimizer state"], activations: ["A", "activations"],
        unsharded: ["S", "unsharded stage (weights and gradients)"],
        logits: ["L", "logits and float32 log-probabilities"],
        dp: ["dp", "data parallel"], tp: ["tp", "tensor parallel"], pp: ["pp", "pipeline"],
        cp: ["cp", "context parallel"], ep: ["ep", "expert parallel"]},
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
      moe: () => "专家需要 tp = 1，并且要么填 params 和 expert_params，要么填 layers、hidden 和 ffn",
      topk: () => "topk：取 1 到 experts 之间",
      more: () => "expert_params 不能大于 params",
      needs: () => "需要 layers、hidden、seq 和 batch",
      logits: () => "需要 vocab、layers、hidden、seq 和 batch",
      stage: {first: "第一个阶段", middle: "中间的阶段", last: "最后一个阶段"},
      count1: (v) => `${v.toLocaleString("en-US")}（${(v / 1e8).toFixed(1)} 亿）`,
      holds: "一块 GPU 占用", sends: "每步发出", perStep: "",
      memory: "一块 GPU 的显存", comm: "每步发出的字节",
      notHere: "在最后一个阶段，不计入这里的合计",
      formula: (w, sp, t, v, kind) => `${kind}：${t > 1 ? `${w} + ${sp} / ${t} = ` : ""}` +
        `${+v.toFixed(2)} · u（每层）`,
      kinds: {gpt: "GPT 层", swiglu: "SwiGLU 层", moe: "MoE 层"},
      sp: {on: "序列并行", off: "张量并行，不开序列并行"},
      parts: {weights: ["权", "权重"], grads: ["梯", "梯度"], optimizer: ["优", "优化器状态"],
        activations: ["激", "激活值"], unsharded: ["整", "未切分的整个阶段（权重和梯度）"],
        logits: ["L", "logits 和 float32 对数概率"],
        dp: ["dp", "数据并行"], tp: ["tp", "张量并行"], pp: ["pp", "流水线并行"],
        cp: ["cp", "上下文并行"], ep: ["ep", "专家并行"]},
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
    for (const f of ["layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "experts", "topk",
      "shared", "expert_ffn", "seq", "batch"]) {
      s[f] = opt(f, (n, t) => parseInteger(n, t, 0));
    }
    for (const f of ["micro", "gpus", "tp", "pp", "cp", "ep"]) {
      s[f] = parseInteger(f, (raw[f] || "").trim() || "1", 1);
    }
    for (const [f, choices] of Object.entries(CHOICES)) {
      const v = raw[f] === undefined ? choices[0] : raw[f];  // an address from before the field
      if (!choices.includes(v)) refuse(msg.choice(f, choices));
      s[f] = v;
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
  const shard = (part, n) => part.list
    ? part.list.reduce((a, [r, k]) => a + Math.ceil(r / n) * k, 0) : part.count / n;

  const swiglu = (s) => s.ffn > 0;  // a Llama block; else the GPT block of the tensor chapter
  const kvWidth = (s) => s.kv_heads && s.heads ? s.hidden / s.heads * s.kv_heads : s.hidden;
  const expertWidth = (s) => s.expert_ffn || s.ffn;
  const swigluMlp = (h, f, t) => [[f / t, h], [f / t, h], [h, f / t]];  // w1, w3; w2 (row-wise)

  // One block under tensor parallelism t (tensor.md#cost): q, k, v split by rows (k and v
  // kv_heads · head_dim rows each), o by columns. GPT: biases, two LayerNorms, a GeLU MLP of 4h.
  // SwiGLU (Llama): no biases, two RMSNorm weights, w1 and w3 of ffn rows, w2. With experts the
  // MLP is the router, the shared experts (dense) and the routed experts (expertLayer).
  function blockTensors(s, t) {
    const h = s.hidden, kv = kvWidth(s);
    const attn = swiglu(s)
      ? [[h / t, h], [kv / t, h], [kv / t, h], [h, h / t], [h, 1], [h, 1]]
      : [[h / t, h], [h / t, 1], [kv / t, h], [kv / t, 1], [kv / t, h], [kv / t, 1],
        [h, h / t], [h, 1], [h, 1], [h, 1], [h, 1], [h, 1]];
    if (s.experts) {
      let list = attn.concat([[s.experts, h]]);
      for (let i = 0; i < (s.shared || 0); i++) list = list.concat(swigluMlp(h, expertWidth(s), 1));
      return list;
    }
    const ff = 4 * h;
    return attn.concat(swiglu(s) ? swigluMlp(h, s.ffn, t)
      : [[ff / t, h], [ff / t, 1], [h, ff / t], [h, 1]]);
  }

  function expertLayer(s, n) {  // n routed experts of one layer
    let list = [];
    for (let i = 0; i < n; i++) list = list.concat(swigluMlp(s.hidden, expertWidth(s), 1));
    return list;
  }

  function shapedParts(s, t, p, e, stage) {  // the tensors of one GPU of stage `stage`
    const h = s.hidden, v = s.vocab || 0;
    let dense = [], experts = [];
    for (let i = 0; i < s.layers / p; i++) {
      dense = dense.concat(blockTensors(s, t));
      if (s.experts) experts = experts.concat(expertLayer(s, s.experts / e));
    }
    if (v && stage === 0) dense.push([v / t, h]);                  // embedding (vocab-parallel)
    if (v && stage === p - 1) {                                     // final norm, output layer
      dense = dense.concat(swiglu(s) ? [[h, 1]] : [[h, 1], [h, 1]], [[v / t, h]]);
    }
    return {dense, experts};
  }

  function modelCount(s) {  // parameters of the whole model, and those one token uses
    if (s.shapes) return {total: elements({list: s.shapes}), active: null};
    if (s.params !== null) {
      const ex = s.experts ? s.expert_params : 0;
      return {total: s.params, active: s.experts ? s.params - ex + ex * s.topk / s.experts : null};
    }
    const all = shapedParts(s, 1, 1, 1, 0);
    const dense = elements({list: all.dense}), ex = elements({list: all.experts});
    return {total: dense + ex, active: s.experts ? dense + ex * s.topk / s.experts : null};
  }

  function parts(s, stage, d) {  // the parts of the model on one GPU of pipeline stage `stage`
    const {tp: t, pp: p, cp: c, ep: e} = s;
    if (s.shapes) return [{list: s.shapes, group: d * c}];
    if (s.params !== null) {
      const experts = s.experts ? s.expert_params : 0;
      return [{count: (s.params - experts) / (t * p), group: d * c},
        {count: experts / (e * p), group: d * c / e}];
    }
    const {dense, experts} = shapedParts(s, t, p, e, stage);
    const out = [{list: dense, group: d * c}];
    if (experts.length) out.push({list: experts, group: d * c / e});
    return out;
  }

  // ZeRO 2 and 3 under a pipeline (pp > 1) are FSDP2 as torch.distributed.pipelining and
  // torchtitan run it: reshard_after_forward=False, gradient sync only after the last
  // micro-batch. The stage's weights stay gathered and its gradients accumulate unsharded
  // for the whole step: one all-gather and one reduce-scatter per step, no shard saved then.
  const pipelined = (s) => s.pp > 1 && s.zero >= 2;
  // gradients are held and reduced in reduce_dtype: float32 doubles bf16's 2 bytes
  const gradBytes = (s) => s.reduce_dtype === "float32" ? 4 : BYTES[s.precision].g;

  function memory(s, stage, d) {
    const B = BYTES[s.precision], o = B[s.optimizer], z = s.zero, g = gradBytes(s);
    let params = 0, grads = 0, optimizer = 0, unshardedW = 0, unshardedG = 0;
    for (const part of parts(s, stage, d)) {
      const whole = elements(part), own = shard(part, part.group);
      params += (z >= 3 ? own : whole) * B.w;
      grads += (z >= 2 ? own : whole) * g;
      optimizer += (z >= 1 ? own : whole) * o;
      if (pipelined(s) && part.group > 1) {  // the unsharded stage, beside the shards
        if (z >= 3) unshardedW += whole * B.w;
        unshardedG += whole * g;
      }
      if (part.list && s.optimizer === "adam") optimizer += 4 * part.list.length;  // step
    }
    return {params: params + unshardedW, grads: grads + unshardedG, optimizer, unshardedW,
      unshardedG};
  }

  function dataParallel(s, stage, d) {  // bytes one GPU sends per step for the ZeRO stage
    const B = BYTES[s.precision], m = s.micro, g = gradBytes(s);
    let sent = 0;
    for (const part of parts(s, stage, d)) {
      const n = part.group;
      if (n <= 1) continue;
      const whole = elements(part), other = (n - 1) * shard(part, n);  // ring: n - 1 chunks
      if (s.zero === 0) sent += 2 * (n - 1) / n * whole * g;  // all-reduce, once a step
      else if (s.zero === 1 || pipelined(s)) sent += other * (g + B.w);  // once a step:
      // a reduce-scatter of the gradients, an all-gather of the (updated) weights
      else if (s.zero === 2) sent += other * (m * g + B.w);    // gradients every micro-batch
      else sent += m * other * (2 * B.w + g);  // all-gather forward and backward, reduce-scatter
    }
    return sent;
  }

  // What one layer keeps for backward, in units of u = s·b·h 16-bit values (Korthikanti et al.
  // 2022, arXiv 2205.05198, eqs. 1, 2, 4: 34 s b h bytes for a GPT-3 layer), attention scores
  // not kept (FlashAttention, SDPA). Each term, in u:
  //   norms    the inputs of the two norms (LayerNorm or RMSNorm), 2 + 2
  //   inputs   the normed input of q, k, v (2) and of the MLP (2); with experts: the input the
  //            router and the shared experts read (2), and the copy sent to each of the k
  //            routed experts a token visits (2 k)
  //   dropout  GPT: the masks of the dropouts after attention and after the MLP, 1 byte each;
  //            none in a SwiGLU (Llama) layer
  //   q, kv, o Q (2); K and V at their own width, kv_heads / heads of Q's (4 g), as a kernel
  //            with grouped heads saves them; the attention's output, the input of o (2)
  //   mlp      GeLU (4h): its input and its output, 8 + 8; SwiGLU (F): w1's and w3's
  //            outputs, the SiLU's output and the product, 4 · 2 F / h; with experts, once per
  //            routed expert a token visits (k) and once per shared expert, of the expert width
  // Under tensor parallelism the q, kv, o and mlp terms are split by t; with sequence
  // parallelism also norms and dropout (DTensor keeps the gathered inputs whole: 4 + 30 / t for
  // GPT), without it neither (eq. 2: 10 + 24 / t).
  function layerUnits(s) {
    const h = s.hidden, t = s.tp, g = kvWidth(s) / h, k = s.experts ? s.topk : 0;
    const gelu = !swiglu(s);
    const mlpOne = gelu ? 16 : 8 * (s.experts ? expertWidth(s) : s.ffn) / h;
    const terms = {
      norms: 4,
      inputs: 2 + (s.experts ? 2 + 2 * k : 2),
      dropout: gelu ? (s.experts ? 1 + k : 2) : 0,
      q: 2, kv: 4 * g, o: 2,
      mlp: s.experts ? mlpOne * (k + (gelu ? 0 : s.shared || 0)) : mlpOne,
    };
    const all = Object.values(terms).reduce((a, b) => a + b, 0);
    const whole = t === 1 ? all : s.sp === "on" ? terms.inputs
      : terms.norms + terms.inputs + terms.dropout;
    return {terms, whole, split: all - whole, units: whole + (all - whole) / t,
      kind: s.experts ? "moe" : gelu ? "gpt" : "swiglu"};
  }

  function activations(s) {  // bytes kept for backward on the first stage
    const {layers: L, hidden: h, seq, batch: b, tp: t, pp: p, cp: c} = s;
    const u = b * (seq / c) * h * BYTES[s.precision].x / 2;  // s·b·h at 16 bits
    const perLayer = layerUnits(s).units * u;
    const inFlight = Math.min(s.micro, p) * L / p;  // 1F1B: min(m, p) micro-batches of L/p layers
    const input = t > 1 && s.sp === "on" ? 2 * u / t : 2 * u;  // a layer's input, kept
    return s.checkpointing === "none" ? inFlight * perLayer : inFlight * input + perLayer;
  }

  // The last stage's logits, b · (s / c) · vocab in the compute dtype, and the float32
  // log-probabilities cross_entropy's log_softmax keeps for backward (torchtitan computes the
  // loss on pred.float()); split by vocabulary over tp with loss_parallel; a chunked loss never
  // holds them whole (one chunk at a time: not counted).
  function logits(s) {
    if (s.loss === "chunked") return 0;
    const n = s.batch * (s.seq / s.cp) * s.vocab;
    return n * (BYTES[s.precision].x + 4) / (s.loss === "parallel" ? s.tp : 1);
  }

  function activationTraffic(s) {  // TP, CP and EP bytes per step; PP per micro-batch boundary
    const {hidden: h, seq, batch: b, tp: t, pp: p, cp: c, ep: e, micro: m} = s;
    const x = BYTES[s.precision].x, L = s.layers / p, again = s.checkpointing === "full";
    const act = b * (seq / c) * h * x;  // one layer's input on one GPU, whole
    const out = {tp: 0, cp: 0, ep: 0, boundary: act / t};
    if (t > 1) out.tp = L * m * (again ? 6 : 4) * 2 * (t - 1) / t * act;
    if (c > 1) {  // K and V all-gathered, forward (twice with recomputation) and backward;
      const kv = 2 * b * (seq / c) * (kvWidth(s) / t);  // their fp32 gradients round the ring
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
      const counts = s.params !== null && s.expert_params !== null;
      if (t > 1 || s.shapes || !(counts || (s.params === null && shaped && s.ffn > 0))) {
        refuse(msg.moe());
      }
      if (!(s.topk >= 1 && s.topk <= s.experts)) refuse(msg.topk());
      if (counts && s.expert_params > s.params) refuse(msg.more());
      if (s.experts % e) refuse(msg.divides("ep", "experts"));
      if ((d * c) % e) refuse(msg.divides("ep", "gpus / (tp × pp)"));
    }
    if (shaped) {
      if (s.layers % p) refuse(msg.divides("pp", "layers"));
      if (s.hidden % t) refuse(msg.divides("tp", "hidden"));
      if (s.heads && s.hidden % s.heads) refuse(msg.divides("heads", "hidden"));
      if (s.heads && s.heads % t) refuse(msg.divides("tp", "heads"));
      if (s.kv_heads && s.heads && s.heads % s.kv_heads) refuse(msg.divides("kv_heads", "heads"));
      if (s.kv_heads && s.kv_heads % t) refuse(msg.divides("tp", "kv_heads"));
      if (!s.shapes && s.params === null && (s.vocab || 0) % t) refuse(msg.divides("tp", "vocab"));
      if (s.ffn && s.ffn % t) refuse(msg.divides("tp", "ffn"));
    }
    if (s.seq && s.seq % c) refuse(msg.divides("cp", "seq"));

    const r = memory(s, 0, d);
    r.unsharded = r.unshardedW + r.unshardedG;
    r.model = modelCount(s);
    const known = shaped && s.seq > 0 && s.batch > 0;
    r.activations = known ? activations(s) : null;
    r.layer = known ? layerUnits(s) : null;
    r.logits = known && s.vocab > 0 ? logits(s) : null;
    r.logitsHere = p === 1;  // the first stage is the last
    r.total = r.params + r.grads + r.optimizer + (r.activations || 0)
      + (r.logitsHere ? r.logits || 0 : 0);
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

  // A stacked bar: one segment per part, as wide as its share, with its short name inside
  // (when it fits) and in the legend beside its full name and figure; the bar's text
  // alternative lists them all. Colour is never the only label.
  function bar(root, which, title, items) {
    const el = root.querySelector(`[data-bar="${which}"]`);
    const legend = root.querySelector(`[data-legend="${which}"]`);
    if (!el) return;
    const shown = items.filter(([, v]) => v > 0);
    const sum = shown.reduce((a, [, v]) => a + v, 0);
    el.replaceChildren(...shown.map(([key, v]) => {
      const seg = document.createElement("span");
      const share = v / sum;
      seg.dataset.part = key;
      seg.style.width = `${(100 * share).toFixed(3)}%`;
      seg.textContent = share >= 0.07 ? msg.parts[key][0] : "";
      seg.title = `${msg.parts[key][1]}: ${human(v)}`;
      return seg;
    }));
    el.setAttribute("aria-label", shown.length ? `${title}: ${shown.map(([key, v]) =>
      `${msg.parts[key][1]} ${human(v)} (${Math.round(100 * v / sum)}%)`).join(", ")}` : title);
    if (legend) {
      legend.replaceChildren(...shown.map(([key, v]) => {
        const li = document.createElement("li");
        const sw = document.createElement("span");
        sw.dataset.part = key;
        sw.textContent = msg.parts[key][0];
        li.append(sw, ` ${msg.parts[key][1]} ${human(v)}`);
        return li;
      }));
    }
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
    for (const k of ["params", "grads", "unsharded", "optimizer", "activations", "total", "comm"]) {
      set(`[data-result="${k}"]`, r && r[k], msg.needs());
    }
    set('[data-result="logits"]', r && r.logits, msg.logits());
    const here = root.querySelector("[data-logits-here]");
    if (here) here.textContent = r && r.logits !== null && !r.logitsHere ? msg.notHere : "";
    for (const k of ["dp", "tp", "pp", "cp", "ep"]) {
      set(`[data-comm="${k}"]`, r && r.parts[k], msg.needs());
    }
    for (const k of ["total", "active"]) {
      const el = root.querySelector(`[data-count="${k}"]`);
      const v = r && r.model[k];
      if (el) el.textContent = v === null || v === undefined ? "—" : msg.count1(Math.round(v));
    }
    const formula = root.querySelector("[data-formula]");
    if (formula) {
      const l = r && r.layer, s = l && read(raw);
      formula.textContent = l ? `${msg.formula(+l.whole.toFixed(2), +l.split.toFixed(2), s.tp,
        l.units, msg.kinds[l.kind])}${s.tp > 1 ? `, ${msg.sp[s.sp]}` : ""}` : "";
    }
    const stage = root.querySelector("[data-stage]");
    if (stage) stage.textContent = r && r.stage ? msg.stage[r.stage] : "";
    for (const [k, v] of [["total", r && r.total], ["comm", r && r.comm]]) {
      const el = root.querySelector(`[data-headline="${k}"]`);
      if (el) el.textContent = v === null || v === undefined ? "—" : human(v);
    }
    bar(root, "memory", msg.memory, r ? [["weights", r.params - r.unshardedW],
      ["grads", r.grads - r.unshardedG], ["optimizer", r.optimizer],
      ["activations", r.activations || 0], ["unsharded", r.unshardedW + r.unshardedG],
      ["logits", r.logitsHere ? r.logits || 0 : 0]] : []);
    bar(root, "comm", msg.comm, r && r.comm !== null
      ? ["dp", "tp", "pp", "cp", "ep"].map((k) => [k, r.parts[k]]) : []);
    root.dataset.state = r ? "ok" : "refused";
  }

  // a preset's value of a model input: its shape, else the form's empty default
  const presetValue = (name, f) => String(PRESETS[name][f] ?? {experts: 0, topk: 1}[f] ?? "");
  function matchPreset(form) {  // the preset whose shapes the model's inputs hold, or ""
    return Object.keys(PRESETS).find((name) => MODEL.every(
      (f) => form.elements[f].value.trim() === presetValue(name, f))) || "";
  }

  function init() {
    const root = document.querySelector("[data-calculator]");
    if (!root) return;
    msg = MESSAGES[document.documentElement.lang] || MESSAGES.en;
    const form = root.querySelector("form");
    const query = new URLSearchParams(window.location.search);
    const linked = FIELDS.some((f) => query.has(f));  // an address that holds the inputs
    for (const f of FIELDS) {
      if (query.has(f) && form.elements[f]) form.elements[f].value = query.get(f);
      else if (linked && f in BEFORE) form.elements[f].value = BEFORE[f];
    }
    const preset = form.elements.preset;
    const raw = () => Object.fromEntries(FIELDS.map((f) => [f, form.elements[f].value]));
    const update = () => {
      const values = raw();
      show(form, root, values);
      if (preset) preset.value = matchPreset(form);
      const q = new URLSearchParams(values).toString().replace(/%2C/g, ",");
      history.replaceState(null, "", `${window.location.pathname}?${q}${window.location.hash}`);
    };
    form.addEventListener("input", (ev) => { if (ev.target !== preset) update(); });
    form.addEventListener("change", (ev) => {
      if (preset && ev.target === preset && preset.value) {
        for (const f of MODEL) form.elements[f].value = presetValue(preset.value, f);
      }
      update();
    });
    form.addEventListener("submit", (ev) => ev.preventDefault());
    show(form, root, raw());  // the address stays as it came until the reader changes something
    if (preset) preset.value = matchPreset(form);
  }

  window.memoryCalculator = {compute, read, layerUnits, modelCount, PRESETS};  // for the console
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init, {once: true});
  } else init();
})();
