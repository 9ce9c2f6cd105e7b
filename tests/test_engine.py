"""The engine itself (pagerun): blocks run with the test interpreter in any environment, the warm
runner prints exactly what a shell run prints, failures are readable, recordings know their
programs."""

from __future__ import annotations

import signal
import subprocess
import threading
import sys
from pathlib import Path

import pytest

from pagerun import pages, recordings, runner, warmpool

SHOW_ENV = "import sys; print(sys.prefix); print(sys.executable)"


def _block(code: str, **kw) -> pages.Block:
    return pages.Block(pages.DOCS / "en" / "index.md", 1, "bash", code, **kw)


@pytest.fixture
def warm_server():
    """The fork server, where it can start a program as a fresh interpreter would; else the test
    is skipped with the reason the server gave."""
    reason = warmpool.cold_reason()
    if reason:
        pytest.skip(f"every program starts as a fresh interpreter here: {reason}")


BAD_FORK = "import torch; print(getattr(torch._C, '_cuda_isInBadFork', lambda: 'no guard')())"


def test_a_warm_program_can_use_cuda_as_a_fresh_one_can(tmp_path):
    """torch's fork guard: a process forked after its parent asked CUDA anything cannot use CUDA
    ("Cannot re-initialize CUDA in forked subprocess"), and torch 2.11's inductor asks at import.
    The server never forks a program in that state: it avoids it, or starts none and says why."""
    prog = tmp_path / "bad_fork.py"
    prog.write_text(BAD_FORK + "\n")
    reason = warmpool.cold_reason()
    if reason is None:
        out, code, _ = warmpool.run([str(prog)], runner.env(), tmp_path, 60)
        assert (code, out.strip()) in ((0, "False"), (0, "no guard")), out
    else:
        assert "fork guard" in reason and not runner.warm_on()


