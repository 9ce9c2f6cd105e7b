"""Plan Llama 2 for 64 or 512 GPUs in one process with torch's fake process group."""

import argparse
import sys
from collections import Counter

import torch
import torch.distributed as dist
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import ColwiseParallel as Col
from torch.distributed.tensor.parallel import RowwiseParallel as Row
from torch.distributed.tensor.parallel import (PrepareModuleInput, SequenceParallel,
                                               loss_parallel, parallelize_module)
from torch.utils._python_dispatch import TorchDispatchMode

from plan_model import LLAMA2, Stage  # Llama 2's blocks, one pipeline stage's part

# --8<-- [start:plan]
p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
p.add_argument("--model", choices=LLAMA2, default="7b")
for arg, default in (("pp", 1), ("dp", 8), ("tp", 8), ("rank", 0)):
    p.add_argument(f"--{arg}", type=int, default=default)
a = p.parse_args()
c, world = LLAMA2[a.model], a.pp * a.dp * a.tp
if c["layers"] % a.pp or c["kv"] % a.tp or 16 % a.tp or not 0 <= a.rank < world:
    sys.exit(f"--pp must divide {c['layers']}, --tp {c['kv']} and 16 tokens, "
             f"and --rank be < {world}")
dist.init_process_group("fake", rank=a.rank, world_size=world)  # torch makes its store
mesh = init_device_mesh("cpu", (a.pp, a.dp, a.tp), mesh_dim_names=("pp", "dp", "tp"))
pp, dp, tp = (mesh[d].get_local_rank() for d in ("pp", "dp", "tp"))
with torch.device("meta"):  # shapes without memory, even for 70B
    model = Stage(c, pp, a.pp)
seq, whole = Shard(1), Replicate()  # between blocks each rank keeps 1/tp of the tokens
BLOCK = {"attn_norm": SequenceParallel(), "mlp_norm": SequenceParallel(),
         "attn": PrepareModuleInput(input_layouts=seq, desired_input_layouts=whole),
         "mlp": PrepareModuleInput(input_layouts=seq, desired_input_layouts=whole),
         "attn.wq": Col(), "attn.wk": Col(), "attn.wv": Col(),
         "attn.wo": Row(output_layouts=seq), "mlp.w1": Col(), "mlp.w3": Col(),
         "mlp.w2": Row(output_layouts=seq)}  # torchtitan's Llama plan
OUTER = {"embed": Row(input_layouts=whole, output_layouts=seq),  # token ids are whole
         "norm": SequenceParallel(),  # the head keeps its logits split by vocabulary:
         "head": Col(input_layouts=seq, output_layouts=Shard(-1),
                     use_local_output=False)}
for block in model.layers.values():  # TP inside each block, then FSDP over TP's shards
    parallelize_module(block, mesh["tp"], BLOCK)
    fully_shard(block, mesh=mesh["dp"])
outer = [k for k in OUTER if getattr(model, k) is not None]
parallelize_module(model, mesh["tp"], {k: OUTER[k] for k in outer})
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
        if any(issubclass(t, DTensor) for t in types):  # DTensor first: then the mode
            return NotImplemented  # sees the collectives inside its ops (loss_parallel)
        if func.namespace in ("c10d", "_c10d_functional"):  # FSDP's, DTensor's
            self.calls[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


with FakeTensorMode(allow_non_fake_inputs=True), loss_parallel():  # no data
    model.to_empty(device="cpu")  # meta -> fake: still no memory
    x = (torch.randint(0, c["vocab"], (1, 16)) if model.embed is not None  # from the
         else torch.randn(1, 16 // a.tp, c["dim"], requires_grad=True))  # stage before
    with Collectives():  # one step on 16 tokens: forward, backward
        out = model(x, torch.randint(0, c["vocab"], (1, 16)))
        out.backward(None if model.head is not None else torch.ones_like(out))
    adam = torch.optim.Adam(model.parameters(), foreach=False)  # fastest on fakes
    adam.step()  # creates Adam's state, sharded as the parameters are
# --8<-- [end:step]


# --8<-- [start:predict]
CUT = {"wq": 0, "wk": 0, "wv": 0, "w1": 0, "w3": 0, "embed": 0, "head": 0,  # by rows,
       "wo": 1, "w2": 1}  # or by columns; the norms are not cut by TP


def piece(name, shape):  # this rank's numel, cut as torch.chunk cuts (ceil(n / k) each)
    shape, m = list(shape), name.split(".")[-2]  # by TP, then by FSDP along dim 0
    for d, k, i in [(CUT.get(m), a.tp, tp)] * (m in CUT) + [(0, a.dp, dp)]:
        size = -(-shape[d] // k)
        shape[d] = max(0, min(size, shape[d] - i * size))  # the last ones get less
    return torch.Size(shape).numel()


def report(what, predicted, counted, unit):  # "1 call", "2 calls"
    unit = unit[:-1] if unit == "calls" and counted == predicted == 1 else unit
    print(f"{what}: predicted {predicted:,} {unit}, counted {counted:,} {unit}")
    failed.extend([what] if predicted != counted else [])


mine, failed = sum(piece(n, w.shape) for n, w in model.named_parameters()), []
n, L = Collectives.calls, len(model.layers)
root, embed, head = int(bool(outer)), int("embed" in outer), int("head" in outer)
local = [(w.to_local(), w.grad.to_local()) for w in model.parameters()]
moments = [s[k].to_local() for s in adam.state.values() for k in s if k != "step"]
report("parameters per rank", 4 * mine, sum(w.nbytes for w, _ in local), "B")
report("gradients per rank", 4 * mine, sum(g.nbytes for _, g in local), "B")
report("Adam moments per rank", 8 * mine, sum(t.nbytes for t in moments), "B")
# FSDP gathers each block in forward and in backward, the root once; reduces each once
report("FSDP all-gathers per step", 2 * L + root, n["_allgather_base_"], "calls")
report("FSDP reduce-scatters per step", L + root, n["_reduce_scatter_base_"], "calls")
# TP, each block: before attention and MLP the tokens are all-gathered, after them
# reduce-scattered; backward mirrors both. Embedding: its output reduce-scattered, and
# all-gathered back in backward; the head the other way round
tp_ = 4 * L + embed + head
report("TP all-gathers per step", tp_, n["all_gather_into_tensor"], "calls")
report("TP reduce-scatters per step", tp_, n["reduce_scatter_tensor"], "calls")
# the norms' weight gradients (whole on every TP rank, summed over its tokens), the
# final norm's too; loss_parallel's maximum, sum of exponentials and target logits
report("TP all-reduces per step", 2 * L + head + 3 * head, n["all_reduce"], "calls")
sys.exit(f"predicted != counted: {', '.join(failed)}" if failed else None)
# --8<-- [end:predict]
