"""torch's ring attention with both rotate methods, on the CPU with gloo: the private
_templated_ring_attention (what context_parallel() runs on GPUs) called with the CPU's
flash kernel; output and gradients compared with full causal attention, and per rank the
K/V bytes that arrive and the most held at once, predicted and counted.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \
         snippets/context/cp_rotate.py
"""

import argparse
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.tensor.experimental._attention import set_rotate_method
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode

# private, torch 2.13: the ring that context_parallel() runs with CUDA's kernels
from torch.distributed.tensor.experimental._context_parallel._attention import (
    _templated_ring_attention as ring_forward,
    _templated_ring_attention_backward as ring_backward)

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun --standalone "
             "--nproc-per-node=2 snippets/context/cp_rotate.py")
B, H, S, D = 2, 4, 48, 8  # batch, heads, sequence length, head dimension
world = int(os.environ["WORLD_SIZE"])
if world < 2 or S % (2 * world):
    sys.exit(f"run with 2, 3, 4, 6, 8, 12 or 24 processes (2 equal chunks of the {S} "
             f"positions per rank), not {world}" if os.environ["RANK"] == "0" else 2)
# The CPU's flash kernel and gloo, whatever the machine has
dist.init_process_group("gloo", timeout=timedelta(seconds=60))
rank = dist.get_rank()
aten = torch.ops.aten


def show(*text):
    if rank == 0:
        print(*text)


# --8<-- [start:count]
class Arrivals(TorchDispatchMode):
    """What the ring's collectives return: bytes from other ranks, most kept at once."""

    def __init__(self):
        super().__init__()
        self.calls, self.arrived, self.alive, self.most = {}, 0, [], 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.__name__.split(".")[0]  # torch.ops._c10d_functional.<name>
        if name in ("all_gather_into_tensor", "all_to_all_single"):
            self.calls[name] = self.calls.get(name, 0) + 1
            own = (args[0].nbytes if name == "all_gather_into_tensor"  # own copy
                   else args[1][rank] * out.element_size())  # split from itself
            self.arrived += out.nbytes - own
            self.alive.append((StorageWeakRef(out.untyped_storage()), out.nbytes))
        self.most = max(self.most, sum(n for ref, n in self.alive if not ref.expired()))
        return out
# --8<-- [end:count]


# --8<-- [start:run]
torch.manual_seed(0)  # the same tensors on every rank
q, k, v, dout = torch.randn(4, B, H, S, D)
full = [t.double().requires_grad_() for t in (q, k, v)]  # reference in float64
ref = F.scaled_dot_product_attention(*full, is_causal=True)
ref.backward(dout.double())
refs = [ref] + [t.grad for t in full]
mine = (rank, 2 * world - 1 - rank)  # head-tail: chunks r and 2n-1-r of 2n


def shard(t):
    return torch.cat([t.chunk(2 * world, dim=2)[i] for i in mine], dim=2)


lq, lk, lv, ldout = (shard(t) for t in (q, k, v, dout))
kv = 2 * lk.nbytes  # one rank's K and V block, float32
predicted = {"allgather": ((world - 1) * kv, world * kv),  # arrived, most alive
             "alltoall": ((world - 1) * kv, min(3, world - 1) * kv)}
show(f"{world} processes, {S} positions in {2 * world} chunks; rank 0 holds chunks "
     f"{mine[0]} and {mine[1]}")
costs, worst = [], torch.zeros(())
for method in ("allgather", "alltoall"):
    set_rotate_method(method)  # a global setting, read by each ring call
    with Arrivals() as fwd:  # group, seq dim, op, q, k, v; head-tail load balance on
        out, lse = ring_forward(dist.group.WORLD, 2,
                                aten._scaled_dot_product_flash_attention_for_cpu,
                                lq, lk, lv, is_causal=True)[:2]
    with Arrivals() as bwd:
        grads = ring_backward(  # the CPU kernel's backward, and its keyword names
            dist.group.WORLD, 2,
            aten._scaled_dot_product_flash_attention_for_cpu_backward,
            grad_out=ldout, grad_out_name="grad_out", query=lq, key=lk, value=lv,
            out=out, logsumexp=lse, is_causal=True, dropout_p=0.0)[:3]
    for got, want in zip([out, *grads], refs):  # relative to the reference
        want = shard(want)
        worst = torch.maximum(worst, (got - want).abs().max() / want.abs().max())
    show(f"{method}: forward {fwd.calls};\n  backward {bwd.calls}")
    costs += [(f"K/V arriving per rank, {method}", predicted[method][0], fwd.arrived),
              (f"K/V held at once per rank, {method}", predicted[method][1], fwd.most)]
# --8<-- [end:run]

# --8<-- [start:report]
dist.all_reduce(worst, op=dist.ReduceOp.MAX)  # the worst rank's
ok = worst.item() < 1e-5
show(f"max |ring - full attention| / max |full|, output and gradients, both "
     f"methods:\n  {worst.item():.1e} "
     + ("(< 1e-5: equal up to float32 round-off)" if ok else "(>= 1e-5: NOT equal)"))
for what, p, n in costs:
    show(f"{what}: predicted {p:,} B, counted {n:,} B")
failed = [what for what, p, n in costs if p != n]
dist.destroy_process_group()
if failed or not ok:
    sys.exit(f"predicted != counted or ring != full attention: {', '.join(failed)}")
# --8<-- [end:report]
