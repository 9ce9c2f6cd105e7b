"""Worked problems: the checkpoint of a 70B model trained with FSDP2 on 1,024 H100
GPUs, how long it blocks training, and how often to take it (arithmetic, no GPU needed).

Run: python snippets/production/checkpoint_problems.py 1   (or 2, 3, 4)
"""

import argparse
import math

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("problem", type=int, choices=[1, 2, 3, 4])
args = parser.parse_args()

# --8<-- [start:constants]
PEAK = 1979e12 / 2  # FLOP/s per H100, dense bf16 (1,979 is with sparsity)
PCIE = 128e9 / 2  # B/s per GPU, each way: PCIe Gen5 x16 (128 GB/s counts both ways)
PAGEABLE = 8.7e9  # B/s: a copy to pageable memory (this site's H200 run, cuda page)
STORAGE = 2e12  # B/s: Llama 3's file system, sustained, whole cluster (best case)
FAILS, DAYS, SEEN = 419, 54, 16_384  # Llama 3: unexpected interruptions, days, GPUs
P, N, GPUS_PER_NODE = 70e9, 1024, 8  # parameters; GPUs, one FSDP2 rank each
STATE = 12 * P  # bytes: float32 weights + Adam's exp_avg and exp_avg_sq, all sharded
PER_GPU = STATE / N  # what each rank writes: its shard (dcp_async.py counts it)
TOKENS = 4 * 1024**2  # tokens per step, the whole job
STEP = 6 * P * TOKENS / (N * PEAK)  # s per step at peak: 6 FLOP per parameter, token
# --8<-- [end:constants]

# --8<-- [start:p1]
if args.problem == 1:
    print(f"checkpoint: {STATE / 1e9:,.0f} GB; "
          f"each rank writes {PER_GPU / 1e6:,.0f} MB")
    print(f"async_save's CPU copy per node ({GPUS_PER_NODE} ranks): "
          f"{GPUS_PER_NODE * PER_GPU / 1e9:.1f} GB of host memory")
# --8<-- [end:p1]

# --8<-- [start:p2]
if args.problem == 2:
    print(f"dcp.save blocks for the write at 2 TB/s: {STATE / STORAGE:.2f} s")
    print(f"dcp.async_save blocks for the copy, pinned at the link's speed: "
          f"{PER_GPU / PCIE * 1e3:.1f} ms")
    print(f"dcp.async_save blocks for the copy, pageable at 8.7 GB/s: "
          f"{PER_GPU / PAGEABLE * 1e3:.1f} ms")
    print(f"one step at peak ({TOKENS:,} tokens): {STEP:.2f} s")
# --8<-- [end:p2]

# --8<-- [start:p3]
if args.problem == 3:
    # an async save every step hides its write while a step lasts longer than the write:
    # 6 * P * tokens_per_gpu / PEAK >= STATE / STORAGE
    tokens = STATE / STORAGE * PEAK / (6 * P)
    print(f"storage-bound below {tokens:,.0f} tokens per GPU and step")
    print(f"this job: {TOKENS / N:,.0f} tokens per GPU, a step of {STEP:.2f} s "
          f"for a write of {STATE / STORAGE:.2f} s")
# --8<-- [end:p3]

# --8<-- [start:p4]
if args.problem == 4:
    mtbf = DAYS * 24 * 3600 / FAILS * SEEN / N  # seconds between failures, this job
    print(f"one interruption every {mtbf / 3600:.1f} h on {N:,} GPUs")
    saves = (("dcp.save", STATE / STORAGE),
             ("dcp.async_save, pageable", PER_GPU / PAGEABLE),
             ("dcp.async_save, pinned", PER_GPU / PCIE))
    for name, blocked in saves:
        every = math.sqrt(2 * blocked * mtbf)  # Young: the interval with the least loss
        lost = blocked / every + every / 2 / mtbf  # saving + half an interval redone
        print(f"{name}: every {every:,.0f} s ({every / STEP:,.0f} steps), "
              f"{100 * lost:.2f}% of the time lost")
# --8<-- [end:p4]
