"""Every check bites: each program that compares with one process (or another reference) or
prints ``predicted … counted`` lines is run again with its parallel mechanism broken, and its
own check must then fail with its own message.

One entry per program (``MUTATIONS``): the program, the command its page runs it with, a named
and realistic mutation given as a source replacement (``old``, which must occur exactly once in
the program, so an entry cannot go stale silently, and ``new``), and ``must_fail``, a regex of
the program's own failure message. The reader's program stays clean: the test copies the
program's whole folder (programs import their siblings) into a temporary checkout-like folder
(``snippets/<chapter>/``), applies the replacement to the copy and runs the page's command there,
from that folder, in its own process group with a time limit (``pagerun.runner``'s warm start
where the command allows it). It passes when the run exits non-zero, within its time, and
prints ``must_fail``.

``test_every_check_has_an_entry`` keeps the table complete: every CPU recording that shows a
check (a cost line in the form of ``tests/test_costs.py``; a bounded figure,
``recordings.BOUNDED``: ``6.0e-08 (< 1e-6: equal up to float32 round-off)``; or an equality
verdict in words, ``torch.equal on all 4: True``) names in its command a program with an entry,
or with a reason in ``NOT_A_REFERENCE`` why no mutation applies. A program whose check does
not bite keeps its entry with ``blind`` saying what the run printed: an expected failure that
must not pass, and only when the run printed ``must_fail`` and exited 0 (``StillBlind``).

The runs take minutes on 2 cores (CONTRIBUTING.md, "Every check bites"), so they are a pass of
their own: ``make test-mutations`` (``DOCS_MUTATIONS=1``); ``make test`` checks the table (each
``old`` occurs once, each ``must_fail`` is absent from the clean recording, the completeness) and
skips the runs, with the reason.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import pytest

from pagerun import recordings, runner
from pagerun.pages import ROOT, Block

from test_costs import MENTIONS  # the cost contract's regexes (tests/ is on sys.path)

RUNS = os.environ.get("DOCS_MUTATIONS") == "1"
TIMEOUT = 180  # seconds for one mutated run (a dropped collective waits for its group's timeout)


class Mutation(NamedTuple):
    program: str  # snippets/<chapter>/<name>.py
    mutation: str  # what breaks, in words
    command: str  # as the page runs it, from the repository root
    old: str  # occurs exactly once in the program
    new: str
    must_fail: str  # regex of the program's own failure message
    # why the program's check does not catch it yet (what the run printed): the test is then
    # an expected failure that must not pass (xfail strict), until the check is fixed
    blind: str = ""
    # the block itself prints the program's exit status and ends with 0 (a shell script of
    # several launches): must_fail then holds that line, and no exit status is required
    reports_status: bool = False


# the FAQ's programs print a verdict and exit 0 either way (without --fix they show the pitfall)
TORCHRUN = "OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node={n} snippets/{p}"


def tr(n: int, program: str, args: str = "") -> str:
    return TORCHRUN.format(n=n, p=program) + (f" {args}" if args else "")


def py(program: str, args: str = "") -> str:
    return f"python snippets/{program}" + (f" {args}" if args else "")


MUTATIONS = [
    # --- collectives, DDP, DataParallel
    Mutation("collectives/ring.py", "send the wrong chunk in the reduce-scatter",
             tr(4, "collectives/ring.py"),
             "step(chunks[(rank - s - 1) % world], tmp)",
             "step(chunks[(rank - s) % world], tmp)",
             r"the ring disagrees with the formula or with torch:\n"
             r"(?:.*\n)*max \|ring - torch\|, integer-valued data"),
    Mutation("ddp/cost.py", "DDP built with 4 times the bucket cap the prediction assumes",
             tr(2, "ddp/cost.py"),
             "bucket_cap_mb=CAP_MB)", "bucket_cap_mb=CAP_MB * 4)",
             r"predicted != counted: .*step 2, buckets"),
    Mutation("ddp/train.py", "forget sampler.set_epoch: the same shuffle every epoch",
             tr(2, "ddp/train.py"),
             "    sampler.set_epoch(epoch)  #", "    pass  #",
             r"AssertionError: DDP did not match full-batch training"),
    Mutation("ddp/no_sync.py", "no_sync() on the last micro-batch too: never all-reduced",
             tr(2, "ddp/no_sync.py"),
             "ddp.no_sync() if skip_sync and not last", "ddp.no_sync() if skip_sync",
             r"AssertionError: after the synced backward every rank holds the same "
             r"gradient"),
    Mutation("ddp/elastic.py", "every rank trains on rank 0's part of the batch",
             tr(2, "ddp/elastic.py"),
             "mine = slice(rank * per_rank, (rank + 1) * per_rank)",
             "mine = slice(0, per_rank)",
             r"the weights differ from one process's"),
    Mutation("ddp/resume.py", "resume one step after the checkpoint's step",
             "set -o pipefail\nTORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 OMP_NUM_THREADS=1 \\\n"
             "  torchrun --standalone --nproc-per-node=2 --max-restarts=1 \\\n"
             "  snippets/ddp/resume.py --kill-at-step 5 2>&1 | grep -E \"^(attempt|done)\"",
             'start = ckpt["step"]', 'start = ckpt["step"] + 1',
             r"attempt 1: starting at step 5\n.*NOT equal"),
    Mutation("dp/dp_vs_ddp.py", "every DDP rank loads the global batch, not its share",
             tr(2, "dp/dp_vs_ddp.py"),
             "batch_size=BATCH // world, sampler=sampler",
             "batch_size=BATCH, sampler=sampler",
             r"AssertionError: DP and DDP disagree"),
    Mutation("dp/from_scratch.py", "every replica computes on the first chunk",
             py("dp/from_scratch.py"),
             "functional_call(replica, params, (chunks[i],))",
             "functional_call(replica, params, (chunks[0],))",
             r"AssertionError: from-scratch DP disagrees with the full batch"),
    Mutation("ddp/evaluate.py", "the forward through the wrapped module, bypassing DDP",
             tr(2, "ddp/evaluate.py"),
             "ddp(torch.randn(4, 4, device=device)).sum().backward()",
             "ddp.module(torch.randn(4, 4, device=device)).sum().backward()",
             r"Join vs one process, max diff \S+ \(>= 1e-6: NOT equal\)"),
    Mutation("training/amp_ddp.py", "the forward through the wrapped module, bypassing DDP",
             tr(2, "training/amp_ddp.py", "--dtype fp16 bf16"),
             "ddp_model(x * (1e4 if bad else 1.0))",
             "ddp_model.module(x * (1e4 if bad else 1.0))",
             r"AssertionError: replicas diverged"),
    # --- context parallelism
    Mutation("context/ring_attention.py",
             "the last backward pass skipped: dK, dV stay one rank short of their owner",
             tr(2, "context/ring_attention.py"),
             "buf = pass_on(buf if i < world - 1 else buf[2 * B:])()",
             "buf = pass_on(buf)() if i < world - 1 else buf[2 * B:]",
             r"predicted != counted or ring != full attention: .*sends per backward"),
    Mutation("context/ulysses.py",
             "heads and ranks swapped when the all-to-all's result is unpacked",
             tr(2, "context/ulysses.py"),
             "all_to_all(send).permute(1, 2, 0, 3, 4)",
             "all_to_all(send).permute(1, 0, 2, 3, 4)",
             r"predicted != counted or Ulysses != full attention"),
    Mutation("context/zigzag.py",
             "the block that arrived labelled as the right neighbour's, not the left's",
             tr(4, "context/zigzag.py"),
             "theirs = chunks_of((rank - i) % n)", "theirs = chunks_of((rank + i) % n)",
             r"predicted != counted or ring != full attention"),
    Mutation("context/torch_cp.py",
             "the output's gradient cut in plain chunks, not in CP's load-balanced order",
             tr(2, "context/torch_cp.py"),
             "        out.backward(cdout)",
             "        out.backward(dout.chunk(world, dim=2)[rank])",
             r"context_parallel\(\) != full attention"),
    Mutation("context/cp_rotate.py",
             "the rotate method never set: every ring call keeps the default all-gather",
             tr(2, "context/cp_rotate.py"),
             "    set_rotate_method(method)", "    set_rotate_method(\"allgather\")",
             r"predicted != counted or ring != full attention: "
             r"K/V held at once per rank, alltoall"),
    Mutation("context/cp_balance.py",
             "the tail chunk counted from the middle: chunks r and n+r of each document",
             tr(2, "context/cp_balance.py"),
             "if i in (rank, 2 * world - 1 - rank)]", "if i in (rank, world + rank)]",
             r"predicted != counted: causal pairs on the busiest rank"),
    # --- experts
    Mutation("expert/moe.py", "the replicated router's gradient not all-reduced",
             tr(2, "expert/moe.py"),
             "dist.all_reduce(ep.router.grad)", "ep.router.grad.mul_(1)",
             r"predicted != counted or not equal to one process: .*router gradients"),
    Mutation("expert/capacity.py",
             "the dispatch buffer sent with its experts in reverse order: each rank's "
             "slots go to the wrong experts",
             tr(2, "expert/capacity.py"),
             "dist.all_to_all_single(got.view(-1, H), buf.view(-1, H))",
             "dist.all_to_all_single(got.view(-1, H), buf.flip(0).view(-1, H))",
             r"predicted != counted or not equal to one process: .*not as one process"),
    Mutation("expert/grouped.py",
             "offs from the counts in reverse order: each expert's rows multiplied by "
             "another expert's weights",
             py("expert/grouped.py"),
             "offs = counts.cumsum(0).to(torch.int32)",
             "offs = counts.flip(0).cumsum(0).to(torch.int32)",
             r"predicted != counted or grouped != loop: .*output"),
    Mutation("expert/dedup.py",
             "the deduplication forgotten: the per-rank dispatch sends a token once per "
             "expert, the outputs still equal",
             tr(2, "expert/dedup.py"),
             "    if dedup:  # one row per (token, rank)",
             "    if False:  # one row per (token, rank)",
             r"predicted != counted or not equal to one process: .*per rank, token rows out"),
    # --- model parallelism: one process, FSDP, TP, 2-D
    Mutation("model_parallel/naive.py",
             "the activation detached at the stage boundary: stage 0 learns nothing",
             py("model_parallel/naive.py"),
             "return self.stage1(h.to(dev1))", "return self.stage1(h.detach().to(dev1))",
             r"AssertionError: the split model trained differently"),
    Mutation("model_parallel/checkpointing.py",
             "a block's input changed in place after its checkpointed forward: the "
             "recomputation in backward sees other values",
             py("model_parallel/checkpointing.py"),
             "h = checkpoint(block, h, use_reentrant=False)\n",
             "h_in, h = h, checkpoint(block, h, use_reentrant=False)\n"
             "                if h_in.grad_fn is not None:  # x, a leaf, cannot be\n"
             "                    h_in.mul_(1.5)\n",
             r"AssertionError: checkpointing changed the gradients"),
    Mutation("model_parallel/local.py",
             "the row-wise layer's all-reduce dropped: each rank keeps its partial sum",
             py("model_parallel/local.py"),
             '"2": RowwiseParallel()}',
             '"2": RowwiseParallel(output_layouts=__import__("torch").distributed'
             '.tensor.Partial())}',
             r"assert max\(max\(d\._local_tensors(?:.*\n)*AssertionError"),
    Mutation("model_parallel/fsdp.py", "every rank trains on the first part of the batch",
             tr(2, "model_parallel/fsdp.py"),
             "mine = slice(rank * 16 // world, (rank + 1) * 16 // world)",
             "mine = slice(0, 16 // world)",
             r"AssertionError: FSDP trained differently from one process"),
    Mutation("model_parallel/fsdp_save.py",
             "rank 0 saves its own shards as the full state dict",
             "OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \\\n"
             "    snippets/model_parallel/fsdp_save.py --save /tmp/fsdp-save\n"
             "python snippets/model_parallel/fsdp_save.py --convert /tmp/fsdp-save "
             "/tmp/fsdp-save.pt",
             'torch.save(full, args.save + ".full.pt")',
             'torch.save({k: v.to_local() for k, v in model.state_dict().items()}, '
             'args.save + ".full.pt")',
             r"equal to the full state dict of rank 0: False\n(?:.*\n)*AssertionError"),
    Mutation("model_parallel/fsdp_cost.py",
             "one hidden layer left out of fully_shard: it joins the root's unit",
             tr(2, "model_parallel/fsdp_cost.py"),
             "for layer in model[:6:2]:", "for layer in model[:4:2]:",
             r"predicted != counted: reshard=True, forward all-gathers"),
    Mutation("model_parallel/fsdp_clip.py",
             "the stages' sums of squares not all-reduced",
             tr(2, "model_parallel/fsdp_clip.py"),
             "dist.all_reduce(squares)", "squares.mul_(1)",
             r"AssertionError: the stages' clipped gradients differ from one "
             r"process's"),
    Mutation("model_parallel/fsdp_clip_mixed.py",
             "the groups' norms added, not combined as a 2-norm",
             tr(2, "model_parallel/fsdp_clip_mixed.py"),
             "total = torch.linalg.vector_norm(torch.stack(norms), norm_type)",
             "total = torch.stack(norms).sum()",
             r"AssertionError: the clipped gradients differ from one process's"),
    Mutation("model_parallel/fsdp_practice.py",
             "gradient sync never switched back on: no reduce-scatter",
             tr(2, "model_parallel/fsdp_practice.py"),
             "model.set_requires_gradient_sync(last)",
             "model.set_requires_gradient_sync(False)",
             r"AssertionError: FSDP trained differently from one process on the "
             r"whole batch"),
    Mutation("model_parallel/tensor.py",
             "the row-wise layer's all-reduce dropped: its partial sums are the output",
             tr(2, "model_parallel/tensor.py"),
             '"down": RowwiseParallel(),',
             '"down": RowwiseParallel(output_layouts=__import__("torch").distributed'
             '.tensor.Partial()),',
             r"AssertionError: not equal to one process: output"),
    Mutation("model_parallel/tensor_sp.py",
             "every rank feeds the first positions, not its own",
             tr(2, "model_parallel/tensor_sp.py"),
             "x_sp = x.chunk(world, dim=1)[rank]", "x_sp = x.chunk(world, dim=1)[0]",
             r"AssertionError: not equal to one process: loss"),
    Mutation("model_parallel/async_tp.py",
             "the reduce-scatter's own partial sum left out: only what arrived is added",
             tr(2, "model_parallel/async_tp.py"),
             "    total = total + h[rank * rows:(rank + 1) * rows] @ w_down",
             "    total = total + 0 * h[rank * rows:(rank + 1) * rows] @ w_down",
             r"micro-pipelined != the collective and matmul it replaces: "
             r"\['matmul \+ reduce-scatter'\]"),
    Mutation("model_parallel/tensor_cost.py",
             "SequenceParallel left off norm2: its weight gradient is this rank's "
             "positions only",
             tr(2, "model_parallel/tensor_cost.py"),
             'SequenceParallel() for m in ("norm1", "norm2")',
             'SequenceParallel() for m in ("norm1",)',
             r"AssertionError: TP \+ SP differs from one process"),
    Mutation("model_parallel/tensor_memory.py",
             "SequenceParallel left off the norm: its weight gradient is this rank's "
             "positions only",
             tr(2, "model_parallel/tensor_memory.py"),
             '} | ({"norm": SequenceParallel()} if sp else {})', "}",
             r"AssertionError: TP \+ SP differs from one process"),
    Mutation("model_parallel/twod.py",
             "the batch split by the tp rank, not the dp rank",
             tr(4, "model_parallel/twod.py"),
             "model(x.chunk(2)[dp])", "model(x.chunk(2)[tp])",
             r"AssertionError: 2D parallel training differs from one process"),
    Mutation("model_parallel/twod_cost.py",
             "FSDP keeps the gathered weights after forward (reshard_after_forward=False)",
             tr(4, "model_parallel/twod_cost.py"),
             'plan), mesh=mesh["dp"])',
             'plan), mesh=mesh["dp"], reshard_after_forward=False)',
             r"failed: .*all-gathers in backward"),
    Mutation("model_parallel/plan.py",
             "the blocks not wrapped by fully_shard: one unit for the whole stage",
             py("model_parallel/plan.py", "--model 70b --pp 8 --dp 8 --tp 8 --rank 511"),
             '    fully_shard(block, mesh=mesh["dp"])\n', "",
             r"predicted != counted: .*FSDP all-gathers per step"),
    Mutation("model_parallel/all_dims.py",
             "the fsdp ranks all take the dp rank's first rows",
             tr(8, "model_parallel/all_dims.py", "--fsdp 2 --tp 2 --pp 2"),
             'data = slice((at["dp"] * a.fsdp + at["fsdp"]) * rows, None)',
             'data = slice(at["dp"] * a.fsdp * rows, None)',
             r"predicted != counted or not equal to one process: loss and gradients"),
    # --- the FAQ's fixes (their --fix runs; without it each shows the pitfall)
    Mutation("model_parallel/faq_dtensor_copy.py",
             "each rank copies the first rows of the full tensor, not its own shard",
             tr(2, "model_parallel/faq_dtensor_copy.py", "--fix"),
             "model[0].weight.copy_(distribute_tensor(new, w.device_mesh, w.placements))",
             "model[0].weight.to_local().copy_(new[:w.to_local().shape[0]])",
             r">= 1e-6: not the model one process has"),
    Mutation("model_parallel/faq_load_full.py",
             "to_empty() again after loading: the loaded shards replaced by fresh memory",
             tr(2, "model_parallel/faq_load_full.py", "--fix"),
             "full_state_dict=True, broadcast_from_rank0=True))",
             "full_state_dict=True, broadcast_from_rank0=True)); "
             "model.to_empty(device=device)",
             r"assert diff == 0, diff\n(?:.*\n)*AssertionError: (?:nan|\d)"),
    Mutation("model_parallel/faq_lora.py", "every rank trains on the first part of the batch",
             tr(2, "model_parallel/faq_lora.py", "--fix"),
             "mine = slice(rank * 16 // world, (rank + 1) * 16 // world)",
             "mine = slice(0, 16 // world)",
             r">= 1e-5: not what one process trains"),
    Mutation("model_parallel/faq_pipeline_eval.py",
             "the validation run with step() outside no_grad under --fix too: its "
             "gradients reach the next training step",
             tr(2, "model_parallel/faq_pipeline_eval.py", "--fix"),
             "    with torch.no_grad():  # forward only: no backward, no graph kept\n"
             "        val = run(schedule.eval, xv, yv)\n",
             "    val = run(schedule.step, xv, yv)\n",
             r">= 1e-6: the evaluation's gradients were applied too"),
    Mutation("model_parallel/faq_tied.py", "every rank trains on the first part of the batch",
             tr(2, "model_parallel/faq_tied.py", "--fix"),
             "mine = slice(rank * 8 // world, (rank + 1) * 8 // world)",
             "mine = slice(0, 8 // world)",
             r"assert diff < 1e-5, diff\n(?:.*\n)*AssertionError: tensor\("),
    Mutation("model_parallel/faq_generate.py",
             "generate() not registered: it runs on the sharded weights",
             tr(2, "model_parallel/faq_generate.py", "--fix"),
             'register_fsdp_forward_method(model, "generate")', "None",
             r"got mixed torch\.Tensor and DTensor"),
    Mutation("production/faq_iterable.py",
             "the stream split by worker only, not by rank and worker",
             tr(2, "production/faq_iterable.py", "--fix"),
             "n, s = world * workers, rank * workers + worker", "n, s = workers, worker",
             r"each once: False\n(?:.*\n)*.*the ranks and workers did not share the stream"),
    Mutation("production/faq_compile_keys.py",
             "the wrapper's _orig_mod. keys saved, and the load told to accept a partial "
             "checkpoint, which silences the missing keys",
             "rm -rf /tmp/faq-keys-fix\n"
             "OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \\\n"
             "    snippets/production/faq_compile_keys.py /tmp/faq-keys-fix --fix",
             "dcp.save(get_model_state_dict(compiled), checkpoint_id=args.ckpt_dir)"
             "  # no _orig_mod.\n"
             "state = get_model_state_dict(plain)  # the same keys, from the plain model\n"
             "dcp.load(state, checkpoint_id=args.ckpt_dir)\n",
             "dcp.save(compiled.state_dict(), checkpoint_id=args.ckpt_dir)\n"
             "state = get_model_state_dict(plain)\n"
             "dcp.load(state, checkpoint_id=args.ckpt_dir,\n"
             "         planner=dcp.DefaultLoadPlanner(allow_partial_load=True))\n",
             r"torch\.equal on all 4: False(?:.*\n)*.*the plain model did not get the "
             r"weights saved"),
    Mutation("production/faq_optim_state.py",
             "the new optimizer's own (empty) state_dict() loaded, not get_state_dict's",
             "rm -rf /tmp/faq-optim-fix\n"
             "OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \\\n"
             "    snippets/production/faq_optim_state.py /tmp/faq-optim-fix --fix",
             "model_sd, optim_sd = get_state_dict(model2, opt2)  # creates Adam's state first",
             "model_sd, optim_sd = model2.state_dict(), opt2.state_dict()",
             r"!= 0: NOT the same run\)(?:.*\n)*.*the resumed run is not the uninterrupted"),
    Mutation("production/faq_resume_order.py",
             "set_epoch not called on the new sampler: it skips in epoch 0's order",
             tr(2, "production/faq_resume_order.py", "--fix"),
             "    sampler.set_epoch(epoch)  # the shuffle of the epoch that was stopped\n",
             "",
             r"same as uninterrupted: False(?:.*\n)*.*the resumed epoch is not the "
             r"uninterrupted one"),
    Mutation("production/faq_worker_seeds.py",
             "the loader's generator seeded alike on every rank",
             tr(2, "production/faq_worker_seeds.py", "--fix"),
             "torch.Generator().manual_seed(1234 + rank)",
             "torch.Generator().manual_seed(1234)",
             r"8 of 8 positions(?:.*\n)*.*the ranks still draw the same augmentations"),
    Mutation("model_parallel/faq_generate_sync.py",
             "the done flags combined with MAX: every rank stops when the first is done",
             tr(2, "model_parallel/faq_generate_sync.py", "--fix"),
             "dist.all_reduce(done, op=dist.ReduceOp.MIN)",
             "dist.all_reduce(done, op=dist.ReduceOp.MAX)",
             r"same tokens on every rank as one process: False\n(?:.*\n)*"
             r".*with --fix: not the tokens one process generates"),
    Mutation("model_parallel/faq_after_forward.py",
             "each rank reads its shard with to_local(), not the whole weight",
             tr(2, "model_parallel/faq_after_forward.py", "--fix"),
             "norms = [p.full_tensor().norm() for p in model.parameters()]  # whole",
             "norms = [p.to_local().norm() for p in model.parameters()]  # whole",
             r">= 1e-6: not the weights one process has"),
    Mutation("model_parallel/faq_from_local.py",
             "the global shape left to from_local to guess from uneven pieces",
             tr(2, "model_parallel/faq_from_local.py", "--fix"),
             "shape=full.shape, stride=full.stride())  # not guessed",
             ")  # not guessed",
             r"global shape on each rank: \[\(8, 2\), \(6, 2\)\]\n(?:.*\n)*"
             r".*with --fix: not the tensor one process has"),
    Mutation("model_parallel/faq_dtensor_mask.py",
             "the picked rows declared Replicate: each rank's columns taken for the whole",
             tr(2, "model_parallel/faq_dtensor_mask.py", "--fix"),
             "picked = DTensor.from_local(logits.to_local()[keep], mesh, logits.placements)",
             "picked = DTensor.from_local(logits.to_local()[keep], mesh, [Replicate()])",
             r">= 1e-6: not what one process picks"),
    Mutation("model_parallel/faq_tokens.py",
             "the valid tokens not all-reduced: each rank divides by its own count",
             tr(2, "model_parallel/faq_tokens.py", "--fix"),
             "dist.all_reduce(valid)  #", "valid.mul_(1)  #",
             r">= 1e-6: not the gradient of the mean over all tokens"),
    # --- pipelines
    Mutation("model_parallel/pipeline.py",
             "the schedule never scales the gradients by the micro-batches",
             tr(2, "model_parallel/pipeline.py"),
             "loss_fn=loss_fn, scale_grads=scale_grads",
             "loss_fn=loss_fn, scale_grads=False",
             r"AssertionError: the gradients are not the full-batch gradient"),
    Mutation("model_parallel/pipeline_interleaved.py",
             "the loss summed, not averaged, over each micro-batch",
             tr(2, "model_parallel/pipeline_interleaved.py"),
             "n_microbatches=m, loss_fn=nn.MSELoss())",
             'n_microbatches=m, loss_fn=nn.MSELoss(reduction="sum"))',
             r"gradients not the unsplit model's \(max rel diff >= 1e-4\): \['GPipe'"),
    Mutation("model_parallel/pipeline_cost.py",
             "the schedule given half the micro-batches the prediction assumes",
             tr(2, "model_parallel/pipeline_cost.py"),
             "stages[0], n_microbatches=m,", "stages[0], n_microbatches=m // 2,",
             r"predicted != counted: GPipe, sends per step, rank 0"),
    Mutation("model_parallel/pipeline_memory.py",
             "the 1F1B pipeline built with GPipe's schedule",
             tr(2, "model_parallel/pipeline_memory.py"),
             '("1F1B", Schedule1F1B, 1)', '("1F1B", ScheduleGPipe, 1)',
             r"predicted != counted: 1F1B, peak, rank 0"),
    Mutation("model_parallel/pipeline_fsdp.py",
             "the loop never tells FSDP which backward is the last",
             tr(2, "model_parallel/pipeline_fsdp.py"),
             "        stage.set_is_last_backward(last)  # keeps the backward prefetch order\n",
             "", r"failed: all-gather per step, reshard"),
    Mutation("model_parallel/zero_bubble.py",
             "the loss summed, not averaged, over each micro-batch",
             tr(2, "model_parallel/zero_bubble.py"),
             "loss_fn=nn.MSELoss())", 'loss_fn=nn.MSELoss(reduction="sum"))',
             r"predicted != counted, or gradients not the unsplit model's: \['GPipe'"),
    Mutation("model_parallel/zero_bubble_memory.py",
             "stages overlap by a layer (an off-by-one in the split)",
             tr(2, "model_parallel/zero_bubble_memory.py"),
             "return full[L * s // S:L * (s + 1) // S]",
             "return full[L * s // S:L * (s + 1) // S + 1]",
             r"predicted != counted: 1F1B, rank 0"),
    Mutation("model_parallel/zero_bubble_traps.py",
             "scale_grads not passed on: always True",
             tr(2, "model_parallel/zero_bubble_traps.py"),
             "scale_grads=scale)", "scale_grads=True)",
             r"AssertionError: gradients are not what scale_grads promises"),
    # --- production
    # --- model shapes (one process: the model's structure against the formula)
    Mutation("shapes/params.py", "a tied embedding counted twice",
             py("shapes/params.py"),
             "counted = sum(p.numel() for p in m.parameters())",
             "counted = sum(p.numel() for _, p in "
             "m.named_parameters(remove_duplicate=False))",
             r"predicted != counted or published: Llama, tied"),
    Mutation("shapes/flops.py", "attention counted under the CPU's flash kernel",
             py("shapes/flops.py"),
             "def counted(m, kernel=SDPBackend.MATH):",
             "def counted(m, kernel=SDPBackend.FLASH_ATTENTION):",
             r"predicted != counted: Llama, attention"),
    Mutation("shapes/activations.py",
             "the Llama-3-70B-shaped layer built with a K/V head per query head (no GQA)",
             py("shapes/activations.py"),
             '("Llama-3-70B ratios", Layer(H, HEADS, 1, 896),',
             '("Llama-3-70B ratios", Layer(H, HEADS, HEADS, 896),',
             r"predicted != counted: .*Llama-3-70B ratios, attention"),
    Mutation("model_parallel/fsdp_reduce_dtype.py",
             "reduce_dtype left out of the policy: gradients reduced in param_dtype",
             tr(2, "model_parallel/fsdp_reduce_dtype.py"),
             "MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=reduce_dtype)",
             "MixedPrecisionPolicy(param_dtype=torch.bfloat16)",
             r"predicted != counted: reduce fp32, reduce-scatter in bfloat16"),
    Mutation("model_parallel/fsdp_fp8_gather.py",
             "the gathered float8 bytes decoded without their scale",
             tr(2, "model_parallel/fsdp_fp8_gather.py"),
             "gathered.view(torch.float8_e4m3fn).float() / scale",
             "gathered.view(torch.float8_e4m3fn).float()",
             r"fp8 weights differ from bf16 by"),
    Mutation("shapes/chunked_loss.py",
             "each chunk's gradient divided by the chunk's tokens, not by all the tokens",
             py("shapes/chunked_loss.py"),
             "p *= grad / len(x)", "p *= grad / len(p)",
             r"chunked != full: grad of x, grad of w"),
    Mutation("production/activations.py",
             "selective checkpointing's policy misses addmm: Linear outputs recomputed",
             py("production/activations.py"),
             "LINEAR = {aten.addmm.default, aten.mm.default}", "LINEAR = {aten.mm.default}",
             r"predicted != counted: .*selective, bytes kept"),
    Mutation("production/affinity.py",
             "every process binds to the first share (local rank ignored)",
             tr(2, "production/affinity.py"),
             "first = local_rank * size + min(local_rank, extra)", "first = 0",
             r"predicted != counted: shared"),
    Mutation("production/amp_clip.py", "skip unscale_ before clipping",
             py("production/amp_clip.py"),
             "        scaler.unscale_(opt)", "        pass",
             r"a check failed: see the lines above"),
    Mutation("production/budget.py",
             "the budget never reaches the compiler (always 1.0)",
             py("production/budget.py"),
             "functorch_config.patch(activation_memory_budget=budget)",
             "functorch_config.patch(activation_memory_budget=1.0)",
             r"budget 0\.0: predicted != counted, or the gradients differ"),
    Mutation("production/comm_hooks.py",
             "the fp16 hook registered as DDP's uncompressed one",
             tr(2, "production/comm_hooks.py"),
             '"fp16_compress_hook": default_hooks.fp16_compress_hook,',
             '"fp16_compress_hook": default_hooks.allreduce_hook,',
             r"predicted != counted or a bound not met: fp16_compress_hook"),
    Mutation("production/dcp_async.py",
             "every rank saves alone (no_dist=True), each into its own folder: the "
             "checkpoint read back holds rank 0's shards only",
             tr(2, "production/dcp_async.py"),
             'checkpoint_id=f"{root}/sync",\n         process_group=ckpt_group)',
             'checkpoint_id=f"{root}/sync" + ("" if rank == 0 else f"-{rank}"),\n'
             '         process_group=ckpt_group, no_dist=True)',
             r"predicted != counted: bytes written by rank\(s\) \[1\]"),
    Mutation("production/ddp_buckets.py",
             "DDP built without the options the prediction assumes",
             tr(2, "production/ddp_buckets.py"),
             "              **ddp_args)", "              )",
             r"predicted != counted: .*bucket_cap_mb=1\), buckets"),
    Mutation("production/fp8_fsdp.py", "the float8 all-gather never switched on",
             tr(2, "production/fp8_fsdp.py"),
             "enable_fsdp_float8_all_gather=float8_gather",
             "enable_fsdp_float8_all_gather=False",
             r"predicted != counted, or outputs differ: \['float8 all-gather, bytes"),
    Mutation("production/fp8_numerics.py",
             "row-wise scaling computed over the whole tensor",
             py("production/fp8_numerics.py"),
             "amax = x.abs().amax(dim=-1, keepdim=True) if rowwise else x.abs().amax()",
             "amax = x.abs().amax()",
             r"a figure is outside its bound: see the lines above"),
    Mutation("production/fsdp_reshard.py",
             "gradient sync left on for every micro-batch: a reduce-scatter each",
             tr(4, "production/fsdp_reshard.py"),
             "model.set_requires_gradient_sync(last)",
             "model.set_requires_gradient_sync(True)",
             r"predicted != counted, or not one process's weights: .*case 4, "
             r"reduce-scatters"),
    Mutation("production/ft_replicas.py",
             "the restarted group not healed: its model state is not loaded",
             py("production/ft_replicas.py"),
             'load_state_dict=lambda sd: (model.load_state_dict(sd["model"]),',
             "load_state_dict=lambda sd: (None,",
             r"fault tolerance failed"),
    Mutation("production/offload.py",
             "the forward runs outside save_on_cpu's hooks: nothing offloaded",
             py("production/offload.py"),
             "    with torch.autograd.graph.saved_tensors_hooks(*hooks):\n"
             "        out = wrap(model, x)\n",
             "    out = wrap(model, x)\n",
             r"predicted != counted: save_on_cpu, bytes on the host"),
    Mutation("production/powersgd.py",
             "PowerSGD's approximation rank not passed on: always 1",
             tr(2, "production/powersgd.py"),
             "matrix_approximation_rank=r,", "matrix_approximation_rank=1,",
             r"predicted != counted or a bound not met: powerSGD_hook r=2 \(bytes\)"),
    Mutation("production/profile_step.py",
             "no_sync() left on in every case: DDP never all-reduces",
             tr(2, "production/profile_step.py"),
             "with ddp.no_sync() if by_hand else contextlib.nullcontext():",
             "with ddp.no_sync():",
             r"predicted != counted: overlap: all-reduces launched"),
    Mutation("production/dcp_reshard.py",
             "DCP loads into copies of the TP model's state dict, which are dropped",
             "OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \\\n"
             "  snippets/production/dcp_reshard.py --save /tmp/reshard\n"
             "OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \\\n"
             "  snippets/production/dcp_reshard.py --load-tp /tmp/reshard\n"
             "python snippets/production/dcp_reshard.py --load-one /tmp/reshard\n"
             "python snippets/production/dcp_convert.py /tmp/reshard",
             'dcp.load({"model": sd}, checkpoint_id=args.load_tp)',
             'dcp.load({"model": {k: v.clone() for k, v in sd.items()}}, '
             'checkpoint_id=args.load_tp)',
             r"torch\.equal on all 4: False\n(?:.*\n)*the loaded weights differ from the "
             r"saved ones"),
    Mutation("production/dcp_resume.py", "resume one step after the checkpoint's step",
             "rm -rf /tmp/resume-a /tmp/resume-b\n"
             "OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 \\\n"
             "  snippets/production/dcp_resume.py --ckpt-dir /tmp/resume-a \\\n"
             "  --save-final /tmp/resume-a.pt\n"
             "set -o pipefail\n"
             "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 OMP_NUM_THREADS=1 torchrun --standalone "
             "\\\n"
             "  --nproc-per-node=2 --max-restarts=1 snippets/production/dcp_resume.py \\\n"
             "  --ckpt-dir /tmp/resume-b --kill-at-step 8 --compare /tmp/resume-a.pt 2>&1 "
             "\\\n"
             '  | grep -E "^(attempt|saved|done|final)"',
             'step = int(box[0].split("-")[1])', 'step = int(box[0].split("-")[1]) + 1',
             r"torch\.equal on all 4 tensors: False"),
    Mutation("production/preempt.py", "resume one step after the checkpoint's step",
             "dir=$(mktemp -d)  # the checkpoint folder; torchrun's log beside it\n"
             "export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 OMP_NUM_THREADS=1\n"
             "torchrun --standalone --nproc-per-node=2 --max-restarts=3 \\\n"
             "  snippets/production/preempt.py --ckpt-dir $dir \\\n"
             "  --signal-workers-at-step 5 --wait-at-step 8 > $dir.log 2>&1 &\n"
             "pid=$!  # torchrun: at step 8 this shell plays Slurm and signals it\n"
             "for i in $(seq 600); do [ -e $dir/waiting ] && break; sleep 0.1; done\n"
             "kill -TERM $pid\n"
             "wait $pid; status=$?\n"
             'grep -oE "^(attempt|signal|done|against).*" $dir.log  # the program\'s lines\n'
             'grep -oE -e "failed \\(exitcode: [0-9]+\\)" -e "Received [0-9]+ death signal" '
             "\\\n"
             "  $dir.log  # torchrun's, after them: the two write to the log at once\n"
             'echo "launch 1: torchrun ended with status $status"\n'
             "set -o pipefail  # launch 2, the job requeued: a new torchrun, the same "
             "folder\n"
             "torchrun --standalone --nproc-per-node=2 --max-restarts=3 \\\n"
             "  snippets/production/preempt.py --ckpt-dir $dir 2>&1 \\\n"
             '  | grep -oE "^(attempt|done|against).*"\n'
             'echo "launch 2: torchrun ended with status $?"\n'
             "rm -rf $dir $dir.log",
             'step = state["step"]', 'step = state["step"] + 1',
             r"torch\.equal on all 4 tensors: False\nlaunch 2: torchrun ended with status "
             r"[1-9]", reports_status=True),
    Mutation("production/start_methods.py", "the fork case started with spawn",
             py("production/start_methods.py"),
             '(("fork", "fork"),', '(("fork", "spawn"),',
             r"not as predicted: fork"),
]
MUTATIONS = [m._replace(program=f"snippets/{m.program}") for m in MUTATIONS]

# Programs whose check compares with no reference a mutation of a parallel mechanism could
# move: program -> why.
NOT_A_REFERENCE: dict[str, str] = {
    "snippets/cuda/determinism.py":
        "five runs of one op on one device against each other; the CPU's index_add_ has "
        "no nondeterministic kernel to swap in, and nothing runs in parallel",
    "snippets/dp/cpu_only.py":
        "shows that DataParallel without a GPU calls the module itself: there is no "
        "parallel mechanism to break",
    "snippets/production/fp8_train.py":
        "its bounds are tolerances of training quality (float8 within 10 % of bfloat16's "
        "first output, within 20 % of its final loss), one process, nothing parallel",
}


def _id(m: Mutation) -> str:
    return m.program.removeprefix("snippets/")


# --------------------------------------------------------------------------------------------
# the table is current and complete (cheap: part of make test)

@pytest.mark.parametrize("m", MUTATIONS, ids=_id)
def test_entry_is_current(m):
    path = ROOT / m.program
    assert path.is_file(), f"{m.program}: no such program"
    source = path.read_text(encoding="utf-8")
    count = source.count(m.old)
    assert count == 1, (f"{m.program}: the text to mutate occurs {count} times, not once "
                        f"(the program changed: update the entry)\n{m.old}")
    assert m.old != m.new
    assert m.program in m.command, f"{m.program}: the command runs another program"
    blocks = [b for b in _page_blocks() if _joined(m.command) == _joined(b.code)]
    assert blocks, f"{m.program}: no page runs `{m.command}`"
    # the message is the failure's own: the clean run's recording does not have it
    for block in blocks:
        rec = block.key and recordings.load("cpu", block.key)
        assert rec, f"{m.program}: `{m.command}` has no CPU recording"
        assert not re.search(m.must_fail, rec.body), (
            f"{m.program}: /{m.must_fail}/ is in the clean run's recording {block.key}")


def test_one_entry_per_program():
    seen = [m.program for m in MUTATIONS]
    assert sorted(set(seen)) == sorted(seen), sorted({p for p in seen if seen.count(p) > 1})
    both = set(seen) & set(NOT_A_REFERENCE)
    assert not both, f"both an entry and a reason not to have one: {sorted(both)}"


def _joined(code: str) -> str:
    return " ".join(code.replace("\\\n", " ").split())


_BLOCKS: list[Block] | None = None


def _page_blocks() -> list[Block]:
    global _BLOCKS
    if _BLOCKS is None:
        from pagerun import pages

        _BLOCKS = [b for b in pages.all_blocks() if b.page_rel.startswith("docs/en/")]
    return _BLOCKS


# an equality verdict in words: "torch.equal on all 4: True", "replicas identical: True",
# "dp(x) equals model(x): True", "equal to the full state dict of rank 0: True"
EQUAL_WORDS = re.compile(r"torch\.equal|\bidentical\b|\bequals?\b.*: (?:True|False)$"
                         r"|\bequal to\b.*: (?:True|False)$", re.M)


def checked_recordings() -> dict[str, list[str]]:
    """CPU recording -> the programs its command names, for every recording that shows a
    check: a cost line, a bounded figure, or an equality verdict in words."""
    found: dict[str, list[str]] = {}
    cpu = recordings.OUTPUTS / "cpu"
    for path in sorted(cpu.rglob("*.txt")):
        rec = recordings.load_file(path, "cpu", "")
        body = rec.body
        if (any(MENTIONS.search(line) for line in body.splitlines())
                or recordings.BOUNDED.search(body) or EQUAL_WORDS.search(body)):
            programs = re.findall(r"snippets/[\w/.-]+\.py", rec.meta.get("command", ""))
            if programs:
                found[path.relative_to(cpu).as_posix()] = sorted(set(programs))
    return found


def test_every_check_has_an_entry():
    """One program of each such recording's command has an entry (or a reason not to)."""
    have = {m.program for m in MUTATIONS} | set(NOT_A_REFERENCE)
    missing = {r: p for r, p in checked_recordings().items() if not have & set(p)}
    assert not missing, (
        "recordings that print a cost line, a bounded figure or an equality verdict, whose "
        "programs have no mutation in tests/test_mutations.py (MUTATIONS) that shows their "
        "check bites:\n" + "\n".join(f"  outputs/cpu/{r}: {', '.join(p)}"
                                     for r, p in sorted(missing.items())))


