"""Every rank's values in one process: a tensor-parallel MLP under LocalTensorMode
equals the unsplit MLP; under the fake process group alone, its output is wrong."""

import argparse
import copy
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                               parallelize_module)

p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
p.add_argument("--ranks", type=int, default=4)
n = p.parse_args().ranks
try:  # private, and recent: pytorch/pytorch#164537, October 2025
    from torch.distributed._local_tensor import LocalTensorMode
except ImportError:
    sys.exit(f"torch {torch.__version__} has no torch.distributed._local_tensor")
if n < 1 or 64 % n:
    sys.exit(f"--ranks must divide 64, the hidden layer's width (not {n})")
dist.init_process_group("fake", rank=0, world_size=n)  # torch makes its FakeStore
PLAN = {"0": ColwiseParallel(), "2": RowwiseParallel()}  # as in the tensor chapter

# --8<-- [start:local]
torch.manual_seed(0)
ref = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 16))  # one process
x, model = torch.randn(8, 16), copy.deepcopy(ref)
ref(x).square().mean().backward()
with LocalTensorMode(n) as mode:  # every tensor now holds one value per rank
    mesh = init_device_mesh("cpu", (n,), mesh_dim_names=("tp",))
    parallelize_module(model, mesh, PLAN)
    out = model(x)  # every op runs once per rank; the all-reduce adds the ranks' values
    out.square().mean().backward()
    out_diff = (out - ref(x)).abs().max()  # one number per rank
    up = model[0].weight.to_local()  # rank r's rows of the first layer's weight
    grads = mode.rank_map(lambda r: ref[0].weight.grad.chunk(n)[r])  # the same rows
    grad_diff = (model[0].weight.grad.to_local() - grads).abs().max()
for r in range(n):
    print(f"rank {r}: first weight {tuple(up._local_tensors[r].shape)}; max abs diff: "
          f"output {out_diff._local_tensors[r]:.1e} (< 1e-5),\n  its weight's gradient "
          f"{grad_diff._local_tensors[r]:.1e} (< 1e-5: equal up to float32 round-off)")
assert max(max(d._local_tensors.values()) for d in (out_diff, grad_diff)) < 1e-5
# --8<-- [end:local]

# --8<-- [start:fake]
alone = copy.deepcopy(ref)  # the same model under the fake process group alone: rank 0
parallelize_module(alone, init_device_mesh("cpu", (n,)), PLAN, src_data_rank=None)
diff = (alone(x) - ref(x)).abs().max().item()  # its all-reduce added nothing
print(f"fake process group alone, rank 0: output max abs diff {diff:.1e} "
      + ("(> 1e-3: wrong)" if n > 1 else "(< 1e-5: one rank, nothing to add)"))
assert (diff > 1e-3) if n > 1 else (diff < 1e-5)
# --8<-- [end:fake]
