"""Run a page's block the way a reader would, and check it against its recording.

Every block runs in its own process (its own process group, killed afterwards so nothing is left
behind), from the repository root, with a timeout, and with ``python`` / ``torchrun`` being those
of the interpreter that runs the tests (``_shim``), whatever kind of environment that is.

Two ways to start that process, with the same result:

- ``bash -c CODE`` (or ``python -c CODE``): every block can run this way.
- **warm**: a block whose every line is ``python snippets/PROGRAM.py [ARGS]`` or ``torchrun ...``
  (optionally after ``CUDA_*=...`` and similar assignments) is forked from a server that has
  already imported torch (``pagerun.warmpool``, preloading ``pagerun._warm``; CUDA is never
  initialised there). torchrun's workers, in any block, start through the same server, and so do
  the agents of ``torchrun`` in other blocks (a ``torchrun`` first on their PATH that is the
  server's client: ``warmpool.agent_dir``). The child sets the environment, ``sys.argv``,
  ``sys.path``, the working directory and the standard streams as the interpreter would, runs the
  program as ``__main__``, prints an uncaught exception's traceback as Python does, runs
  ``atexit`` handlers, and exits with the program's status. It saves ``import torch`` (about a
  second on two cores) per block. ``tests/test_engine.py`` checks on a sample that both ways print
  the same.
  ``DOCS_WARM=0`` turns it off.
"""

from __future__ import annotations

import datetime
import difflib
import functools
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from pagerun import envcheck, recordings
from pagerun.pages import ROOT, Block

# One command of a warm block: environment assignments that take effect after `import torch`
# (CUDA_* when CUDA starts, the others when the program or torchrun's agent reads them), then
# `python snippets/....py` or `torchrun` with plain arguments. OMP_NUM_THREADS is applied with
# torch.set_num_threads, as the OpenMP runtime would have read it at start-up.
_ASSIGN = (r"(?:CUDA_[A-Z_]+|OMP_NUM_THREADS|TORCH_DISTRIBUTED_DEBUG"
           r"|TORCH_DISABLE_SHARE_RDZV_TCP_STORE)=[\w,.-]*")
_ARG = r"[\w=./:,+-]+"
WARM_LINE = re.compile(rf"^((?:{_ASSIGN} )*)(?:python3? (snippets/[\w/.-]+\.py)|(torchrun))"
                       rf"((?: {_ARG})*)$")


_OWN_HOSTS = ("pytest.mark.needs_root_netns", "pytest.mark.needs_slurm")


@dataclass
class Result:
    exit: int
    output: str
    seconds: float
    timed_out: bool = False
    how: str = "shell"  # "shell" or "warm"
    ended: float = field(default_factory=time.monotonic)  # when, for DOCS_TIMINGS' timeline
    cpu: float = 0.0  # CPU seconds of the block's shell and what it waited for (DOCS_TIMINGS)
    cuda: bool | None = None  # on a GPU machine: whether any of its processes held GPU memory


def tag(code: str) -> str:
    """What DOCS_TIMINGS puts in a block's environment as ``PAGERUN_BLOCK``: the fork server adds
    up the CPU seconds of the processes each block started through it by this name."""
    return hashlib.sha256(code.encode()).hexdigest()[:12]


class _Popen(subprocess.Popen):
    """Popen that keeps the child's resource usage (``os.wait4``) when it reaps it."""
    usage = None

    def _try_wait(self, wait_flags):
        try:
            pid, status, self.usage = os.wait4(self.pid, wait_flags)
        except ChildProcessError:
            pid, status = self.pid, 0
        return pid, status


# --------------------------------------------------------------------------------------------
# the environment of a block

