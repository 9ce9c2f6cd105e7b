"""The private APIs the planning page (docs/*/model-parallel/plan.md), the page on every
dimension at once (all-dims.md), the pipeline page (pipeline.md) and the expert page
(expert/index.md) teach exist in the torch the suite runs. They are private (an underscore,
or torch.testing._internal) and may change or vanish in any release; when one does, this test
names it before the page's programs fail with a traceback."""

from __future__ import annotations

import importlib

import pytest
import torch
import torch.distributed as dist

# (module, attribute, what the page uses it for)
PRIVATE = [
    ("torch.testing._internal.distributed.fake_pg", "FakeStore",
     'the store init_process_group("fake") makes when given none (plan.py, local.py)'),
    ("torch._subclasses.fake_tensor", "FakeTensorMode", "tensors with shapes and no data"),
    ("torch.utils._python_dispatch", "TorchDispatchMode", "the mode that counts collectives"),
    ("torch.distributed._local_tensor", "LocalTensorMode", "every rank's values in one process"),
    ("torch.distributed.device_mesh", "DeviceMesh._flatten",
     "all_dims.py: one mesh dimension made of several (fsdp x cp), as torchtitan does"),
    ("torch.distributed.device_mesh", "DeviceMesh._unflatten",
     "all_dims.py: a flattened dimension split again (dp x fsdp_cp)"),
    ("torch.distributed.distributed_c10d", "_resolve_process_group",
     "all_dims_traffic.py: which mesh dimension a counted collective ran on"),
    ("torch.distributed.fsdp", "FSDPModule._get_fsdp_state",
     "pipeline_fsdp.py: the parameter group whose shards and unsharded tensors it counts"),
    ("torch.distributed.fsdp._fully_shard._fsdp_param_group", "FSDPParamGroup",
     "pipeline_fsdp.py: its fsdp_params, each with sharded_param and _unsharded_param"),
    ("torch", "_grouped_mm", "expert/grouped.py, dedup.py: the experts as grouped GEMMs"),
    ("torch.distributed._functional_collectives", "all_to_all_single",
     "expert/dedup.py: the differentiable all-to-all that returns before it is waited on"),
    ("torch", "ops._c10d_functional.all_to_all_single",
     "expert/dedup.py: the op whose output splits the dispatch mode counts"),
]


@pytest.mark.parametrize("module, name, use", PRIVATE, ids=[f"{m}.{n}" for m, n, _ in PRIVATE])
def test_private_api_exists(module, name, use):
    try:
        found = importlib.import_module(module)
        for part in name.split("."):
            found = getattr(found, part, None)
    except ImportError as e:
        found, why = None, f"cannot import {module}: {e}"
    else:
        why = f"{module} has no {name}"
    assert found is not None, (f"torch {torch.__version__}: {why}. The site uses it "
                               f"for {use}: rewrite that program (plan.py, local.py, all_dims*.py, "
                               "pipeline_fsdp.py in "
                               "snippets/model_parallel/; grouped.py, dedup.py in "
                               "snippets/expert/) and its page for this torch.")


def test_the_fake_backend_is_registered():
    importlib.import_module("torch.testing._internal.distributed.fake_pg")
    assert getattr(dist.Backend, "FAKE", None) == "fake", (
        f"torch {torch.__version__}: dist.Backend has no FAKE = 'fake'; the planning page's "
        'init_process_group("fake", ...) needs it')
    assert "fake" in dist.Backend.backend_list, (
        f"torch {torch.__version__}: the 'fake' backend is not registered "
        f"(dist.Backend.backend_list = {dist.Backend.backend_list})")
