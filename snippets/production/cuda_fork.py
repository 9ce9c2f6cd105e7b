"""CUDA and start methods: a child forked after CUDA started cannot use CUDA.

Needs a CUDA GPU. Run with: python snippets/production/cuda_fork.py
"""

import argparse
import sys

import torch
import torch.multiprocessing as mp
from torch.utils.data import DataLoader, Dataset


# --8<-- [start:child]
def child(queue):
    """Use CUDA in a new process; report how it went."""
    try:
        queue.put(f"ok, {torch.ones(1, device='cuda').add(1).item():.0f}")
    except RuntimeError as e:
        queue.put(f"{type(e).__name__}: {str(e).splitlines()[0]}")


def start(method):
    ctx = mp.get_context(method)
    queue = ctx.SimpleQueue()  # no feeder thread in this process
    process = ctx.Process(target=child, args=(queue,))
    process.start()
    answer = queue.get()
    process.join()
    return answer


class OnTheGPU(Dataset):  # the mistake: a worker that makes CUDA tensors
    def __len__(self):
        return 2

    def __getitem__(self, i):
        return torch.full((1,), i, device="cuda")
# --8<-- [end:child]


def main():
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    # device_count() asks NVML and leaves CUDA alone; is_available() would start
    # the CUDA driver in this process, and mark later forks as unsafe too
    if torch.cuda.device_count() == 0:
        sys.exit("This example needs a CUDA GPU (torch.cuda.device_count() is 0).")

    # --8<-- [start:fork]
    answers = {"fork, before CUDA starts here": start("fork")}
    x = torch.ones(1, device="cuda")  # CUDA starts in this process
    print(f"torch.cuda.is_initialized(): {torch.cuda.is_initialized()}")
    for method in ("fork", "forkserver", "spawn"):
        answers[f"{method}, after CUDA started here"] = start(method)
    for what, answer in answers.items():
        print(f"{what:<34} child: {answer}")
    # --8<-- [end:fork]

    # --8<-- [start:loader]
    loader = DataLoader(OnTheGPU(), num_workers=1, multiprocessing_context="fork")
    try:
        next(iter(loader))
        outcome = "ok"
    except RuntimeError as e:  # the worker's error, raised again in this process
        outcome = str(e).splitlines()[0]  # Caught RuntimeError in DataLoader worker ...
        cause = "Cannot re-initialize CUDA in forked subprocess"
        outcome += f" (the worker's: {cause})" if cause in str(e) else ""
    print(f"DataLoader, a fork worker making a CUDA tensor: {outcome}")
    # --8<-- [end:loader]

    broken = "fork, after CUDA started here"  # the one child that must fail
    failed = [w for w, a in answers.items() if a.startswith("ok") == (w == broken)]
    failed += [] if "re-initialize" in outcome else ["DataLoader"]
    if failed:
        sys.exit(f"not as the page says: {', '.join(failed)}")
    del x


if __name__ == "__main__":  # forkserver and spawn import this file again
    main()
