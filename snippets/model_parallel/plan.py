"""Plan Llama 2 for 64 or 512 GPUs in one process with torch's fake process group."""

import argparse
import sys
from collections import Counter

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import Replicate
from torch.distributed.tensor.parallel import ColwiseParallel as Col
from torch.distributed.tensor.parallel import RowwiseParallel as Row, parallelize_module
from torch.testing._internal.distributed.fake_pg import FakeStore
from torch.utils._python_dispatch import TorchDispatchMode

# --8<-- [start:model]
# Llama 2's shapes: config.json of meta-llama/Llama-2-7b-hf and Llama-2-70b-hf
LLAMA2 = {"7b": dict(dim=4096, layers=32, heads=32, kv=32, hidden=11008, vocab=32000),
          "70b": dict(dim=8192, layers=80, heads=64, kv=8, hidden=28672, vocab=32000)}


class Block(nn.Module):  # attention and SwiGLU MLP (rotary embeddings have no weights)
    def __init__(self, dim, heads, kv, hidden, **_):
        super().__init__()
        self.hd = dim // heads  # 128; 70B: 8 key/value heads for 64 query heads (GQA)
        self.attn_norm, self.mlp_norm = nn.RMSNorm(dim), nn.RMSNorm(dim)
        for name, i, o in (("wq", dim, dim), ("wk", dim, kv * self.hd), ("wv", dim,
                           kv * self.hd), ("wo", dim, dim), ("w1", dim, hidden),
                           ("w3", dim, hidden), ("w2", hidden, dim)):
            setattr(self, name, nn.Linear(i, o, bias=False))

    def forward(self, x):
        h = self.attn_norm(x)  # -1: as many heads as this rank has
        q, k, v = (w(h).unflatten(-1, (-1, self.hd)).transpose(1, 2)
                   for w in (self.wq, self.wk, self.wv))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.wo(a.transpose(1, 2).flatten(2))
        h = self.mlp_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Stage(nn.Module):  # one pipeline stage's layers (all of them if one stage)
    def __init__(self, c, stage, stages):
        super().__init__()
        n, last = c["layers"] // stages, stage == stages - 1
        s = n * stage  # its layers: s to s + n - 1
        self.embed = nn.Embedding(c["vocab"], c["dim"]) if stage == 0 else None
        self.layers = nn.ModuleDict({str(i): Block(**c) for i in range(s, s + n)})
        self.norm = nn.RMSNorm(c["dim"]) if last else None
        self.head = nn.Linear(c["dim"], c["vocab"], bias=False) if last else None

    def forward(self, x, targets):  # token ids, or the previous stage's activations
        x = self.embed(x) if self.embed is not None else x
        for block in self.layers.values():
            x = block(x)
        return x if self.head is None else F.cross_entropy(  # x: for the next stage
            self.head(self.norm(x)).flatten(0, 1), targets.flatten())
# --8<-- [end:model]


# --8<-- [start:plan]
p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
p.add_argument("--model", choices=LLAMA2, default="7b")
for arg, default in (("pp", 1), ("dp", 8), ("tp", 8), ("rank", 0)):
    p.add_argument(f"--{arg}", type=int, default=default)
a = p.parse_args()
c, world = LLAMA2[a.model], a.pp * a.dp * a.tp
if c["layers"] % a.pp or c["kv"] % a.tp or not 0 <= a.rank < world:
    sys.exit(f"--pp must divide {c['layers']}, --tp {c['kv']}, and --rank be < {world}")
dist.init_process_group("fake", store=FakeStore(), rank=a.rank, world_size=world)
mesh = init_device_mesh("cpu", (a.pp, a.dp, a.tp), mesh_dim_names=("pp", "dp", "tp"))
pp, dp, tp = (mesh[d].get_local_rank() for d in ("pp", "dp", "tp"))
with torch.device("meta"):  # shapes without memory, even for 70B
    model = Stage(c, pp, a.pp)
PLAN = {"wq": Col(), "wk": Col(), "wv": Col(), "wo": Row(), "w1": Col(), "w3": Col(),
        "w2": Row(), "embed": Row(input_layouts=Replicate()),  # token ids are whole
        "head": Col(output_layouts=Replicate())}
