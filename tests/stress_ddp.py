"""Stress script, not a test (pytest does not collect it): run every distributed command of the DDP
pages N times in a row and count crashes, hangs and outputs that differ from the recording.

    python tests/stress_ddp.py            # 20 runs of each command
    python tests/stress_ddp.py -n 5 -k hang
    python tests/stress_ddp.py --trap     # also: a DDP worker WITHOUT the cleanup, for comparison
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from pagerun import pages, recordings, runner

UNFIXED = '''
import os
from datetime import timedelta
import torch, torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo", timeout=timedelta(seconds=60))
ddp = DDP(nn.Linear(8, 1))
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
for _ in range(5):
    opt.zero_grad(); ddp(torch.randn(4, 8)).sum().backward(); opt.step()
if os.environ.get("CLEANUP") == "1":
    del ddp, opt
    import gc; gc.collect()
dist.destroy_process_group()
'''


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=20)
    ap.add_argument("-k", default="", help="only commands containing this text")
    ap.add_argument("--trap", action="store_true")
    args = ap.parse_args()

    blocks = [b for p in sorted((pages.DOCS / "en" / "ddp").glob("*.md")) for b in pages.blocks(p)
              if b.snippets and not runner.unmet(b.marks) and args.k in b.code]
    if args.trap:
        tmp = Path(tempfile.mkdtemp()) / "unfixed.py"
        tmp.write_text(UNFIXED)
        for cleanup in ("0", "1"):
            blocks.append(pages.Block(tmp, 0, "bash", f"CLEANUP={cleanup} OMP_NUM_THREADS=1 torchrun "
                                      f"--standalone --nproc-per-node=2 {tmp}\n"))
    total_bad = 0
    for b in blocks:
        rec = recordings.load(runner.device()["class"], b.key) if b.key else None
        counts = {"ok": 0, "crash": 0, "hang": 0, "differs": 0, "sigabrt": 0}
        t0 = time.monotonic()
        for _ in range(args.n):
            res = runner.run(b)
            if "terminate called" in res.output or "SIGABRT" in res.output:
                counts["sigabrt"] += 1
            if res.timed_out:
                counts["hang"] += 1
            elif res.exit != b.exit:
                counts["crash"] += 1
                print(f"--- exit {res.exit}:\n" + res.output[-3000:], flush=True)
            elif rec is not None and recordings.normalise(rec.body) != recordings.normalise(res.output):
                counts["differs"] += 1
                print("--- differs from the recording:\n" + res.output[-3000:], flush=True)
            else:
                counts["ok"] += 1
        bad = args.n - counts["ok"]
        if b.page.suffix == ".md":
            total_bad += bad
        cmd = " ".join(b.code.split())
        print(f"{counts} in {time.monotonic() - t0:.0f} s  {cmd[:150]}", flush=True)
    print(f"page commands: {total_bad} bad runs")
    return 1 if total_bad else 0


if __name__ == "__main__":
    sys.exit(main())
