"""DataParallel from scratch, on the CPU: replicate, scatter, parallel_apply in threads,
gather.

Its gradients are checked against one ordinary forward/backward on the full batch.
"""

import argparse
import copy
import threading

import torch
from torch import nn
from torch.func import functional_call

if __name__ == "__main__":  # a module the tests import, too
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()


# --8<-- [start:steps]
def replicate(module, n):
    # One module object per replica (functional_call swaps parameters in and out of the
    # module
    # it is given, so threads must not share one), run with differentiable copies of the
    # parameters: autograd sums the replicas' gradients back into the original
    # parameters,
    # which is what DataParallel's Broadcast does in its backward.
    params = dict(module.named_parameters())
    return [
        (copy.deepcopy(module), {k: p.clone() for k, p in params.items()})
        for _ in range(n)
    ]


def scatter(batch, n):
    # the same rule as DataParallel; may return fewer than n chunks
    return batch.chunk(n, dim=0)


def parallel_apply(replicas, chunks):
    outputs = [None] * len(chunks)
    # grad mode is per thread: pass it on, as DP does
    grad_enabled = torch.is_grad_enabled()

    def worker(i):
        with torch.set_grad_enabled(grad_enabled):
            replica, params = replicas[i]
            outputs[i] = functional_call(replica, params, (chunks[i],))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(chunks))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outputs


def gather(outputs):
    return torch.cat(outputs, dim=0)  # on the "output device"


def data_parallel(module, batch, n):
    chunks = scatter(batch, n)
    replicas = replicate(module, len(chunks))  # one replica per chunk, not per device
    return gather(parallel_apply(replicas, chunks)), [len(c) for c in chunks]
# --8<-- [end:steps]


# --8<-- [start:check]
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 2))
loss_fn = nn.MSELoss()


def grads_after(step):
    model.zero_grad()
    step()
    return [p.grad.clone() for p in model.parameters()]


for batch, n in [(30, 2), (30, 3), (10, 3)]:
    x, y = torch.randn(batch, 5), torch.randn(batch, 2)
    full = grads_after(lambda: loss_fn(model(x), y).backward())
    sizes = []

    def dp_step():
        out, split = data_parallel(model, x, n)
        sizes.extend(split)
        # the loss of the gathered output, as under DataParallel
        loss_fn(out, y).backward()

    dp = grads_after(dp_step)
    diff = max((a - b).abs().max().item() for a, b in zip(full, dp))
    verdict = ("< 1e-6: equal up to float32 round-off" if diff < 1e-6
               else ">= 1e-6: NOT equal, more than round-off")  # what the figure shows
    print(
        f"batch {batch} on {n} replicas {sizes}: max abs grad diff vs full batch = "
        f"{diff:.1e}\n  ({verdict})"
    )
    assert diff < 1e-6, f"from-scratch DP disagrees with the full batch: {diff}"
print("gradients match the full-batch gradients")
# --8<-- [end:check]

# --8<-- [start:loss-inside]
# A loss computed inside forward comes back as one value per replica. Their mean is not
# the
# full-batch loss when the chunks differ in size: 10 samples on 3 replicas are split
# 4/4/2.
x, y = torch.randn(10, 5), torch.randn(10, 2)
with torch.no_grad():
    parts = list(zip(scatter(x, 3), scatter(y, 3)))
    per_replica = torch.stack([loss_fn(model(a), b) for a, b in parts])
    weights = torch.tensor([len(a) for a, _ in parts]) / len(x)
    print(f"losses of the replicas (sizes {[len(a) for a, _ in parts]}):",
          [round(v, 4) for v in per_replica.tolist()])
    print(
        f"their mean {per_replica.mean():.4f}, weighted by size "
        f"{(per_replica * weights).sum():.4f}, "
        f"full batch {loss_fn(model(x), y):.4f}"
    )
# --8<-- [end:loss-inside]
