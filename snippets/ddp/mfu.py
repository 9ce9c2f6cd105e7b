"""Model FLOPs utilisation (MFU) of a training step on one GPU: the FLOPs a step needs,
predicted and counted, divided by the step's time and by the GPU's peak.

MFU is what a GPU did against what it could: a CPU has no such peak here, so the program
refuses to run without a CUDA GPU.
"""

import argparse
import statistics
import sys

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

# Dense bf16 tensor-core peaks, TFLOP/s, from NVIDIA's datasheets (their figures "with
# sparsity" are twice these): H100 and H200 SXM 989.5, PCIe 756, NVL 835.5
# (nvidia.com/en-us/data-center/h100/ and /h200/), A100 312 (/a100/); first match wins
PEAKS = {"H100 PCIe": 756.0, "H100 NVL": 835.5, "H200 NVL": 835.5, "H100": 989.5,
         "H200": 989.5, "A100": 312.0}

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--dim", type=int, default=8192, help="hidden size")
parser.add_argument("--layers", type=int, default=4, help="MLP blocks")
parser.add_argument("--tokens", type=int, default=8192, help="tokens per step")
parser.add_argument("--peak-tflops", type=float,
                    help="the GPU's dense bf16 peak, if it is not in PEAKS")
args = parser.parse_args()
if not torch.cuda.is_available():
    sys.exit("MFU needs a CUDA GPU (it is measured against a GPU's peak); none found")
name = torch.cuda.get_device_name()
peak = args.peak_tflops or next((v for k, v in PEAKS.items() if k in name), None)
if peak is None:
    sys.exit(f"no dense bf16 peak known for {name}: pass --peak-tflops")

# --8<-- [start:model]
torch.manual_seed(0)
d = args.dim
model = nn.Sequential(*[nn.Sequential(nn.Linear(d, 4 * d, bias=False), nn.GELU(),
                                      nn.Linear(4 * d, d, bias=False))
                        for _ in range(args.layers)]).to("cuda", torch.bfloat16)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
x = torch.randn(args.tokens, d, device="cuda", dtype=torch.bfloat16)


def step():
    model(x).float().pow(2).mean().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
# --8<-- [end:model]


# --8<-- [start:count]
P = sum(w.numel() for w in model.parameters())
first = model[0][0].weight.numel()  # x needs no gradient: no input gradient here
predicted = 6 * P * args.tokens - 2 * first * args.tokens  # forward 2, backward 4
with FlopCounterMode(display=False) as counter:
    step()
counted = counter.get_total_flops()
print(f"{name}, {P:,} parameters, {args.tokens:,} tokens per step, bf16")
print(f"FLOPs per step: predicted {predicted:,} FLOP, counted {counted:,} FLOP")
if predicted != counted:
    sys.exit("predicted != counted: FLOPs per step")
# --8<-- [end:count]

# --8<-- [start:time]
for _ in range(3):  # warm-up: cuBLAS picks its kernels, the allocator fills its cache
    step()
times = []
for _ in range(10):
    start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
    start.record()
    step()
    end.record()
    torch.cuda.synchronize()
    times.append(start.elapsed_time(end) / 1e3)  # seconds
seconds = statistics.median(times)
achieved = counted / seconds / 1e12
print(f"step: {seconds * 1e3:.2f} ms (median of 10); {achieved:.1f} TFLOP/s")
print(f"MFU: {achieved / peak:.1%} of {peak} TFLOP/s, the dense bf16 peak of {name}")
# --8<-- [end:time]
