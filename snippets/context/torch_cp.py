"""torch's own context_parallel() on the CPU with gloo: which positions each rank
holds, the output and gradients compared with attention over the whole sequence, the
collectives DTensor issues on this path, and what is_causal=True does on it.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \
         snippets/context/torch_cp.py
"""

import argparse
import contextlib
import os
import sys
import textwrap
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.experimental import context_parallel
from torch.distributed.tensor.experimental._attention import context_parallel_unshard
from torch.nn.attention import SDPBackend, sdpa_kernel

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun --standalone "
             "--nproc-per-node=2 snippets/context/torch_cp.py")
B, H, S, D = 2, 4, 48, 8  # batch, heads, sequence length, head dimension
world = int(os.environ["WORLD_SIZE"])
if world < 2 or S % (2 * world):
    sys.exit(f"run with 2, 3, 4, 6, 8, 12 or 24 processes (2 equal chunks of the {S} "
             f"positions per rank), not {world}" if os.environ["RANK"] == "0" else 2)
# This program shows the CPU path, whatever the machine has: the CPU and gloo
dist.init_process_group("gloo", timeout=timedelta(seconds=60))
rank = dist.get_rank()
mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("cp",))


def show(*text):
    if rank == 0:
        print(*text)


def spans(positions):  # [0, 1, 2, 10, 11] -> "0-2, 10-11"
    runs, start = [], positions[0]
    for a, b in zip(positions, positions[1:] + [None]):
        if b != a + 1:
            runs.append(f"{start}-{a}")
            start = b
    return ", ".join(runs)


def collectives(mode):  # {'all_gather_into_tensor': 2, ...}
    return {str(op).split(".")[-1]: n for op, n in mode.get_comm_counts().items()}


show(f"{world} processes: gloo on cpu (the CPU path, on purpose)")
# --8<-- [start:run]
torch.manual_seed(0)  # the same tensors on every rank
q, k, v, dout = torch.randn(4, B, H, S, D, dtype=torch.float64)
full = [t.clone().requires_grad_() for t in (q, k, v)]
ref = F.scaled_dot_product_attention(*full)  # full attention, no mask
ref.backward(dout)

bufs = [t.clone() for t in (q, k, v, dout)] + [torch.arange(S)[None]]  # + positions
with sdpa_kernel(SDPBackend.MATH), context_parallel(  # restoring q, k, v at the end
        mesh, buffers=bufs, buffer_seq_dims=[2, 2, 2, 2, 1],  # would fail: they need
        no_restore_buffers=set(bufs)):  # grad here ("cannot resize variables that ...")
    cq, ck, cv, cdout, pos = bufs  # sharded in place: this rank's positions only
    show(f"inside context_parallel(): q {tuple(cq.shape)} on each rank, of "
         f"{(B, H, S, D)};\n  rank 0 holds positions {spans(pos[0].tolist())}")
    for t in (cq, ck, cv):
        t.requires_grad_()
    with CommDebugMode() as fwd:
        out = F.scaled_dot_product_attention(cq, ck, cv)  # patched by context_parallel
    with CommDebugMode() as bwd:
        out.backward(cdout)
    got = context_parallel_unshard(mesh, [out.detach(), cq.grad, ck.grad, cv.grad],
                                   [2, 2, 2, 2])  # gathered, in the original order
diff = max((a - b).abs().max() for a, b in zip(got, [ref] + [t.grad for t in full]))
show(f"output: {type(out).__name__} {tuple(out.shape)}\nforward collectives: "
     f"{collectives(fwd)}; backward:\n  {collectives(bwd)}")
verdict = ("< 1e-12: equal up to float64 round-off" if diff < 1e-12
           else ">= 1e-12: NOT equal, more than round-off")  # what the figure shows
show(f"max |context_parallel - full attention| over output and gradients: "
     f"{diff.item():.1e}\n  ({verdict})")
# --8<-- [end:run]

# --8<-- [start:causal]
for kernel in ("math", "the CPU's own"):
    bufs = [t.clone() for t in (q, k, v)]
    chosen = (sdpa_kernel(SDPBackend.MATH) if kernel == "math"
              else contextlib.nullcontext())
    with chosen, context_parallel(mesh, buffers=bufs, buffer_seq_dims=[2, 2, 2]):
        try:
            F.scaled_dot_product_attention(*bufs, is_causal=True)
            outcome = "ran"
        except Exception as e:  # noqa: BLE001  what torch raises is the point here
            outcome = f"{type(e).__name__}:\n" + textwrap.fill(  # to 80 columns
                str(e).splitlines()[0], 80, initial_indent="  ", subsequent_indent="  ",
                break_long_words=False, break_on_hyphens=False)
    show(f"is_causal=True, {kernel} kernel: {outcome}")
# --8<-- [end:causal]
dist.destroy_process_group()
if not diff < 1e-12:
    sys.exit("context_parallel() != full attention")