# --------------------------------------------------------------------------------------------
# each mutation is caught (make test-mutations)

def _copy(m: Mutation, into: Path) -> None:
    """The program's folder under into/snippets/<chapter>/, with the mutation applied."""
    src = ROOT / m.program
    dest = into / m.program
    shutil.copytree(src.parent, dest.parent,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    text = src.read_text(encoding="utf-8")
    assert text.count(m.old) == 1
    dest.write_text(text.replace(m.old, m.new), encoding="utf-8")


def run_in(command: str, cwd: Path, timeout: float) -> runner.Result:
    """``command`` from ``cwd`` as a page block runs from the repository root: warm where the
    engine can start it so, else ``bash -c``; its own process group, killed at the end."""
    block = Block(page=ROOT / "docs", lineno=0, syntax="bash", code=command + "\n")
    start = time.monotonic()
    cmds = runner.warm_commands(block)
    if cmds:
        from pagerun import warmpool

        out, code, timed_out = [], 0, False
        for assigns, argv in cmds:
            e = dict(runner.env(), **assigns)
            if argv[0] == "torchrun":
                argv = [shutil.which("torchrun", path=e["PATH"]) or "torchrun", *argv[1:]]
                e = warmpool.worker_env(e)
            text, code, timed_out = warmpool.run(argv, e, str(cwd),
                                                 timeout - (time.monotonic() - start))
            out.append(text)
            if timed_out:
                break
        return runner.Result(code, "".join(out), time.monotonic() - start, timed_out, "warm")
    e = runner.env()
    if runner.warm_on() and "torchrun" in command:
        from pagerun import warmpool

        e = warmpool.worker_env(e)
    proc = subprocess.Popen(["bash", "-c", command], cwd=cwd, env=e, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    timed_out = False
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        runner.kill_group(proc.pid)
        out, _ = proc.communicate()
    finally:
        runner.kill_group(proc.pid)
    return runner.Result(proc.returncode, out.decode("utf-8", "replace"),
                         time.monotonic() - start, timed_out)


# torchrun's own report of a failed worker (its traceback, ChildFailedError): after the
# program's output, and the same for every program
_AGENT = re.compile(r"^[EW]\d{4} .*torch/distributed/elastic/", re.M)


def _shown(output: str, n: int = 40) -> str:
    """The program's last lines, before torchrun's report of the failure."""
    m = _AGENT.search(output)
    lines = output[:m.start() if m else len(output)].rstrip().splitlines()
    return "\n".join(lines[-n:])


def mutated_run(m: Mutation) -> runner.Result:
    """The mutated copy, run by the page's command; a block of several commands stops at the
    first that fails (``set -e``: the mutated program's exit status, not the last command's),
    and the files it names under /tmp/ go to the temporary folder (a page run beside it
    uses the same names)."""
    with tempfile.TemporaryDirectory(prefix="mutation-") as tmp:
        _copy(m, Path(tmp))
        files = Path(tmp) / "tmp"
        files.mkdir()
        command = m.command.replace("/tmp/", f"{files}/")
        if "\n" in command.replace("\\\n", "") and not m.reports_status:
            command = "set -e\n" + command
        return run_in(command, Path(tmp), TIMEOUT)


@pytest.fixture(scope="module")
def _all_started(request):
    """The selected mutated runs, started at once in the engine's pool (DOCS_JOBS at a time),
    the longest first; each test then waits for its own."""
    jobs = int(os.environ.get("DOCS_JOBS", max(2, 3 * (os.cpu_count() or 1) // 2)))
    chosen = [i.callspec.params["m"] for i in request.session.items
              if getattr(i, "originalname", "") == "test_mutation_is_caught"]
    seconds = runner._measured()  # by the page block's command (block_costs.json)
    page = {_joined(b.code): runner.command_of(b) for b in _page_blocks()}
    for m in sorted(chosen, key=lambda m: -seconds.get(page.get(_joined(m.command), ""),
                                                       (30.0,))[0]):
        runner.background(f"mutation:{m.program}", mutated_run, m, jobs=jobs)


SKIP = pytest.mark.skipif(not RUNS, reason="the mutated runs are a pass of their own: "
                          "`make test-mutations` (DOCS_MUTATIONS=1; .ci/run runs it)")


class StillBlind(AssertionError):
    """A blind entry's run did what its note says: printed must_fail and exited 0."""


@SKIP
@pytest.mark.parametrize("m", [pytest.param(m, marks=pytest.mark.xfail(
    strict=True, raises=StillBlind, reason=f"the check does not bite yet: {m.blind}"))
    if m.blind else m for m in MUTATIONS], ids=_id)
def test_mutation_is_caught(m, _all_started):
    res = runner.result(f"mutation:{m.program}", mutated_run, m)
    head = (f"{m.program}, mutated ({m.mutation}): {m.old!r} -> {m.new!r}\n"
            f"command: {m.command}\n")
    tail = _shown(res.output)
    assert not res.timed_out, f"{head}timed out after {TIMEOUT} s; output (tail):\n{tail}"
    if m.blind and res.exit == 0 and re.search(m.must_fail, res.output):
        raise StillBlind(f"{head}{m.blind}")  # the expected failure, and no other one
    if not m.reports_status:
        assert res.exit != 0, f"{head}exit 0: the check did not fail; output (tail):\n{tail}"
    assert re.search(m.must_fail, res.output), (
        f"{head}exit {res.exit}, but its own message /{m.must_fail}/ is not in the output "
        f"(tail):\n{tail}")
