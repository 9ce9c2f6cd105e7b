"""CUDA graphs: capture, replay with static inputs, what breaks capture, time saved."""

import argparse
import sys
import time

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.parse_args()
if not torch.cuda.is_available():
    sys.exit("This example needs a CUDA GPU (torch.cuda.is_available() is False).")
torch.manual_seed(0)


# --8<-- [start:capture]
def tiny_kernels(x):  # 200 small element-wise kernels: launch cost dominates
    for _ in range(100):
        x = x * 1.01 + 0.01
    return x


static_in = torch.zeros(1024, device="cuda")  # the graph uses fixed addresses
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):  # warm up on a side stream before capturing
    for _ in range(3):
        tiny_kernels(static_in)
torch.cuda.current_stream().wait_stream(side)

g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):  # records the kernels; nothing is computed yet
    static_out = tiny_kernels(static_in)

for value in (1.0, 2.0):
    static_in.copy_(torch.full((1024,), value, device="cuda"))  # new data, same memory
    g.replay()  # relaunches all 200 kernels with one call
    assert torch.allclose(static_out, tiny_kernels(static_in))  # same as eager
    print(f"input {value}: replay == eager, out[0] = {static_out[0].item():.4f}")
# --8<-- [end:capture]


# --8<-- [start:speed]
def per_call(fn, n=50):
    fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n


eager = per_call(lambda: tiny_kernels(static_in))
replay = per_call(g.replay)
print(f"200 tiny kernels: eager {eager * 1e3:.3f} ms, graph replay "
      f"{replay * 1e3:.3f} ms ({eager / replay:.1f}x)")
# --8<-- [end:speed]

# --8<-- [start:graphed]
model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
sample = torch.randn(32, 64, device="cuda")  # shapes and requires_grad as in training
graphed = torch.cuda.make_graphed_callables(model, (sample,))  # fwd + bwd graphs
x, y = torch.randn(32, 64, device="cuda"), torch.randn(32, 1, device="cuda")
for step in range(3):
    opt.zero_grad(set_to_none=True)
    loss = nn.functional.mse_loss(graphed(x), y)  # replays the captured forward
    loss.backward()  # replays the captured backward
    opt.step()  # the optimizer step itself stays eager
    print(f"make_graphed_callables step {step}: loss {loss.item():.4f}")
# --8<-- [end:graphed]

# --8<-- [start:breaks]
bad = torch.cuda.CUDAGraph()
try:
    with torch.cuda.graph(bad):
        out = static_in * 2
        if out.sum().item() > 0:  # .item() waits for the GPU: illegal during capture
            out = out + 1
except RuntimeError as e:
    print("capture failed:", str(e).splitlines()[0][:70])
# --8<-- [end:breaks]
