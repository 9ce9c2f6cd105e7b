"""Every snippet module is included by a page and run by a page's command, and its run matches
the recorded output. (With --codeblocks the page blocks themselves are collected as well; a
command that appears more than once runs once per session.)"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from pagerun import pages, runner, warmpool

ALL_BLOCKS = pages.all_blocks()
SNIPPET_FILES = sorted(p.relative_to(pages.ROOT).as_posix() for p in pages.SNIPPETS.rglob("*.py"))
INCLUDED = {inc.split(":")[0] for p in pages.pages() for inc in pages.includes(p)}


@pytest.mark.parametrize("path", SNIPPET_FILES)
def test_snippet_is_shown_on_a_page(path):
    assert path in INCLUDED, f"{path}: no page includes it (--8<-- \"{path}:section\")"


@pytest.mark.parametrize("path", SNIPPET_FILES)
def test_snippet_runs(path, request):
    runs = {b.code: b for b in ALL_BLOCKS if path in b.snippets}
    assert runs, f"{path}: no page runs it (a ```bash block with `python {path}` or `torchrun ... {path}`)"
    skipped = []
    for block in runs.values():
        reason = runner.unmet(block.marks)
        if reason:
            skipped.append(reason)
            continue
        try:
            runner.check(block, update=request.config.option.update_outputs)
        except runner.Mismatch as e:
            pytest.fail(str(e), pytrace=False)
    if len(skipped) == len(runs):
        pytest.skip(skipped[0])


GPU_ONLY = sorted({p for p in SNIPPET_FILES
                   if (uses := [b for b in ALL_BLOCKS if p in b.snippets])
                   and all(any(m.startswith(("pytest.mark.needs_cuda", "pytest.mark.needs_2_gpus"))
                               for m in b.marks) for b in uses)})


# One interpreter runs every GPU-only program in turn (runpy, as `python PATH` would), so that
# the check costs one `import torch`, not one per program.
# torchrun programs see the environment of a one-process torchrun job.
_REFUSE = """
import contextlib, io, json, os, runpy, socket, sys, traceback
out = {}
for path in sys.argv[1:]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1",
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    buf, code = io.StringIO(), 0
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        sys.argv = [path]
        try:
            runpy.run_path(path, run_name="__main__")
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
            if e.code is not None and not isinstance(e.code, int):
                print(e.code, file=sys.stderr)
        except BaseException:
            code = "exception"
            traceback.print_exc()
    out[path] = [code, buf.getvalue()]
print(json.dumps(out))
"""


def _run_refusals() -> dict:
    """Through the warm server (pagerun.warmpool: torch already imported) where it runs."""
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "refuse.py"
        script.write_text(_REFUSE, encoding="utf-8")
        if runner.warm_on():
            out, _, _ = warmpool.run([str(script), *GPU_ONLY], runner.env(), pages.ROOT, 300)
        else:
            out = subprocess.run([sys.executable, str(script), *GPU_ONLY], cwd=pages.ROOT,
                                 capture_output=True, text=True, timeout=300).stdout
    return json.loads([line for line in out.splitlines() if line.startswith("{")][-1])


def _refusals() -> dict:
    return runner.result("gpu-only-refusals", _run_refusals)


def pagerun_background():
    """Without the GPUs, the GPU-only programs' run starts with the blocks (one interpreter)."""
    needed = any(runner.unmet([b for b in ALL_BLOCKS if p in b.snippets][0].marks)
                 for p in GPU_ONLY)
    return [("gpu-only-refusals", _run_refusals, ())] if needed else []


@pytest.mark.parametrize("path", GPU_ONLY)
def test_gpu_only_snippet_refuses_to_run_without_gpu(path):
    """Never a silent success: without the GPUs it needs, a GPU-only program exits non-zero and says why."""
    runs = [b for b in ALL_BLOCKS if path in b.snippets]
    if runner.unmet(runs[0].marks) is None:
        pytest.skip("this machine has the GPUs it needs: the program itself is run by test_snippet_runs")
    code, output = _refusals()[path]
    assert code not in (0, None), f"{path} exited 0 without a GPU:\n{output}"
    assert code != "exception", f"{path} crashed instead of refusing cleanly:\n{output}"
    assert "GPU" in output, output
