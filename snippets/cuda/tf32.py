"""TF32 and bfloat16 autocast against full float32: speed and error of a 10240 x 10240
matmul."""

import argparse
import sys

import torch

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()

if not torch.cuda.is_available():
    sys.exit("This example needs a CUDA GPU (torch.cuda.is_available() is False).")

n = 10240
torch.manual_seed(0)
a64 = torch.randn(n, n, dtype=torch.float64, device="cuda")
b64 = torch.randn(n, n, dtype=torch.float64, device="cuda")
ref = a64 @ b64  # float64 reference
a, b = a64.float(), b64.float()


def measure(matmul, reps=10):
    out = matmul()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(
        enable_timing=True
    )
    start.record()
    for _ in range(reps):
        matmul()
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end) / reps
    # the error measure of PyTorch's CUDA notes: max abs error / mean abs value
    error = ((out.double() - ref).abs().max() / ref.abs().mean()).item()
    return ms, error


# --8<-- [start:precision]
torch.set_float32_matmul_precision("highest")  # full float32 (the default)
fp32 = measure(lambda: a @ b)

torch.set_float32_matmul_precision("high")  # float32 matmuls may use TF32 tensor cores
print("allow_tf32 now:", torch.backends.cuda.matmul.allow_tf32)
tf32 = measure(lambda: a @ b)
torch.set_float32_matmul_precision("highest")


def bf16_autocast():
    with torch.autocast("cuda", dtype=torch.bfloat16):
        return a @ b  # computed in bfloat16, returned as bfloat16


bf16 = measure(bf16_autocast)
# --8<-- [end:precision]

# Dense peaks in TFLOP/s from NVIDIA's datasheets (float32 on CUDA cores; TF32 and
# bf16 on tensor cores, without sparsity):
# nvidia.com/en-us/data-center/h100/, .../h200/, .../a100/
PEAKS = {"H100 PCIe": (51.2, 378.0, 756.0), "H100 NVL": (60.0, 417.5, 835.0),
         "H100": (67.0, 494.7, 989.4),
         "H200": (67.0, 494.7, 989.4), "A100": (19.5, 156.0, 312.0)}
gpu = torch.cuda.get_device_name()
peaks = next((v for k, v in PEAKS.items() if all(w in gpu for w in k.split())), None)

# --8<-- [start:table]
print(gpu, f"| {n} x {n} matmul")
flop = 2 * n**3
runs = {"float32": fp32, "tf32": tf32, "bf16 autocast": bf16}
# the relative error each precision stays below here: tf32 stores 10 bits of mantissa,
# bf16 7 (11 and 8 significant bits, counting the implicit leading one)
within = {"float32": 1e-4, "tf32": 1e-2, "bf16 autocast": 1e-1}
for i, (name, (ms, err)) in enumerate(runs.items()):
    rate = flop / ms / 1e9  # TFLOP/s
    bound = (
        f"of the peak {peaks[i]} TFLOP/s: {rate / peaks[i]:.2f}x"
        if peaks
        else "peak unknown"
    )
    print(f"{name:14} {ms:8.2f} ms {rate:8.1f} TFLOP/s  rel. error {err:.1e} "
          f"(< {within[name]:g})"
          f"  speed-up {fp32[0] / ms:.1f}x  {bound}")
# --8<-- [end:table]