def _shim_dir() -> Path:
    """A folder whose ``python`` and ``python3`` run the interpreter that runs the tests.

    They are tiny scripts that ``exec`` ``sys.executable`` by its own path: a symlink would not do,
    because Python started through a link outside a virtual environment does not find the
    environment's ``pyvenv.cfg`` and runs without its packages. One folder per interpreter,
    rewritten every session, so it never points at another environment.
    """
    tag = hashlib.sha256(sys.executable.encode()).hexdigest()[:12]
    shim = Path(tempfile.gettempdir()) / f"gpu-by-example-bin-{os.getuid()}-{tag}"
    shim.mkdir(exist_ok=True)
    script = f'#!/bin/sh\nexec "{sys.executable}" "$@"\n'
    for name in ("python", "python3"):
        tmp = shim / f".{name}.{os.getpid()}.{threading.get_ident()}"
        tmp.write_text(script)
        tmp.chmod(0o755)
        os.replace(tmp, shim / name)  # atomic: a block starting now sees the old or the new one
    return shim


_SHIM: Path | None = None
_SHIM_LOCK = threading.Lock()


def env() -> dict:
    """The environment a block runs in."""
    global _SHIM
    e = dict(os.environ)
    with _SHIM_LOCK:  # blocks start from several threads
        _SHIM = _SHIM or _shim_dir()
    e["PATH"] = os.pathsep.join([str(_SHIM), str(Path(sys.executable).parent), e.get("PATH", "")])
    e["PYTHONUNBUFFERED"] = "1"  # keep stdout and stderr in the order they were written
    for name in ("PYTEST_CURRENT_TEST", "PYTEST_VERSION", "PYTEST_ADDOPTS"):
        e.pop(name, None)
    return e


# --------------------------------------------------------------------------------------------
# running

def warm_on() -> bool:
    """Whether programs start through the fork server (``DOCS_WARM=0`` turns it off, and so does
    a server that could not start a program as a fresh interpreter would: it says why)."""
    if os.environ.get("DOCS_WARM", "1") == "0":
        return False
    from pagerun import warmpool

    return warmpool.cold_reason() is None


def warm_commands(block: Block, server: bool = True) -> list[tuple[dict, list[str]]] | None:
    """``[(env assignments, argv)]`` if every command of the block can run warm, else None.
    ``server=False``: by the commands alone, without waiting for the fork server to say it
    can run programs warm (a test's parameters, at collection: about 3 s on 2 cores)."""
    if block.syntax not in ("bash", "sh") or (server and not warm_on()):
        return None
    cmds = []
    for line in block.code.strip().replace("\\\n", " ").splitlines():  # join continuations
        line = " ".join(line.split())
        if not line or line.startswith("#"):
            continue
        m = WARM_LINE.match(line)
        if not m:
            return None
        assigns = dict(a.split("=", 1) for a in m.group(1).split())
        program = m.group(2) or "torchrun"
        cmds.append((assigns, [program, *shlex.split(m.group(4))]))
    return cmds or None


# On a GPU machine every Python process of a block says at exit whether it held GPU memory
# (pagerun/_site/sitecustomize.py): a recording's ``ran on`` header, shown on its GPU tab.
SITE = Path(__file__).with_name("_site")


def run(block: Block, warm: bool = True, warm_agents: bool = True) -> Result:
    """Run a block: warm (through the fork server, what can be) or as a plain shell would.
    ``warm_agents=False``: a shell block's ``torchrun`` is the real one (its workers still warm).
    On a GPU machine the result says whether the block used the GPU (``Result.cuda``)."""
    if device()["class"] != "gpu":
        return _run(block, warm, warm_agents, {})
    marks = tempfile.mkdtemp(prefix="pagerun-cuda-")
    try:
        extra = {"PAGERUN_CUDA_MARK": marks, "PYTHONPATH": os.pathsep.join(
            filter(None, [str(SITE), os.environ.get("PYTHONPATH")]))}
        res = _run(block, warm, warm_agents, extra)
        res.cuda = bool(os.listdir(marks))
        return res
    finally:
        shutil.rmtree(marks, ignore_errors=True)