def test_the_server_sees_an_armed_fork_guard():
    """The check above can fail: after a question to CUDA, a forked child is in a bad fork."""
    code = ("import torch; from pagerun import warmpool\n"
            "if not hasattr(torch._C, '_cuda_isInBadFork'): print('no guard'); raise SystemExit\n"
            "print(warmpool._fork_guard_armed(), end=' '); torch._C._cuda_getDeviceCount()\n"
            "print(warmpool._fork_guard_armed())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=pages.ROOT, env=runner.env()).stdout.strip()
    if out == "no guard":
        pytest.skip("a CPU build of torch has no CUDA fork guard")
    assert out.endswith("True"), out


def test_a_block_runs_the_interpreter_that_runs_the_tests():
    """`python` in a block is this interpreter, in its environment (venv, conda, system...)."""
    for cmd in ("python", "python3"):
        res = runner.run(_block(f'{cmd} -c "{SHOW_ENV}"'), warm=False)
        assert res.exit == 0, res.output
        assert res.output.split() == [sys.prefix, sys.executable], res.output


def test_a_warm_block_runs_in_the_same_environment(warm_server, tmp_path):
    prog = tmp_path / "show.py"
    prog.write_text(SHOW_ENV + "\nimport os; print(os.getcwd()); print(sys.argv)\n")
    out, code, timed_out = warmpool.run([str(prog), "--x", "1"], runner.env(), tmp_path, 60)
    assert (code, timed_out) == (0, False), out
    assert out.split("\n")[:4] == [sys.prefix, sys.executable, str(tmp_path),
                                   str([str(prog), "--x", "1"])], out


def _sample() -> list[pages.Block]:
    """Warm-capable page blocks: one with arguments, one that exits non-zero, one with CUDA_*,
    a torchrun command, and a program that starts processes itself (the cheapest of each)."""
    warm = {b.code: b for b in pages.all_blocks("en")
            if runner.warm_commands(b, server=False)}.values()  # warm_server skips if cold
    picks = [next((b for b in warm if " --" in b.code and b.exit == 0
                   and "torchrun" not in b.code), None),  # torchrun: the hello pick
             next((b for b in warm if b.exit != 0 and "hang" not in b.code), None),
             next((b for b in warm if "CUDA_VISIBLE_DEVICES" in b.code), None),
             next((b for b in warm if "snippets/dp/" in b.code), None),
             next((b for b in warm if "torchrun" in b.code and "hello.py" in b.code), None),
             next((b for b in warm if "spawn.py" in b.code), None)]
    return [b for b in picks if b is not None and runner.unmet(b.marks) is None]


def pagerun_background():
    """The shell runs to compare with start with the page blocks."""
    return ([(f"shell:{b.code}", runner.run, (b, False)) for b in _sample()]
            + [(f"real-agent:{b.code}", runner.run, (b, True, False))
               for b in _shell_torchrun_blocks()])


@pytest.mark.parametrize("block", _sample(), ids=lambda b: b.code.strip()[:50])
def test_warm_run_prints_what_a_shell_run_prints(warm_server, block):
    # the warm run is the collector's own run of this page block (cached): only the shell run
    # is extra work
    warm = runner.run_cached(block)
    shell = runner.result(f"shell:{block.code}", runner.run, block, False)
    assert warm.how == "warm" and shell.how == "shell"
    assert warm.exit == shell.exit
    assert recordings.normalise(warm.output) == recordings.normalise(shell.output)


def test_an_uncaught_exception_looks_the_same_warm(warm_server, tmp_path):
    prog = tmp_path / "boom.py"
    prog.write_text("def f():\n    raise ValueError('boom')\n\nprint('before')\nf()\n")
    out, code, _ = warmpool.run([str(prog)], runner.env(), tmp_path, 60)
    res = runner.run(_block(f"python {prog}"), warm=False)
    assert (code, out) == (res.exit, res.output)


def test_a_warm_program_skips_only_torchs_library_finalizers_at_exit(warm_server, tmp_path):
    """warmpool._drop_library_finalizers: torch.library's are skipped (a fresh interpreter runs
    them, and they print nothing); the program's own atexit functions and finalizers run."""
    prog = tmp_path / "at_exit.py"
    prog.write_text(
        "import atexit, weakref\nimport torch.library\n\nclass Thing:\n    pass\n\n"
        "thing = Thing()\nweakref.finalize(thing, print, 'own finalizer')\n"
        "def left():\n    print('own atexit; torch.library finalizers left:', sum(\n"
        "        i.func is torch.library._del_library for i in weakref.finalize._registry"
        ".values()) > 0)\n"
        "atexit.register(left)\n")
    out, code, _ = warmpool.run([str(prog)], runner.env(), tmp_path, 60)
    res = runner.run(_block(f"python {prog}"), warm=False)
    assert (code, res.exit) == (0, 0)
    assert res.output == "own atexit; torch.library finalizers left: True\nown finalizer\n"
    assert out == "own atexit; torch.library finalizers left: False\nown finalizer\n"


def test_a_failing_block_shows_its_command_status_and_output(monkeypatch):
    block = _block("echo step one\necho step two\nexit 3\n", key=None)
    with pytest.raises(runner.Mismatch) as e:
        runner.check(block)
    msg = str(e.value)
    assert "--- command ---\necho step one" in msg
    assert "exit status 3, expected 0" in msg
    assert "step two" in msg


def test_a_block_needing_a_newer_torch_is_skipped_with_the_reason(monkeypatch):
    here = runner.device()
    for have, why in [("2.11.0+cu130", "needs torch 2.13 or later: this machine has 2.11.0+cu130"),
                      ("2.13.0+cpu", None), ("2.14.1+cu130", None)]:
        monkeypatch.setattr(runner, "device", lambda: {**here, "torch": have})
        assert runner.unmet(['pytest.mark.needs_torch("2.13")']) == why


def test_a_run_that_contradicts_a_page_is_kept_aside_not_recorded(tmp_path, monkeypatch):
    from pagerun import claims

    block = next(b for b in pages.all_blocks() if b.key == "devices/tensors")
    rec = recordings.path_for(runner.recording_class(block), block.key)
    before = rec.read_bytes()
    monkeypatch.setattr(claims, "contradicted_by", lambda *a: ["a sentence it breaks"])
    monkeypatch.setenv("DOCS_REFUSED", str(tmp_path))
    with pytest.raises(runner.Mismatch, match="not recorded: this run contradicts"):
        runner.check(block, update=True)
    assert rec.read_bytes() == before
    kept = recordings.load_file(tmp_path / rec.relative_to(recordings.OUTPUTS), "cpu", block.key)
    assert kept.meta["command"] == runner.command_of(block) and kept.body.strip()


def test_a_timed_out_block_is_killed_with_its_children():
    block = _block("sleep 30 & sleep 30\n")
    block.marks = ["pytest.mark.run_timeout(1)"]
    res = runner.run(block)
    assert res.timed_out and res.seconds < 10


def test_recordings_fingerprint_code_not_layout(tmp_path, monkeypatch):
    monkeypatch.setattr(recordings, "ROOT", tmp_path)
    prog = tmp_path / "p.py"
    prog.write_text("x = f(1, 2)  # a comment\nprint('a' 'b')\n")
    first = recordings.fingerprint("p.py")
    prog.write_text("# another comment\nx = f(\n    1,\n    2,\n)\nprint('ab')\n")
    assert recordings.fingerprint("p.py") == first
    prog.write_text("x = f(1, 3)\nprint('ab')\n")
    assert recordings.fingerprint("p.py") != first


def test_every_recording_names_the_fingerprints_of_its_programs(request):
    """A recording made on this machine's device class is never older than its program."""
    if request.config.option.update_outputs:
        pytest.skip("--update-outputs is rewriting the recordings in this session")
    cls = runner.device()["class"]
    old = runner.stale_recordings(pages.all_blocks(), cls)
    assert not old, "re-record with `make update-outputs`:\n" + "\n".join(
        f"{p}: {why}" for p, why in sorted(old.items()))


def test_no_hook_imports_a_test_module():
    for hook in (pages.ROOT / "hooks").glob("*.py"):
        text = hook.read_text()
        assert "sys.path" not in text and "tests" not in text.split('"""')[-1], hook
    assert not (pages.ROOT / "tests" / "pages.py").exists()
    assert Path(runner.__file__).parent == pages.ROOT / "pagerun"


def _sys_path_edits(tree) -> list[tuple[int, str]]:
    """(line, function) of every statement that changes ``sys.path``: an assignment to it or to
    a slice of it, ``+=``, a call of one of its mutating methods, or ``site.addsitedir``."""
    import ast

    def is_sys_path(node) -> bool:
        while isinstance(node, ast.Subscript):
            node = node.value
        return (isinstance(node, ast.Attribute) and node.attr == "path"
                and isinstance(node.value, ast.Name) and node.value.id == "sys")

    found = []

    def visit(node, func: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            func = node.name
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        if any(is_sys_path(t) for t in targets):
            found.append((node.lineno, func))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            f = node.func
            if ((f.attr in ("insert", "append", "extend", "remove", "pop", "clear", "reverse",
                            "sort") and is_sys_path(f.value))
                    or (f.attr == "addsitedir" and isinstance(f.value, ast.Name)
                        and f.value.id == "site")):
                found.append((node.lineno, func))
        for child in ast.iter_child_nodes(node):
            visit(child, func)

    visit(tree, "")
    return found


# The deliberate sys.path assignments: the fork server's child becomes `python PROGRAM`, whose
# sys.path a fresh interpreter builds (the program's folder, then this environment's); on a GPU
# machine the runner's sitecustomize takes its own folder off the path again. That is the engine
# imitating the interpreter for a reader's program, not code finding its own imports.
SYS_PATH_ALLOWED = {("pagerun/warmpool.py", "_program"),
                    # takes its own folder off the path it was loaded from (PYTHONPATH, GPU only)
                    ("pagerun/_site/sitecustomize.py", "_hand_over")}


def test_no_code_of_the_project_edits_sys_path():
    """pagerun/, tests/, hooks/ and conftest.py import through the installed or pytest-given
    path (pyproject's ``pythonpath``, a script's own folder), never by editing ``sys.path``."""
    import ast

    files = [pages.ROOT / "conftest.py"]
    for folder in ("pagerun", "tests", "hooks"):
        files += sorted((pages.ROOT / folder).rglob("*.py"))
    edits, allowed = [], set()
    for path in files:
        rel = path.relative_to(pages.ROOT).as_posix()
        for line, func in _sys_path_edits(ast.parse(path.read_text(), str(path))):
            if (rel, func) in SYS_PATH_ALLOWED:
                allowed.add((rel, func))
            else:
                edits.append(f"{rel}:{line} (in {func or 'the module'})")
    assert not edits, "sys.path edited:\n" + "\n".join(edits)
    assert allowed == SYS_PATH_ALLOWED, "an allowed edit is gone: drop it from SYS_PATH_ALLOWED"
    # the check itself sees what it must
    probe = ("import sys, site\nsys.path.insert(0, 'x')\nsys.path[:] = []\nsys.path += ['y']\n"
             "def f():\n    site.addsitedir('z')\nprint(sys.path[0])\n")
    assert _sys_path_edits(ast.parse(probe)) == [(2, ""), (3, ""), (4, ""), (6, "f")]


def test_torchrun_workers_start_warm_unless_import_time_settings(warm_server, tmp_path):
    """pagerun/_client.py, torchrun's PYTHON_EXEC: a warm worker has torch imported already;
    with TORCH_LOGS (read when torch._dynamo is imported) it is a fresh interpreter."""
    prog = tmp_path / "probe.py"
    prog.write_text("import sys\nprint('torch' in sys.modules, sys.argv[1:])\n")
    env = warmpool.worker_env(runner.env())
    outs = []
    for extra in ({}, {"TORCH_LOGS": "recompiles"}):
        proc = subprocess.run([env["PYTHON_EXEC"], "-u", str(prog), "--x"], cwd=tmp_path,
                              env=dict(env, **extra), capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 0, proc.stderr
        outs.append(proc.stdout.strip())
    assert outs == ["True ['--x']", "False ['--x']"], outs


def test_a_fingerprint_is_the_same_on_every_python():
    """Recordings made on another machine's Python (the GPU machine runs 3.12, CI 3.11) must not
    look like recordings of an older program: 3.12's ast.dump adds ``type_params=[]``."""
    program = b"def f(x: int) -> int:\n    return x  # a comment\n\n\nclass A:\n    pass\n"
    assert recordings.fingerprint_of("x.py", program) == "f20abc1a7caa"
    wrapped = b"def f(x: int\n      ) -> int:\n    return x\n\n\nclass A:\n    pass\n"
    assert recordings.fingerprint_of("x.py", wrapped) == "f20abc1a7caa"


# Python 3.13.0 as the warnings module prints torch's warning (torch/_dynamo/guards.py issues it
# with warnings.warn(..., RuntimeWarning), the call starting on the line it names), on a reader's
# machine: a path the tests cannot read
GUARDS_3_13_0 = (
    "/home/reader/.venv/lib/python3.13/site-packages/torch/_dynamo/guards.py:1464: "
    "RuntimeWarning: Guards may run slower on Python 3.13.0. Consider upgrading to Python "
    "3.13.1+.\n  warnings.warn(\n")


def _with_lines(body: str, after: str, extra: str) -> str:
    """``body`` with ``extra`` inserted after its first line that starts with ``after``."""
    lines = body.splitlines(keepends=True)
    i = next(n for n, line in enumerate(lines) if line.startswith(after))
    return "".join(lines[:i + 1]) + extra + "".join(lines[i + 1:])


def test_a_warning_about_the_readers_python_is_not_a_difference():
    """A run on Python 3.13.0 prints dynamo's guard warning (with its source line), once per
    process and compiled graph; the recording, made on 3.11, has none."""
    rec = recordings.load("cpu", "training/compile_ddp")
    run = _with_lines(rec.body, "2 processes", GUARDS_3_13_0 * 2)
    run = _with_lines(run, "optimize_ddp=False", GUARDS_3_13_0)
    assert run.count("Guards may run slower") == 3
    assert recordings.normalise(run) == recordings.normalise(rec.body)
    # where the warnings module found no source line, there is only the warning's own line
    bare = _with_lines(rec.body, "2 processes", GUARDS_3_13_0.split("\n")[0] + "\n")
    assert recordings.normalise(bare) == recordings.normalise(rec.body)
    # the same family: another Python patch release, the driver, NumPy
    for message in (
            "UserWarning: Skipping overload body check due to a known CPython 3.13.8 bug "
            "(https://github.com/python/cpython/issues/139783). Consider upgrading to Python "
            "3.13.9+.",
            "UserWarning: CUDA initialization: The NVIDIA driver on your system is too old "
            "(found version 11040). Please update your GPU driver by downloading and installing "
            "a new version from the URL: http://www.nvidia.com/Download/index.aspx (Triggered "
            "internally at /pytorch/c10/cuda/CUDAFunctions.cpp:119.)",
            "UserWarning: Failed to initialize NumPy: _ARRAY_API not found (Triggered internally "
            "at /pytorch/torch/csrc/utils/tensor_numpy.cpp:84.)"):
        warning = f"/opt/py/lib/python3.12/site-packages/torch/cuda/__init__.py:182: {message}\n"
        run = _with_lines(rec.body, "2 processes", warning + "  return f() > 0\n")
        assert recordings.normalise(run) == recordings.normalise(rec.body), message


def test_the_line_after_an_environment_warning_is_dropped_only_if_it_is_its_source(tmp_path):
    """Where the file is readable, the source line is the file's own line; a line of the
    program's output that follows the warning stays."""
    src = tmp_path / "guards.py"
    src.write_text("import warnings\n\nwarnings.warn(\n    'Guards may run slower ...')\n")
    warning = (f"{src}:3: RuntimeWarning: Guards may run slower on Python 3.13.0. Consider "
               "upgrading to Python 3.13.1+.\n")
    assert recordings.normalise(f"a\n{warning}  warnings.warn(\nb\n") == "a\nb\n"
    assert recordings.normalise(f"a\n{warning}  rank 1: 0.150\nb\n") == "a\n  rank 1: 0.150\nb\n"


def test_a_warning_from_compiling_an_installed_package_is_the_environments():
    """torchao's SyntaxWarning, printed where its files had no cached bytecode (here a `pip
    --target` folder of the recording machine, not readable here): dropped with its source."""
    rec = ("/tmp/site/torchao/quantization/quant_api.py:1542: SyntaxWarning: invalid escape "
           "sequence '\\.'\n  \"\"\"Configuration class for applying ...\nresult: 1\n")
    assert recordings.normalise(rec) == recordings.normalise("result: 1\n")
    ours = f"{pages.SNIPPETS}/x.py:3: SyntaxWarning: invalid escape sequence '\\.'\n  rank 1\n"
    assert recordings.normalise(ours) == "  rank 1\n"  # a program's output line stays


def test_a_retried_connection_to_the_store_is_not_a_difference():
    """A busy machine: a worker connected before torchrun's store listened, and torch logged the
    retry (the line a run of fsdp_dcp.py printed twice). Any other c10d log line stays."""
    rec = recordings.load("cpu", "model_parallel/fsdp_dcp")
    retry = ("[W1126 21:08:37.588103638 socket.cpp:767] [c10d] The hostname of the client "
             "socket cannot be retrieved. err=-3\n")
    run = _with_lines(rec.body, "step 2 trained on", retry * 2)
    assert recordings.normalise(run) == recordings.normalise(rec.body)
    other = "[W1126 21:08:37.588103638 socket.cpp:767] [c10d] Connection refused\n"
    run = _with_lines(rec.body, "step 2 trained on", other)
    assert recordings.normalise(run) != recordings.normalise(rec.body)


def test_a_measured_share_and_a_port_are_volatile():
    run = "MFU: 63.2% of 989.5 TFLOP/s\n  Connection closed by peer [127.0.0.1]:16109\n"
    rec = "MFU: 61.7% of 989.5 TFLOP/s\n  Connection closed by peer [127.0.0.1]:29083\n"
    assert recordings.normalise(run) == recordings.normalise(rec)
    kept = "fits: 50% of the GPU's memory\n"  # a share the program computes, not measures
    assert recordings.normalise(kept) == kept


def test_a_warning_a_page_is_about_is_still_compared():
    """The rule drops the environment's warnings only: an output whose warning is its lesson
    fails when the warning disappears or changes."""
    cases = [(recordings.load("cpu", "ddp/buffers"),
              "broadcast_buffers=False: FutureWarning `broadcast_buffers` is deprecated"),
             (recordings.load("gpu", "cuda/hidden_sync"),
              "UserWarning: Synchronization debug mode is a prototype feature")]
    for rec, warning in cases:
        assert rec is not None and warning in rec.body, rec
        lines = rec.body.splitlines(keepends=True)
        i = next(n for n, line in enumerate(lines) if warning in line)
        gone = "".join(lines[:i] + lines[i + 1:])
        changed = rec.body.replace(warning, warning.replace("deprecated", "removed")
                                   .replace("prototype", "stable"))
        assert recordings.normalise(gone) != recordings.normalise(rec.body), warning
        assert recordings.normalise(changed) != recordings.normalise(rec.body), warning
    # printed by the warnings module like the environment's warnings, with their source line
    deprecated = ("/x/site-packages/torch/nn/parallel/distributed.py:512: FutureWarning: "
                  "`broadcast_buffers` is deprecated\n  warnings.warn(\n")
    assert recordings.normalise(deprecated).count("FutureWarning") == 1


# --------------------------------------------------------------------------------------------
# torchrun in a shell block (pipes, `&`, `kill $pid`): its agent starts warm too

AGENT_PROBE = '''import os, sys, time
rank = os.environ["RANK"]
if rank == "0":  # the agent is the parent of a worker's client (pagerun/_client.py)
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\\0")
            if (any(a.endswith(b"_client.py") for a in cmd) and b"--torchrun" not in cmd
                    and __file__.encode() in cmd):  # not the shim: `_client.py --torchrun`
                agent = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1]
                warm = b"pagerun/warmpool.py" in open(f"/proc/{agent}/cmdline", "rb").read()
                print("agent warm:", warm, "torch imported:", "torch" in sys.modules)
                open(os.path.join(sys.argv[1], "agent"), "w").write(agent)
                break
        except OSError:
            pass
open(os.path.join(sys.argv[1], "worker" + rank), "w").write(str(os.getpid()))
time.sleep(60)
'''


def _shell_torchrun_blocks() -> list[pages.Block]:
    """Page blocks run by bash whose `torchrun` agents start through the shim."""
    blocks = {b.code: b for b in pages.all_blocks("en")
              if runner.warm_commands(b, server=False) is None and b.syntax in ("bash", "sh")
              and "torchrun" in b.code and runner.unmet(b.marks) is None}
    # the cheapest with a pipe and `set -o pipefail` (the agent's status through grep)
    return [b for b in blocks.values() if "pipefail" in b.code and "preempt" in b.code][:1]


@pytest.mark.parametrize("sig", ["TERM", "KILL"])
def test_a_shell_blocks_torchrun_agent_is_warm_and_dies_with_its_pid(warm_server, tmp_path,
                                                                     sig):
    """`torchrun ... & pid=$!; kill $pid`: $! is the shim (pagerun/_client.py --torchrun), the
    agent runs in the fork server, and killing the shim ends the agent and its workers."""
    import os
    import time

    prog = tmp_path / "probe.py"
    prog.write_text(AGENT_PROBE)
    block = _block(f"OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node=2 {prog} "
                   f"{tmp_path} & pid=$!\n"
                   f"while [ ! -e {tmp_path}/agent ] || [ ! -e {tmp_path}/worker1 ]; do "
                   f"sleep 0.1; done\n"
                   f"kill -{sig} $pid; wait $pid; echo status $?\n")
    block.marks = ["pytest.mark.run_timeout(60)"]
    assert runner.warm_commands(block) is None
    res = runner.run(block)
    assert not res.timed_out, res.output
    assert "agent warm: True torch imported: True" in res.output, res.output
    status = int(res.output.rsplit("status ", 1)[1].split()[0])
    assert status == 137 if sig == "KILL" else status != 0, res.output
    pids = [int((tmp_path / f).read_text()) for f in ("agent", "worker0", "worker1")]
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        alive = [p for p in pids if _running(p)]
        if not alive:
            break
        time.sleep(0.2)
    assert not alive, f"left running after kill -{sig} $pid: {alive}"


def _running(pid: int) -> bool:
    """A process that exists and is not a zombie; one that ends while it is read (the reading
    raises ProcessLookupError, seen once on a loaded machine) is not running."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_docs_warm_0_runs_the_real_torchrun(warm_server, monkeypatch):
    block = _block("command -v torchrun  # no agent is started\n")
    assert runner.run(block).output.strip() == f"{warmpool.agent_dir()}/torchrun"
    monkeypatch.setenv("DOCS_WARM", "0")
    assert runner.run(block).output.strip() == str(Path(sys.executable).parent / "torchrun")


def test_a_cold_agent_with_import_time_settings(warm_server, tmp_path):
    """TORCH_LOGS and the like (pagerun/_warm.py), or a torchrun of another environment: the
    shim execs the real torchrun (here a stand-in that says whether torch was imported)."""
    fake = tmp_path / "torchrun"
    fake.write_text(f"#!{sys.executable}\nimport sys\n"
                    "print('torch' in sys.modules, sys.argv[1:])\n")
    fake.chmod(0o755)
    res = runner.run(_block(f'PATH="${{PATH%%:*}}:{tmp_path}:${{PATH#*:}}"\n'
                            "torchrun --x\nTORCH_LOGS=recompiles torchrun --y\n"))
    assert res.output.splitlines() == ["True ['--x']", "False ['--y']"], res.output


@pytest.mark.parametrize("block", _shell_torchrun_blocks(), ids=lambda b: b.page_rel)
def test_a_shell_block_with_warm_agents_prints_what_the_real_torchrun_prints(warm_server,
                                                                             block):
    """The agents differ (the shim's, started in the server, against the real torchrun's); the
    workers start warm in both runs, as warm workers are compared with cold ones above (the
    hello pick): four cold workers (two attempts) would add about 20 CPU-s to the suite."""
    warm = runner.run_cached(block)
    real = runner.result(f"real-agent:{block.code}", runner.run, block, True, False)
    assert warm.exit == real.exit == block.exit
    assert recordings.normalise(warm.output) == recordings.normalise(real.output)


SPAWN_PROBE = '''import multiprocessing as mp, os, signal, sys, time


def child(q, code):
    q.put(("torch" in sys.modules, __name__))  # before any import of torch
    if code == "term":
        time.sleep(60)
    sys.exit(code)


if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()  # its pipes reach the child as descriptors at the same numbers
    for code in (0, 3, "term"):
        p = ctx.Process(target=child, args=(q, code))
        p.start()
        seen = q.get()
        if code == "term":
            p.terminate()
        p.join(30)
        print(code, p.exitcode, *seen)
'''


@pytest.mark.parametrize("parent", ["", "import os; os.getppid  # asks for its parent\n"])
def test_a_warm_programs_spawn_children_start_warm_unless_it_asks_for_its_parent(warm_server,
                                                                                  tmp_path, parent):
    """multiprocessing's spawn children of a warm program start in the server (pagerun/_client.py
    --spawn): torch is already imported there, and the parent sees the exit codes, the signal of
    terminate() and a queue's pipes as with a fresh interpreter. A program that reads
    os.getppid() gets fresh children: a warm child's parent is the server."""
    prog = tmp_path / "spawner.py"
    prog.write_text(parent + SPAWN_PROBE)
    warm, code, _ = warmpool.run([str(prog)], runner.env(), tmp_path, 90)
    cold = runner.run(_block(f"python {prog}"), warm=False)
    assert code == cold.exit == 0, (warm, cold.output)
    rows = ["0 0 {} __mp_main__", "3 3 {} __mp_main__",
            f"term -{signal.SIGTERM.value} {{}} __mp_main__"]
    assert cold.output.splitlines() == [r.format(False) for r in rows], cold.output
    assert warm.splitlines() == [r.format(not parent) for r in rows], warm


def test_the_longest_blocks_start_first(monkeypatch):
    """prefetch starts blocks in the order of pagerun/block_costs.json (how long each ran in
    the last `make bench`), longest first; a block not measured yet starts before the short
    ones, by a guess from its kind."""
    blocks = {name: _block(code) for name, code in [
        ("short", "python snippets/a.py\n"), ("long", "python snippets/b.py --big\n"),
        ("new-torchrun", "torchrun --standalone --nproc-per-node=2 snippets/c.py\n"),
        ("new-warm", "python snippets/d.py\n")]}
    measured = runner._measured.__wrapped__()  # the file itself, checked below
    monkeypatch.setattr(runner, "_measured", lambda: {"python snippets/a.py": (0.5, 0.4),
                                                      "python snippets/b.py --big": (40.0, 30.0)})
    order = sorted(blocks, key=lambda name: -runner._cost(blocks[name]))
    assert order[0] == "long" and order[-1] == "short", order
    assert order.index("new-torchrun") < order.index("new-warm"), order
    # the file: a command of a page for each entry but a few, seconds and CPU seconds for each
    commands = {runner.command_of(b) for b in pages.all_blocks()}
    assert measured and all(s >= 0 and cpu is not None and cpu >= 0
                            for s, cpu in measured.values())
    assert len(set(measured) & commands) >= 0.8 * len(measured), \
        "pagerun/block_costs.json is out of date: `make bench` writes it again"


def test_a_block_that_mostly_waits_runs_beside_the_others(monkeypatch):
    """runner._waits: 2 s or more, under a fifth of it on a CPU (measured); prefetch runs such
    blocks in a lane of their own, so that they do not hold the places of the others."""
    monkeypatch.setattr(runner, "_measured", lambda: {
        "python snippets/waits.py": (6.0, 0.3), "python snippets/works.py": (6.0, 5.0),
        "python snippets/quick.py": (0.5, 0.01), "python snippets/old.py": (6.0, None)})
    waits = {name: runner._waits(_block(f"python snippets/{name}.py\n"))
             for name in ("waits", "works", "quick", "old", "new")}
    assert waits == {"waits": True, "works": False, "quick": False, "old": False, "new": False}
    # the lanes: a block that waits never takes one of the DOCS_JOBS places
    started = []
    monkeypatch.setattr(runner, "run", lambda b: started.append(
        (b.code.split("/")[1].split(".")[0], threading.current_thread().name)))
    monkeypatch.setattr(runner, "_CACHE", {})
    monkeypatch.setattr(runner, "_POOL", None)
    monkeypatch.setattr(runner, "_WAIT_POOL", None)
    runner.prefetch([_block(f"python snippets/{n}.py\n") for n in ("waits", "works")], 2)
    for pool in (runner._POOL, runner._WAIT_POOL):
        pool.shutdown(wait=True)
    lanes = dict(started)
    assert lanes["waits"].startswith("waiting-block") and lanes["works"].startswith("block"), \
        lanes


# A GPU tab says where it ran: on a GPU machine every process of a block says at exit whether it
# held GPU memory (pagerun/_site/sitecustomize.py), warm or fresh, and the recording's header
# keeps it (``ran on``). Faked here: a program that puts a torch whose CUDA holds memory in
# sys.modules, and one that does not.
HELD = ("import sys, types\n"
        "fake = types.ModuleType('torch')\n"
        "fake.cuda = types.SimpleNamespace(is_initialized=lambda: True,\n"
        "                                  max_memory_reserved=lambda: 1 << 20)\n"
        "sys.modules['torch'] = fake\n")


def _on_a_gpu_machine(monkeypatch):
    here = runner.device()
    monkeypatch.setattr(runner, "device", lambda: {**here, "class": "gpu", "gpus": 1,
                                                   "desc": "NVIDIA H200 ×1, CUDA 13.0"})


@pytest.mark.parametrize("held", [True, False])
def test_a_gpu_machine_knows_whether_a_block_held_gpu_memory(monkeypatch, tmp_path, held):
    _on_a_gpu_machine(monkeypatch)
    prog = tmp_path / "prog.py"
    prog.write_text((HELD if held else "import torch\n") + "print('done')\n")
    # fresh interpreters: a shell block, and a process that program starts
    res = runner.run(_block(f"python {prog}"), warm=False)
    assert (res.exit, res.output.strip(), res.cuda) == (0, "done", held), res.output
    child = tmp_path / "parent.py"
    child.write_text(f"import subprocess, sys\nsubprocess.run([sys.executable, '{prog}'])\n")
    assert runner.run(_block(f"python {child}"), warm=False).cuda is held
    # a program the fork server starts
    if warmpool.cold_reason() is None:
        marks = tmp_path / "marks"
        marks.mkdir()
        out, code, _ = warmpool.run([str(prog)], dict(runner.env(), PAGERUN_CUDA_MARK=str(marks)),
                                    tmp_path, 60)
        assert (code, out.strip(), bool(list(marks.iterdir()))) == (0, "done", held), out


def test_a_cpu_machine_starts_blocks_as_before():
    if runner.device()["class"] == "gpu":
        pytest.skip("a GPU machine")
    res = runner.run(_block("python -c 'import os, sys; print(os.environ.get(\"PAGERUN_CUDA_MARK\"),"
                            " any(\"_site\" in p for p in sys.path))'"), warm=False)
    assert (res.output.strip(), res.cuda) == ("None False", None)


def test_a_gpu_recording_says_where_it_ran_and_its_tab_says_so(monkeypatch, tmp_path):
    from pagerun import claims, render

    _on_a_gpu_machine(monkeypatch)
    monkeypatch.setattr(recordings, "OUTPUTS", tmp_path)
    monkeypatch.setattr(claims, "contradicted_by", lambda *a: [])
    block = _block("python snippets/devices/tensors.py", key="devices/tensors")
    for cuda, where in [(False, "CPU"), (True, "GPU")]:
        monkeypatch.setattr(runner, "run_cached", lambda b: runner.Result(0, "hello\n", 0.1,
                                                                          cuda=cuda))
        assert runner.check(block, update=True) == "recorded gpu/devices/tensors"
        rec = recordings.load("gpu", "devices/tensors")
        assert rec.meta["ran on"] == where and list(rec.meta)[-1] == "date"
        assert runner.check(block, update=True) == "unchanged"
    # the tab: where it ran and which torch, in both languages; the stamp says why
    monkeypatch.setattr(recordings, "OUTPUTS", recordings.ROOT / "outputs")
    for where, en, zh in [("CPU", '=== "GPU machine, CPU run (H200, torch 2.11)"',
                           '=== "GPU 机器上的 CPU 运行（H200，torch 2.11）"'),
                          ("GPU", '=== "GPU (H200, torch 2.11)"', '=== "GPU（H200，torch 2.11）"')]:
        rec = recordings.Recording("devices/tensors", "gpu", "hello\n", {
            "command": "python snippets/devices/tensors.py", "exit": "0",
            "torch": "2.11.0+cu130", "device": "NVIDIA H200 ×1, CUDA 13.0", "ran on": where,
            "date": "2026-11-28"})
        monkeypatch.setattr(recordings, "load",
                            lambda cls, key: rec if cls == "gpu" else None)
        html_en = render.render("devices/tensors", False, "en")
        html_zh = render.render("devices/tensors", False, "zh")
        assert en in html_en and zh in html_zh, (html_en, html_zh)
        assert ("none of its processes held GPU memory" in html_en) is (where == "CPU")
        stamp = render.verified_on([("devices/tensors", False)], "en")
        assert ("1 of them ran on the GPU machine's CPU" in stamp) is (where == "CPU")
