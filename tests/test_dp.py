"""DataParallel chapter: the split rule and the from-scratch DataParallel, checked beyond the page runs.

The page runs print a few cases; these tests sweep many batch sizes and replica counts in-process
(fast: torch is already imported). The real DataParallel check is `split_table.py --check`, a
needs_2_gpus block on the page.
"""

from __future__ import annotations

import math
import runpy

import pytest
import torch
from torch import nn

from pagerun import pages

SNIPPETS = pages.ROOT / "snippets" / "dp"


@pytest.fixture(scope="module")
def split_table():
    return runpy.run_path(str(SNIPPETS / "split_table.py"), run_name="split_table")


@pytest.fixture(scope="module")
def from_scratch():
    return runpy.run_path(str(SNIPPETS / "from_scratch.py"), run_name="from_scratch")


def test_split_rule_is_chunk_semantics(split_table):
    split_sizes = split_table["split_sizes"]
    for batch in range(1, 65):
        for n in range(1, 9):
            per = math.ceil(batch / n)
            want = [per] * (batch // per) + ([batch % per] if batch % per else [])
            got = split_sizes(batch, n)
            assert got == want and sum(got) == batch and len(got) <= n, (batch, n, got)


def test_split_table_examples_from_the_page(split_table):
    split_sizes = split_table["split_sizes"]
    assert split_sizes(30, 3) == [10, 10, 10]
    assert split_sizes(10, 3) == [4, 4, 2]
    assert split_sizes(30, 8) == [4] * 7 + [2]
    assert split_sizes(10, 8) == [2] * 5  # only five replicas


@pytest.mark.parametrize("batch,n", [(7, 2), (9, 4), (16, 3), (5, 8), (1, 3)])
def test_from_scratch_gradients_equal_full_batch(from_scratch, batch, n):
    data_parallel = from_scratch["data_parallel"]
    torch.manual_seed(batch * 10 + n)
    model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))
    x, y = torch.randn(batch, 5), torch.randn(batch, 3)

    model.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    full = [p.grad.clone() for p in model.parameters()]

    model.zero_grad()
    out, sizes = data_parallel(model, x, n)
    nn.functional.mse_loss(out, y).backward()
    assert sizes == [len(c) for c in x.chunk(n)]
    for a, b in zip(full, (p.grad for p in model.parameters())):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
