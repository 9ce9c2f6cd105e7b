"""Graph breaks made visible: torch._dynamo.explain counts graphs and says why."""

import argparse
import logging

import torch
import torch._dynamo

parser = argparse.ArgumentParser()
parser.parse_args()
torch._logging.set_logs(dynamo=logging.ERROR)  # explain() reports; no warnings


# --8<-- [start:explain]
def clean(x):
    return torch.relu(x @ x.T).sum(dim=1)


def breaks(x):
    y = torch.relu(x @ x.T)
    print("mean:", round(y.mean().item(), 2))  # print() and .item() leave the graph
    if y.sum() > 0:  # data-dependent Python control flow: another break
        y = y * 2
    return y.sum(dim=1)


x = torch.ones(4, 4)
for fn in (clean, breaks):
    torch._dynamo.reset()
    e = torch._dynamo.explain(fn)(x)
    print(f"{fn.__name__}: {e.graph_count} graph(s), {e.graph_break_count} break(s)")
    for r in e.break_reasons:
        print("  -", r.reason.splitlines()[0][:76])
# --8<-- [end:explain]
