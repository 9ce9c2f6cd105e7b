"""What each mesh dimension of all_dims.py moves in one step: predicted by formulas
from the degrees and the model's sizes, and counted by a TorchDispatchMode that sees
every collective torch runs, with the process group it runs on."""

import math
from collections import Counter

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor
from torch.utils._python_dispatch import TorchDispatchMode

from all_dims_model import D, E, FF, LAYERS

ORDER = ("pp", "dp", "fsdp", "cp", "tp", "ep", "warm-up", "forward", "backward")


# --8<-- [start:predict]
def predict(a, n, B, S, M, chosen):
    """{(dim, phase, op): (calls, bytes)}, summed over all n ranks, for one step.
    chosen: each block's top-K experts of each token, from the one-process run."""
    rows, Nf, per = B // (a.dp * a.fsdp), a.fsdp * a.cp, LAYERS // a.pp
    act = rows // M * S // a.cp * D * 8  # bytes of a micro-batch's activation, float64
    units = n * per  # blocks (FSDP units) held, summed over the ranks
    local = [(D // a.tp, D)] * 3 + [(D, D // a.tp), (E, D)]  # wq wk wv wo router
    local += [(E, D * FF)] * 2 if a.ep == 1 else []  # w1 w2 too, unless EP holds them
    shard = sum(math.ceil(r / Nf) * c for r, c in local) * 8  # FSDP pads dim 0 to Nf
    want = {}
    if a.tp > 1:  # forward: wo's output; backward: the input grads of wq, wk, wv,
        want["tp", "forward", "all_reduce"] = units * M, units * M * act
        bwd = n // a.pp * M * 3 * (LAYERS - 1)  # but not in block 0: its input is data
        want["tp", "backward", "all_reduce"] = bwd, bwd * act
    if a.cp > 1:  # the keys and values of all S positions, of this rank's heads
        kv = 2 * rows // M * S * D // a.tp * 8
        want["cp", "forward", "all_gather"] = units * M, units * M * kv
        want["cp", "backward", "reduce_scatter"] = units * M, units * M * kv
    if Nf > 1:  # each block gathered before its first forward, reduced after its last
        want["fsdp", "forward", "all_gather"] = units, units * Nf * shard
        want["fsdp", "backward", "reduce_scatter"] = units, units * Nf * shard
    if a.dp > 1:  # HSDP all-reduces each block's shard; all_dims.py, the experts
        ex = 2 if a.ep > 1 else 0  # w1, w2: E/ep experts each
        want["dp", "backward", "all_reduce"] = units * (1 + ex), units * (
            shard + ex * E // a.ep * D * FF * 8)
    if a.ep > 1:  # rows sent to an expert on another rank, and the results back
        i, j = torch.arange(B).repeat_interleave(S), torch.arange(S).repeat(B)
        ep_of = i // rows % a.fsdp * a.cp + j // (S // a.cp)  # each token's ep rank
        far = a.tp * sum(int((c // (E // a.ep) != ep_of[:, None]).sum())
                         for c in chosen)  # (token, expert) pairs on two ranks
        counts = units * M * E * (a.ep - 1) // a.ep * 8  # first the counts, int64
        want["ep", "forward", "all_to_all"] = 3 * units * M, counts + 2 * far * D * 8
        want["ep", "backward", "all_to_all"] = 2 * units * M, 2 * far * D * 8
    if a.pp > 1:  # each stage but the last sends activations on, each but the first
        sends = n // a.pp * (a.pp - 1) * M  # gradients back
        want["pp", "forward", "send"] = want["pp", "backward", "send"] = (sends,
                                                                          sends * act)
        votes = n // a.pp * (a.pp - 1) * 2  # first step only: the stages vote whether
        want["pp", "warm-up", "send"] = votes, votes * 4  # shapes are static (int32)
    return want
# --8<-- [end:predict]


# --8<-- [start:count]
OPS = {"allreduce_": "all_reduce", "all_reduce": "all_reduce", "send": "send",
       "_allgather_base_": "all_gather", "_reduce_scatter_base_": "reduce_scatter",
       "alltoall_base_": "all_to_all"}


class Traffic(TorchDispatchMode):
    """Adds each collective's bytes to (mesh dim, phase, op); label: group name ->
    mesh dim. The phase is the pipeline stage's last forward or backward chunk."""

    def __init__(self, label, stage):
        super().__init__()
        self.label, self.phase, self.bytes, self.calls = (label, "warm-up", Counter(),
                                                          Counter())
        for name in ("forward", "backward"):
            run = getattr(stage, f"{name}_one_chunk")
            setattr(stage, f"{name}_one_chunk", lambda *args, run=run, name=name, **kw:
                    (setattr(self, "phase", name), run(*args, **kw))[1])

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        op = OPS.get(getattr(func, "__name__", "").split(".")[0])
        if op and not any(issubclass(t, DTensor) for t in types):
            arg = {s.name: v for s, v in zip(func._schema.arguments, args)}
            pg = (dist.distributed_c10d._resolve_process_group(arg["group_name"])
                  if "group_name" in arg else dist.ProcessGroup.unbox(
                      arg["process_group"]))
            t = (arg["output_tensor"] if op == "all_gather" else arg["input_tensor"]
                 if op == "reduce_scatter" else arg["tensors"][0] if "tensors" in arg
                 else arg["input"])  # the whole buffer, S, as in twod_cost.py
            if op == "all_to_all":  # rows for other ranks only, as in snippets/expert
                split = arg["input_split_sizes"] or [len(t) // pg.size()] * pg.size()
                t = t[:len(t) - split[pg.rank()]]
            if pg.size() > 1:  # a group of one moves nothing
                dim = "ep" if op == "all_to_all" else self.label[pg.group_name]
                if dim == "fsdp" and t.dim() > 1:  # --fsdp 1: FSDP, CP share a group;
                    dim = "cp"  # FSDP2's buffers are flat, CP's keys and values are not
                self.bytes[dim, self.phase, op] += t.numel() * t.element_size()
                self.calls[dim, self.phase, op] += 1
        return func(*args, **(kwargs or {}))


def report(want, counted):
    """Print predicted and counted, summed over ranks; the quantities that differ."""
    total = [sum((c[i] for c in counted), Counter()) for i in (0, 1)]  # bytes, calls
    failed = []
    for key in sorted(set(want) | set(total[1]), key=lambda k: [ORDER.index(k[0]),
                                                                 ORDER.index(k[1])]):
        for unit, predicted, count in zip(("B", "calls"), want.get(key, (0, 0))[::-1],
                                          (total[0][key], total[1][key])):
            what = f"{', '.join(key)} {'bytes' if unit == 'B' else 'calls'}"
            print(f"{what}: predicted {predicted:,} {unit}, counted {count:,} {unit}")
            failed += [what] if predicted != count else []
    return failed
# --8<-- [end:count]
