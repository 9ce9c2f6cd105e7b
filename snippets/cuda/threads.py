"""Inference in threads, one per GPU (at least two, to show that device and stream are
per thread)."""

import argparse
import copy
import sys
import threading

import torch
from torch import nn

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()

if not torch.cuda.is_available():
    sys.exit("This example needs a CUDA GPU (torch.cuda.is_available() is False).")

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)).eval()
requests = torch.randn(8, 32, 64)  # 8 batches waiting to be served
gpus = list(range(torch.cuda.device_count()))


# --8<-- [start:worker]
def serve(worker: int, gpu: int, batches: list[int], results: dict, seen: dict) -> None:
    torch.cuda.set_device(gpu)  # changes the current device of THIS thread only
    replica = copy.deepcopy(model).to(f"cuda:{gpu}")
    stream = torch.cuda.Stream()  # one stream per worker
    with torch.cuda.stream(stream), torch.inference_mode():
        for i in batches:
            results[i] = replica(requests[i].to(f"cuda:{gpu}")).cpu()
        seen[worker] = (
            torch.cuda.current_device(),
            torch.cuda.current_stream() == stream,
        )


results, seen = {}, {}
workers = max(2, len(gpus))
threads = [
    threading.Thread(
        target=serve,
        args=(w, gpus[w % len(gpus)], list(range(w, 8, workers)), results, seen),
    )
    for w in range(workers)
]
for t in threads:
    t.start()
for t in threads:
    t.join()
# --8<-- [end:worker]

# --8<-- [start:check]
expected = model(requests.flatten(0, 1)).view(8, 32, 10)
got = torch.stack([results[i] for i in range(8)])
print("threads:", len(threads), "| batches served:", len(results))
err = (got - expected).abs().max().item()
verdict = "< 1e-4: the same model" if err < 1e-4 else ">= 1e-4: NOT the same results"
print(f"max abs diff vs one CPU model: {err:.1e} ({verdict})")
print(
    "per worker (current device, its own stream current):", dict(sorted(seen.items()))
)
print(
    "main thread: current device",
    torch.cuda.current_device(),
    "| default stream current:",
    torch.cuda.current_stream() == torch.cuda.default_stream(),
)
assert err < 1e-4, "the threads' results differ from one CPU model's"
# --8<-- [end:check]
