"""Asynchronous (micro-pipelined) tensor parallelism, taken apart on the CPU: the two
fused operations torch's async TP puts in place of a collective and its matmul, written
with point-to-point sends in their order, compared with the collective and the matmul
they replace, with the bytes that arrive and the matmuls counted; then the switches that
turn the real fusion on, read from this torch.

Run: OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \
         snippets/model_parallel/async_tp.py
"""

import argparse
import os
import sys
import warnings
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
if "LOCAL_RANK" not in os.environ:
    sys.exit("start me with torchrun, e.g.: OMP_NUM_THREADS=1 torchrun --standalone "
             "--nproc-per-node=2 snippets/model_parallel/async_tp.py")
S, H, F = 24, 16, 32  # positions, features, MLP width (this rank's column shard of it)
world = int(os.environ["WORLD_SIZE"])
if world < 2 or S % world:
    sys.exit(f"run with 2, 3, 4, 6, 8, 12 or 24 processes (equal shards of {S} "
             f"positions), not {world}")
# The decomposition, not the speed: gloo on the CPU, whatever the machine has
dist.init_process_group("gloo", timeout=timedelta(seconds=60))
rank = dist.get_rank()


def show(*text):
    if rank == 0:
        print(*text)


show(f"{world} processes: gloo on cpu (the decomposition, not the speed)")


class CountMatmuls(TorchDispatchMode):  # every aten.mm the dispatcher sees
    def __init__(self):
        super().__init__()
        self.mm = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.mm += func is torch.ops.aten.mm.default
        return func(*args, **(kwargs or {}))


def exchange(send, to, recv_from, shape, arrived):  # one step: send one, receive one
    got = torch.empty(shape)
    ops = [dist.P2POp(dist.isend, send.contiguous(), to),
           dist.P2POp(dist.irecv, got, recv_from)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    arrived.append(got.numel() * got.element_size())
    return got


def relative(got, want):
    return ((got - want).abs().max() / want.abs().max()).item()


torch.manual_seed(0)  # the same tensors on every rank; each takes its own part
x = torch.randn(S, H)  # the activation in sequence-parallel layout: split by position
w_up = torch.randn(world, H, F)[rank]  # column-wise: this rank's F columns
w_down = torch.randn(world, F, H)[rank]  # row-wise: this rank's F rows
x_mine = x.chunk(world)[rank].contiguous()
rows = S // world
# --8<-- [start:gather]
# all-gather, then matmul: what sequence parallelism does before a column-wise layer
whole = torch.empty(S, H)
dist.all_gather_single(whole, x_mine)  # all_gather_into_tensor before 2.13
want_up = whole @ w_up
# micro-pipelined: multiply this rank's rows first, then each shard as it arrives
got_up, arrived_ag = torch.empty(S, F), []
with CountMatmuls() as mm_ag:
    got_up[rank * rows:(rank + 1) * rows] = x_mine @ w_up
    for step in range(1, world):  # rank r+step's shard arrives, r's leaves to r-step
        src = (rank + step) % world
        shard = exchange(x_mine, (rank - step) % world, src, (rows, H), arrived_ag)
        got_up[src * rows:(src + 1) * rows] = shard @ w_up
# --8<-- [end:gather]
# --8<-- [start:scatter]
# matmul, then reduce-scatter: what a row-wise layer's partial sums need
h = torch.relu(want_up)  # (S, F): every position, this rank's F columns
mine = torch.empty(rows, H)
dist.reduce_scatter_single(mine, (h @ w_down).contiguous())  # sums over ranks
want_down = mine
# micro-pipelined: compute the rows rank r-step owns, send them, add what arrives
arrived_rs, total = [], None
with CountMatmuls() as mm_rs:
    for step in range(1, world):
        dst, src = (rank - step) % world, (rank + step) % world
        part = h[dst * rows:(dst + 1) * rows] @ w_down
        got = exchange(part, dst, src, (rows, H), arrived_rs)
        total = got if total is None else total + got
    total = total + h[rank * rows:(rank + 1) * rows] @ w_down  # this rank's own part
# --8<-- [end:scatter]
# --8<-- [start:report]
shard_bytes = rows * H * 4  # float32 activation rows of one rank
part_bytes = rows * H * 4  # one destination's partial sums
errors = {"all-gather + matmul": relative(got_up, want_up),
          "matmul + reduce-scatter": relative(total, want_down)}
for (name, err), mode in zip(errors.items(), (mm_ag, mm_rs)):
    verdict = ("< 1e-6: equal up to float32 round-off" if err < 1e-6
               else ">= 1e-6: NOT equal, more than round-off")
    show(f"{name}, {world} pieces: max relative difference {err:.1e}\n"
         f"  ({verdict}); matmuls: {mode.mm} instead of 1")
show(f"received per rank, all-gather + matmul: predicted "
     f"{(world - 1) * shard_bytes:,} B, counted {sum(arrived_ag):,} B")
show(f"received per rank, matmul + reduce-scatter: predicted "
     f"{(world - 1) * part_bytes:,} B, counted {sum(arrived_rs):,} B")
# --8<-- [end:report]
# --8<-- [start:switches]
from torch._inductor import config as inductor_config  # noqa: E402
from torch.distributed import _symmetric_memory as symm_mem  # noqa: E402

group = dist.group.WORLD.group_name
show(f"torch._inductor.config._micro_pipeline_tp: {inductor_config._micro_pipeline_tp}")
before = symm_mem.is_symm_mem_enabled_for_group(group)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    symm_mem.enable_symm_mem_for_group(group)  # what torchtitan still calls
after = symm_mem.is_symm_mem_enabled_for_group(group)
show(f"symmetric memory on for the group: {before} before "
     f"enable_symm_mem_for_group(),\n  {after} after; its warning: "
     f"{caught[0].category.__name__ if caught else 'none'}")
# --8<-- [end:switches]
dist.destroy_process_group()
bad = [name for name, err in errors.items() if not err < 1e-6]
if sum(arrived_ag) != (world - 1) * shard_bytes or sum(arrived_rs) != (
        world - 1) * part_bytes:
    bad.append("bytes received")
if mm_ag.mm != world or mm_rs.mm != world:
    bad.append("matmul count")
if bad:
    sys.exit(f"micro-pipelined != the collective and matmul it replaces: {bad}")
