"""Parameters of Llama-, Qwen- and DeepSeek-shaped models: predicted by a formula in V,
h, h_kv, F, L (and the experts), counted from small models' parameters; then the
formula applied to published configurations and compared with the published counts.
"""

import argparse

import torch
from shapes_model import Model, attention, model, moe, swiglu

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()




# --8<-- [start:count]
failed = []


def report(what, predicted, counted, unit):
    print(f"{what}: predicted {predicted:,} {unit}, counted {counted:,} {unit}")
    if predicted != counted:
        failed.append(what)


V, H, L, HEADS, KV = 512, 256, 2, 8, 2  # vocabulary, width, layers, heads, K/V heads
for name, f, kw in [("Llama, untied", 688, {}),
                    ("Llama, tied", 688, {"tied": True}),
                    ("Qwen, q/k/v biases", 688, {"bias": True}),
                    ("DeepSeek MoE", 64, {"moe": (16, 4, 1)})]:
    m = Model(V, H, L, HEADS, KV, f, **kw)
    counted = sum(p.numel() for p in m.parameters())  # a tied matrix once
    mlp = moe(H, f, *kw["moe"]) if "moe" in kw else swiglu(H, f)
    report(name, model(V, H, L, attention(H, HEADS, KV, kw.get("bias", False)), mlp,
                       kw.get("tied", False)), counted, "parameters")
# --8<-- [end:count]


# --8<-- [start:published]
def mla(h, heads, q_rank, kv_rank, nope, rope, v):  # DeepSeek's latent attention
    return (h * q_rank + q_rank + q_rank * heads * (nope + rope)  # q: down, norm, up
            + h * (kv_rank + rope) + kv_rank + kv_rank * heads * (nope + v)  # k, v
            + heads * v * h)  # o


ds_attn = mla(7168, 128, 1536, 512, 128, 64, 128)
ds_layer = ds_attn + 2 * 7168  # and two norms
ds_dense = ds_layer + swiglu(7168, 18432)  # the first 3 layers
ds_moe = ds_layer + moe(7168, 2048, 256, 8, 1) + 256  # + the router's balancing bias
ds_active = ds_layer + 9 * swiglu(7168, 2048) + 7168 * 256 + 256  # 8 routed + shared
shapes = [  # name, formula, published (rounded as published)
    ("Llama-3.2-3B", model(128256, 3072, 28, attention(3072, 24, 8),
                           swiglu(3072, 8192), tied=True), "3.21B"),
    ("Llama-3-8B", model(128256, 4096, 32, attention(4096, 32, 8),
                         swiglu(4096, 14336), tied=False), "8.03B"),
    ("Llama-3-70B", model(128256, 8192, 80, attention(8192, 64, 8),
                          swiglu(8192, 28672), tied=False), "70.6B"),
    ("Qwen2.5-7B", model(152064, 3584, 28, attention(3584, 28, 4, bias=True),
                         swiglu(3584, 18944), tied=False), "7.61B"),
    ("DeepSeek-V3", 129280 * 7168 * 2 + 3 * ds_dense + 58 * ds_moe + 7168, "671B"),
    ("  activated", 129280 * 7168 + 3 * ds_dense + 58 * ds_active + 7168, "36.6B")]
print("\nFormula applied to published configurations:")
for name, n, published in shapes:
    unit = 10.0 ** -(len(published.split(".")[1]) - 1 if "." in published else 0)
    ok = abs(n / 1e9 - float(published[:-1])) < unit  # its last digit rounded or cut
    print(f"{name:<13} {n:>16,} = {n / 1e9:8.3f}B; published {published:>6}: "
          f"{'agrees' if ok else 'DIFFERS'}")
    if not ok:
        failed.append(name)
# --8<-- [end:published]
if failed:
    raise SystemExit(f"predicted != counted or published: {', '.join(failed)}")