def _run(block: Block, warm: bool, warm_agents: bool, extra: dict) -> Result:
    start = time.monotonic()
    cmds = warm_commands(block) if warm else None
    timings = {"PAGERUN_BLOCK": tag(block.code)} if os.environ.get("DOCS_TIMINGS") else {}
    if cmds:
        from pagerun import warmpool

        base = dict(env(), **timings, **extra)
        out, code, timed_out = [], 0, False
        for assigns, argv in cmds:  # like bash -c: every line runs; the last one's status counts
            left = block.timeout - (time.monotonic() - start)
            e = dict(base, **assigns)
            if argv[0] == "torchrun":  # the console script on PATH, run as a program
                argv = [shutil.which("torchrun", path=e["PATH"]) or "torchrun", *argv[1:]]
                e = warmpool.worker_env(e)  # its workers start warm too
            text, code, timed_out = warmpool.run(argv, e, ROOT, left)
            out.append(text)
            if timed_out:
                break
        return Result(code, "".join(out), time.monotonic() - start, timed_out, "warm")
    if block.syntax == "python":
        argv = [sys.executable, "-c", block.code]
    else:
        argv = ["bash" if block.syntax == "bash" else "sh", "-c", block.code]
    e = dict(env(), **timings, **extra)
    if warm and warm_on() and "torchrun" in block.code:
        from pagerun import warmpool

        e = warmpool.worker_env(e)  # torchrun's workers start warm (its PYTHON_EXEC)
        if warm_agents and not any(m.startswith(_OWN_HOSTS) for m in block.marks):
            # and its agents: `torchrun` is the server's client (not on hosts of their own:
            # the server is in this machine's network namespace)
            e["PATH"] = os.pathsep.join([warmpool.agent_dir(), e["PATH"]])
    proc = _Popen(argv, cwd=ROOT, env=e, stdout=subprocess.PIPE,
                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    timed_out = False
    try:
        out, _ = proc.communicate(timeout=block.timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        kill_group(proc.pid)
        out, _ = proc.communicate()
    finally:
        kill_group(proc.pid)  # whatever the block started (torchrun workers...) goes too
    cpu = proc.usage.ru_utime + proc.usage.ru_stime if proc.usage else 0.0
    return Result(proc.returncode, out.decode("utf-8", "replace"), time.monotonic() - start,
                  timed_out, cpu=cpu)


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# --------------------------------------------------------------------------------------------
# the machine

_DEVICE: dict | None = None


def device() -> dict:
    """What this machine is: its device class ("cpu" or "gpu"), GPU count, and a description."""
    global _DEVICE
    if _DEVICE is None:
        import platform

        import torch

        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if n:
            name = torch.cuda.get_device_name(0)
            desc = f"{name} ×{n}, CUDA {torch.version.cuda}"
        else:
            model = platform.processor() or platform.machine()
            try:
                for line in Path("/proc/cpuinfo").read_text().splitlines():
                    if line.startswith("model name"):
                        model = line.split(":", 1)[1].strip()
                        break
            except OSError:
                pass
            desc = f"CPU only: {model}, {os.cpu_count()} cores"
        build = "cuda" if (torch.version.cuda or torch.version.hip) else "cpu"
        if not n and build == "cuda":
            desc += f", CUDA build of torch ({torch.version.cuda or torch.version.hip}) without a GPU"
        _DEVICE = {"class": "gpu" if n else "cpu", "gpus": n, "desc": desc, "build": build,
                   "torch": torch.__version__, "python": platform.python_version()}
    return _DEVICE


def recording_class(block: Block) -> str:
    """The recording a run here is compared with: the device class, except for an output whose
    directive says ``builds=both`` (the build of torch changes what it prints, not only torch's
    words), which on a CPU machine has one recording per build: ``cpu`` for the CPU-only build,
    ``cpu-cuda-build`` for a CUDA build of torch on a machine without a GPU."""
    dev = device()
    if dev["class"] == "cpu" and block.builds and dev["build"] == "cuda":
        return "cpu-cuda-build"
    return dev["class"]


def unmet(marks: list[str]) -> str | None:
    """The reason a block cannot run here, from its needs_* marks, or None."""
    dev = device()
    for m in marks:
        if m.startswith("pytest.mark.needs_cuda") and dev["gpus"] < 1:
            return "needs CUDA: no GPU on this machine (torch.cuda.is_available() is False)"
        if m.startswith("pytest.mark.needs_2_gpus") and dev["gpus"] < 2:
            return f"needs 2 GPUs: this machine has {dev['gpus']}"
        wanted = re.match(r"pytest\.mark\.needs_torch\(['\"]?([\d.]+)", m)
        if wanted and envcheck._version(dev["torch"]) < envcheck._version(wanted.group(1)):
            return f"needs torch {wanted.group(1)} or later: this machine has {dev['torch']}"
        if m.startswith(("pytest.mark.needs_root_netns", "pytest.mark.needs_slurm")):
            # hosts made of network namespaces (tests/hosts.py): Linux, root, iproute2; about
            # 75 s of the suite's time on 2 cores, so a pass of their own (make test-hosts)
            if os.environ.get("DOCS_HOSTS") != "1":
                return ("runs on hosts of its own (network namespaces): `make test-hosts` "
                        "(root; .ci/run runs it)")
            if sys.platform != "linux" or os.geteuid() != 0:
                return "needs root on Linux (network namespaces: tests/hosts.py)"
            tools = ["ip", "unshare", "nsenter"]
            if m.startswith("pytest.mark.needs_slurm"):
                tools += ["slurmctld", "slurmd", "munged", "sbatch"]
            missing = [t for t in tools if shutil.which(t) is None]
            if missing:
                return (f"needs {', '.join(missing)} (Debian: apt-get install iproute2"
                        f"{' slurm-wlm munge' if 'slurmd' in tools else ''})")
    return None


# --------------------------------------------------------------------------------------------
# running each command once per session, in the background

STARTED = time.monotonic()  # the session's start (import time), for DOCS_TIMINGS

_CACHE: dict[tuple[str, str], Result | Future] = {}
_POOL: ThreadPoolExecutor | None = None
_WAIT_POOL: ThreadPoolExecutor | None = None  # the blocks that mostly wait (_waits)
WAIT_JOBS = 2  # how many of those at a time


# How long each block ran in the last `make bench` (seconds of wall time, with the suite
# running beside it, and the CPU seconds its processes used), by its command: written by
# tests/bench.py. Only where and when the blocks start depends on it: the longest first, so
# that no long block starts last and keeps one core busy while the other waits (about 15 s of
# the suite's time on two cores), and the blocks that mostly wait (a timeout, a sleeping
# straggler, a restart) in a lane of their own (``_waits``).
COSTS = Path(__file__).with_name("block_costs.json")


@functools.lru_cache(maxsize=None)
def _measured() -> dict[str, tuple[float, float | None]]:
    """COSTS: command -> (seconds, CPU seconds or None); an entry may be seconds alone."""
    try:
        raw = json.loads(COSTS.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: (float(v), None) if isinstance(v, (int, float)) else (float(v[0]), float(v[1]))
            for k, v in raw.items()}


def _waits(block: Block) -> bool:
    """Measured to spend most of its time waiting: 2 s or more, under a fifth of it on a CPU
    (hang.py's and the other timeout demos, ft_replicas.py, orphans.py: CONTRIBUTING.md). Such
    blocks run beside the others, WAIT_JOBS at a time, instead of holding one of the DOCS_JOBS
    places while the cores idle: three of them at once left both cores idle for seconds."""
    seconds, cpu = _measured().get(command_of(block), (0.0, None))
    return cpu is not None and seconds >= 2 and cpu < 0.2 * seconds



def _cost(block: Block) -> float:
    """Seconds the block is expected to run: as measured (COSTS), or for a block not measured
    yet a guess that puts it early: several processes 30, a shell 20, a warm program 10."""
    known = _measured().get(command_of(block))
    if known is not None:
        return known[0]
    code = block.code
    if "torchrun" in code or "spawn" in code or "--nnodes" in code:
        return 30.0
    return 10.0 if warm_commands(block) else 20.0


def prefetch(blocks: list[Block], jobs: int) -> None:
    """Start running these blocks, `jobs` at a time, the longest first (``_cost``), and those
    that mostly wait (``_waits``) WAIT_JOBS at a time beside them; run_cached waits.

    Each block still runs in its own process with its own timeout; this only keeps every core
    busy while the tests compare outputs in collection order.
    """
    global _WAIT_POOL
    if jobs < 2 or _pool(jobs) is None:
        return
    todo = {}
    for b in blocks:
        k = (b.syntax, b.code)
        if k not in _CACHE and k not in todo and unmet(b.marks) is None:
            todo[k] = b
    for k, b in sorted(todo.items(), key=lambda kv: -_cost(kv[1])):
        if _waits(b):
            if _WAIT_POOL is None:
                _WAIT_POOL = ThreadPoolExecutor(WAIT_JOBS, thread_name_prefix="waiting-block")
            _CACHE[k] = _WAIT_POOL.submit(run, b)
        else:
            _CACHE[k] = _POOL.submit(run, b)


def _pool(jobs: int) -> ThreadPoolExecutor | None:
    global _POOL
    if _POOL is None and jobs >= 2:
        _POOL = ThreadPoolExecutor(jobs, thread_name_prefix="block")
    return _POOL


# Other slow work of the tests (a site build, shell runs to compare with, a killed job),
# started with the blocks so that it overlaps them; `result` waits for it, or runs it.
_JOBS: dict[str, object] = {}
_JOBS_LOCK = threading.Lock()


def background(key: str, fn, *args, jobs: int = 0) -> None:
    """Start ``fn(*args)`` in the block pool (created with ``jobs`` threads if needed)."""
    pool = _pool(jobs)
    with _JOBS_LOCK:
        if pool is not None and key not in _JOBS:
            _JOBS[key] = pool.submit(fn, *args)


def result(key: str, fn, *args):
    """``fn(*args)``, once per session: the background job's result if one was started."""
    with _JOBS_LOCK:
        if key not in _JOBS:
            _JOBS[key] = Future()
            mine = True
        else:
            mine = False
    job = _JOBS[key]
    if mine:
        try:
            job.set_result(fn(*args))
        except BaseException as e:  # noqa: BLE001 - raised again to every caller
            job.set_exception(e)
    return job.result()


def run_cached(block: Block) -> Result:
    """Run a block once per test session: the same command on the en and zh page runs once."""
    k = (block.syntax, block.code)
    if k not in _CACHE:
        _CACHE[k] = run(block)
    if isinstance(_CACHE[k], Future):
        _CACHE[k] = _CACHE[k].result()
    return _CACHE[k]


def finished() -> dict[tuple[str, str], Result]:
    """The blocks run so far in this session, with their results."""
    return {k: (v.result() if isinstance(v, Future) else v) for k, v in _CACHE.items()
            if not isinstance(v, Future) or v.done()}


# --------------------------------------------------------------------------------------------
# checking a block against its recording

class Mismatch(AssertionError):
    pass


def command_of(block: Block) -> str:
    return " ".join(block.code.split())


def _tail(text: str, n: int = 40) -> str:
    lines = text.rstrip("\n").splitlines()
    cut = f"[... {len(lines) - n} earlier lines]\n" if len(lines) > n else ""
    return cut + "\n".join(lines[-n:])


def check(block: Block, update: bool = False) -> str:
    """Run a block and compare it with its recording; with update=True, record it instead.

    Returns a short note of what was done. Raises Mismatch with a readable message: the page and
    line, the command, the exit status and the tail of the output.
    """
    res = run_cached(block)
    where = f"{block.page_rel}:{block.lineno}"
    head = f"{where}\n--- command ---\n{block.code.rstrip()}\n"
    if res.timed_out:
        raise Mismatch(f"{head}--- timed out after {block.timeout} s and was killed; "
                       f"output so far (tail) ---\n{_tail(res.output)}")
    if res.exit != block.exit:
        raise Mismatch(f"{head}--- exit status {res.exit}, expected {block.exit}; "
                       f"output (tail) ---\n{_tail(res.output)}")
    if block.key is None:
        return "ran (no recorded output on the page)"
    broken = recordings.broken_bounds(res.output)
    if broken:
        raise Mismatch(f"{head}--- a figure misses the bound it prints (the verdict beside it is "
                       f"then wrong) ---\n" + "\n".join(broken))
    dev = device()
    cls = recording_class(block)
    rec = recordings.load(cls, block.key)
    command = command_of(block)
    files = recordings.files_field(block.snippets)
    meta = {"command": command, "exit": res.exit, "files": files, "torch": dev["torch"],
            "python": dev["python"], "device": dev["desc"],
            "date": datetime.date.today().isoformat()}
    if res.cuda is not None:  # a GPU machine: where the block's tensors were
        meta = dict(meta, **{"ran on": "GPU" if res.cuda else "CPU"})
        meta["date"] = meta.pop("date")
    if update:
        from pagerun import claims, pages

        against = claims.contradicted_by(block.key, cls, res.output, pages.pages())
        if against:
            aside = os.environ.get("DOCS_REFUSED")
            if aside:  # kept, so the sentence can be fixed without running on that machine again
                rel_out = recordings.path_for(cls, block.key).relative_to(recordings.OUTPUTS)
                path = Path(aside) / rel_out
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(recordings.Recording(block.key, cls, res.output, meta).dump(),
                                encoding="utf-8")
            raise Mismatch(f"{head}--- not recorded: this run contradicts what the pages say "
                           f"about it (fix the program or the sentence) ---\n"
                           + "\n".join(against) + f"\n--- output (tail) ---\n{_tail(res.output)}")
        if rec is not None and rec.meta.get("command") == command and rec.exit == res.exit \
                and rec.meta.get("files") == files \
                and rec.meta.get("ran on") == meta.get("ran on") \
                and recordings.normalise(rec.body) == recordings.normalise(res.output):
            return "unchanged"
        recordings.save(recordings.Recording(block.key, cls, res.output, meta))
        return f"recorded {cls}/{block.key}"
    rel = recordings.path_for(cls, block.key).relative_to(ROOT)
    if rec is None:
        raise Mismatch(f"{head}--- no recorded {cls} output {rel}; record it with "
                       f"`make update-outputs` on a {cls.upper()} machine.")
    want, got = recordings.normalise(rec.body), recordings.normalise(res.output)
    if want != got:
        diff = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True),
                                            f"recorded {rel}", "this run"))
        raise Mismatch(f"{head}--- output differs from the recording (volatile parts masked; "
                       f"`make update-outputs` if the change is right) ---\n{diff}")
    why = recordings.stale(rec, command, block.snippets)
    if why:
        raise Mismatch(f"{head}--- {rel} is out of date ({why}), although the output still "
                       f"matches: `make update-outputs` rewrites its header.")
    return "matches recording"


def stale_recordings(blocks: list[Block], cls: str) -> dict[str, str]:
    """Recordings of device class ``cls`` that no longer fit their page's command: path -> why."""
    out = {}
    for b in blocks:
        if cls == "cpu-cuda-build" and not b.builds:
            continue
        rec = recordings.load(cls, b.key) if b.key else None
        why = rec and recordings.stale(rec, command_of(b), b.snippets)
        if why:
            out[rec.path.relative_to(ROOT).as_posix()] = why
    return out


def missing_recordings(blocks: list[Block], cls: str) -> dict[str, str]:
    """Outputs the pages name that have no recording of class ``cls``: key -> what its block
    needs (its marks), or "" where any machine of that class can record it."""
    out = {}
    for b in blocks:
        if b.key and b.key not in out and recordings.load(cls, b.key) is None:
            needs = [m.removeprefix("pytest.mark.") for m in b.marks
                     if m.startswith(("pytest.mark.needs_2_gpus", "pytest.mark.needs_torch",
                                      *_OWN_HOSTS))]
            out[b.key] = ", ".join(needs) or "nothing special: a GPU run records it"
    return out
