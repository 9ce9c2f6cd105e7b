"""Start methods: where DataLoader workers come from, and what they inherit.

Each worker reports its parent, which process imported this file for it, and whether it
sees state that main() set at run time, as CUDA's state is set by the first CUDA call.

Run with: python snippets/production/start_methods.py
"""

import argparse
import os
import sys
import time

import torch.multiprocessing as mp
from torch.utils.data import DataLoader, Dataset

# --8<-- [start:probe]
IMPORTED_BY = os.getpid()  # top-level code runs in every process that imports this file
STATE = {"set by main()": False}  # run-time state, as CUDA's is after its first call


class WhereFrom(Dataset):
    """Each sample says which worker made it, its parent, who imported this file there,
    and whether the worker sees what main() set."""

    def __len__(self):
        return 4

    def __getitem__(self, i):
        return os.getpid(), os.getppid(), IMPORTED_BY, STATE["set by main()"]


def as_list(batch):  # a function of the module: spawn and forkserver pickle it by name
    return batch
# --8<-- [end:probe]


# --8<-- [start:run]
WORKERS = 1  # spawn and forkserver: each worker imports torch again


def run(context):
    """Start WORKERS workers with `context` (a start method, or None: the default)."""
    start = time.perf_counter()
    loader = DataLoader(WhereFrom(), batch_size=1, num_workers=WORKERS,
                        collate_fn=as_list, multiprocessing_context=context)
    rows = [row for batch in loader for row in batch]
    seconds = time.perf_counter() - start
    del loader  # its workers end with it
    me = os.getpid()
    workers = {row[0] for row in rows}
    assert len(workers) == WORKERS, workers
    parent = "this process" if {row[1] for row in rows} == {me} else "the fork server"
    importers = {row[2] for row in rows}
    imported = "this process only" if importers == {me} else "a new interpreter"
    inherits = "yes" if all(row[3] for row in rows) else "no"
    return (parent, imported, inherits), len(importers - {me}), seconds
# --8<-- [end:run]


# --8<-- [start:main]
def main():
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    STATE["set by main()"] = True  # after the import: only a forked child has it
    failed, seen = [], {}
    default = mp.get_start_method()  # Linux: fork up to Python 3.13, then forkserver
    for method, context in (("fork", "fork"), ("forkserver", "forkserver"),
                            ("default", None), ("spawn", None)):
        if method == "spawn":  # once, before processes start (force: default was read)
            mp.set_start_method("spawn", force=True)
        seen[method], imports, seconds = run(context)
        if method == "default":  # compared below: the default differs between platforms
            continue
        parent, imported, inherits = seen[method]
        how = f'"{context}"' if context else 'None, after set_start_method("spawn")'
        print(f"{method} (multiprocessing_context={how}):")
        print(f"  workers are children of {parent}; "
              f"they see main()'s state: {inherits}")
        print(f"  this file imported by {imported}")
        print(f"  {method}: first batch after {seconds:.2f} s")
        if method != "forkserver":  # forkserver: 1 or 2, by Python release (see page)
            predicted = 0 if method == "fork" else WORKERS
            print(f"{method}, this file's imports, {WORKERS} worker(s): predicted "
                  f"{predicted:,} imports, counted {imports:,} imports")
            failed += [] if imports == predicted else [method]
    same = seen["default"] == seen[default]
    print(f"multiprocessing_context=None behaves as get_start_method() says: "
          f"{'yes' if same else 'no'}")
    failed += [] if same else ["the default"]
    if failed:
        sys.exit(f"not as predicted: {', '.join(failed)}")


if __name__ == "__main__":  # spawn and forkserver import this file again: not main()
    main()
# --8<-- [end:main]