for block in model.layers.values():  # TP inside each block, then FSDP over TP's shards
    parallelize_module(block, mesh["tp"], {k: PLAN[k] for k in PLAN if k[0] == "w"})
    fully_shard(block, mesh=mesh["dp"])
outer = [k for k in ("embed", "head") if getattr(model, k) is not None]
parallelize_module(model, mesh["tp"], {k: PLAN[k] for k in outer})
fully_shard(model, mesh=mesh["dp"])  # the root: embedding, final norm, head
names, P = [*model.layers], sum(w.numel() for w in model.parameters())
print(f"Llama 2 {a.model.upper()}, {world} ranks = "
      f"pp {a.pp} × dp {a.dp} × tp {a.tp}; "
      f"rank {a.rank} = (pp {pp}, dp {dp}, tp {tp})\nits stage: {P:,} parameters in "
      f"layers {names[0]}-{names[-1]}{''.join(', ' + k for k in outer)}\n"
      f"layers.{names[0]}")
for name, w in model.layers[names[0]].named_parameters():  # a placement per mesh dim
    on = f"{'/'.join(w.device_mesh.mesh_dim_names)}: {' '.join(map(str, w.placements))}"
    print(f"  {name} {tuple(w.shape)} -> {tuple(w.to_local().shape)} on {on}")
# --8<-- [end:plan]


# --8<-- [start:step]
class Collectives(TorchDispatchMode):  # sees every op that runs: counts the collectives
    calls = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace in ("c10d", "_c10d_functional"):  # FSDP's, DTensor's
            self.calls[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


with FakeTensorMode(allow_non_fake_inputs=True):  # tensors with shapes and no data
    model.to_empty(device="cpu")  # meta -> fake: still no memory
    x = (torch.randint(0, c["vocab"], (1, 16)) if model.embed is not None
         else torch.randn(1, 16, c["dim"], requires_grad=True))  # from the stage before
    with Collectives():  # one step on 16 tokens: forward, backward
        out = model(x, torch.randint(0, c["vocab"], (1, 16)))
        out.backward(None if model.head is not None else torch.ones_like(out))
    adam = torch.optim.Adam(model.parameters(), foreach=False)  # fastest on fakes
    adam.step()  # creates Adam's state, sharded as the parameters are
# --8<-- [end:step]


# --8<-- [start:predict]
def piece(name, shape):  # this rank's numel, cut as torch.chunk cuts (ceil(n / k) each)
    shape, m = list(shape), name.split(".")[-2]  # by TP (row-wise: dim 1, else 0), FSDP
    for d, k, i in [(int(m in ("wo", "w2")), a.tp, tp)] * (m in PLAN) + [(0, a.dp, dp)]:
        size = -(-shape[d] // k)
        shape[d] = max(0, min(size, shape[d] - i * size))  # the last ones get less
    return torch.Size(shape).numel()


def report(what, predicted, counted, unit):
    print(f"{what}: predicted {predicted:,} {unit}, counted {counted:,} {unit}")
    failed.extend([what] if predicted != counted else [])


mine, failed = sum(piece(n, w.shape) for n, w in model.named_parameters()), []
n, L = Collectives.calls, len(model.layers)
root, head = int(bool(outer)), int("head" in outer)  # a middle stage's root: none
local = [(w.to_local(), w.grad.to_local()) for w in model.parameters()]
moments = [s[k].to_local() for s in adam.state.values() for k in s if k != "step"]
report("parameters per rank", 4 * mine, sum(w.nbytes for w, _ in local), "B")
report("gradients per rank", 4 * mine, sum(g.nbytes for _, g in local), "B")
report("Adam moments per rank", 8 * mine, sum(t.nbytes for t in moments), "B")
# FSDP gathers each block in forward and in backward, the root once; reduces each once
report("FSDP all-gathers per step", 2 * L + root, n["_allgather_base_"], "calls")
report("FSDP reduce-scatters per step", L + root, n["_reduce_scatter_base_"], "calls")
# TP all-reduces outputs of wo, w2, embed; input gradients of wq, wk, wv, w1, w3, head
report("TP all-reduces per step", 7 * L + len(outer), n["all_reduce"], "calls")
report("TP all-gathers per step", head, n["all_gather_into_tensor"], "calls")  # logits
sys.exit(f"predicted != counted: {', '.join(failed)}" if failed else None)
# --8<-- [end:predict]
