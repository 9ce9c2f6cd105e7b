"""Start ``python snippets/PROGRAM.py ARGS`` as a child of an interpreter that has imported torch.

A fork server (``python pagerun/warmpool.py SOCKET``, one per test session) imports
``pagerun._warm`` (torch and friends, never CUDA) and then, for every request, forks a child that
looks like a fresh ``python PROGRAM ARGS``:

- its own session and process group (so everything it starts can be killed with it);
- the standard streams the client passed (file descriptors over the socket), unbuffered;
- ``os.environ``, the working directory, ``sys.argv``, and ``sys.path`` as a fresh interpreter
  of this environment has it, with the program's folder first;
- the program runs as ``__main__`` (``runpy.run_path``); ``sys.exit`` behaves as in Python (an
  int is the status, a string is printed to stderr with status 1); an uncaught exception prints
  the traceback Python prints (without runpy's frames) and exits with status 1;
- ``atexit`` handlers run, streams are flushed, and the process ends with ``os._exit``.

The server sends the child's pid and, when it ends, its status (negative: killed by that
signal). When a client goes away before its child has ended, the server kills the child's
process group: nothing outlives the process that asked for it.

Four clients:

- ``run()``, for a block: ``python snippets/...`` or ``torchrun ...`` itself (torchrun's agent).
- ``pagerun/_client.py``, for torchrun's workers: the agent starts ``$PYTHON_EXEC -u PROGRAM
  ARGS`` for each (torchrun's documented override of ``sys.executable``); the client passes its
  streams and environment to the server, forwards the signals the agent sends, and exits as the
  worker did. The worker, too, skips ``import torch``, which is most of a small program's time.
- the same client as ``torchrun`` in a shell block (``agent_dir``): the agent is started here with
  the shell's environment and streams; the client is the process the shell waits for and kills.
- the same client as the interpreter multiprocessing's spawn starts in a warm program
  (``_client.py --spawn``, set with ``multiprocessing.set_executable`` in ``_program``): the
  spawn child gets every descriptor the client was given, at the same numbers.
"""

from __future__ import annotations

import atexit
import fcntl
import json
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

# the wire protocol is the client's: it runs with the standard library only (see there)
from pagerun._client import read_int, recv_request, send_request

_LOCK = threading.Lock()
_SERVER: tuple[subprocess.Popen, str, str, str] | None = None
CLIENT = Path(__file__).with_name("_client.py")


# --------------------------------------------------------------------------------------------
# the server

def serve(path: str) -> None:
    # a fresh interpreter's, after the script's folder (without the checkout that address()
    # put on PYTHONPATH for this server's own imports)
    base_path = [p for p in sys.path[1:] if p != os.environ.get("PAGERUN_CHECKOUT")]
    spawn_exe = os.path.join(os.path.dirname(path), "spawn-python")  # written by address()
    # torch 2.11's inductor asks torch.cuda.is_available() at import; torch's own check arms
    # CUDA's fork guard, and every child would fail with "Cannot re-initialize CUDA in forked
    # subprocess". The NVML check torch offers instead (its PYTORCH_NVML_BASED_CUDA_CHECK) does
    # not; it is on for these imports only, where a GPU's driver has NVML.
    nvml = os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK")
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    try:
        import pagerun._warm  # noqa: F401
    finally:
        if nvml is None:
            del os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"]
        else:
            os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = nvml
    if _fork_guard_armed():  # whatever armed it: children start as fresh interpreters instead
        print("cold: an import armed CUDA's fork guard in the fork server (torch "
              f"{sys.modules['torch'].__version__}), so a forked program could not use CUDA",
              flush=True)
        return

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if not os.path.isdir(os.path.dirname(path)):
        return  # the session ended while torch was imported (every test deselected, say)
    try:
        listener.bind(path)
    except FileNotFoundError:
        return  # the same, between the check and the bind
    listener.listen(256)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    conns: dict[int, tuple[socket.socket, int]] = {}  # fileno -> (connection, child pid)
    pids: dict[int, socket.socket | None] = {}  # child pid -> its connection, if still open
    # DOCS_TIMINGS: CPU seconds of the children, by the block that asked (PAGERUN_BLOCK)
    tags: dict[int, str] = {}
    cpu: dict[str, float] = {}
    cpu_file = os.environ.get("PAGERUN_CPU_FILE")
    print("ready", flush=True)
    while True:
        watch = [listener, wake_r, 0, *(c for c, _ in conns.values())]
        try:
            ready, _, _ = select.select(watch, [], [])
        except InterruptedError:
            continue
        if 0 in ready and not os.read(0, 1 << 12):  # the test session is gone
            for pid in pids:
                _killpg(pid)
            return
        if wake_r in ready:
            os.read(wake_r, 1 << 12)
        while pids:  # report every child that ended
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            tag = tags.pop(pid, None)
            if cpu_file and tag:
                cpu[tag] = cpu.get(tag, 0.0) + usage.ru_utime + usage.ru_stime
                with open(cpu_file + ".tmp", "w") as f:
                    json.dump(cpu, f)
                os.replace(cpu_file + ".tmp", cpu_file)
            conn = pids.pop(pid, None)
            if conn is not None:
                conns.pop(conn.fileno(), None)
                try:
                    conn.sendall(struct.pack("!i", os.waitstatus_to_exitcode(status)))
                except OSError:
                    pass
                conn.close()
        for item in ready:
            if isinstance(item, socket.socket) and item is not listener:
                conn, pid = conns.get(item.fileno(), (None, None))
                if conn is None:
                    continue
                try:
                    gone = not conn.recv(64)
                except OSError:
                    gone = True
                if gone:  # the client went away first: its child goes too
                    _killpg(pid)
                    conns.pop(conn.fileno())
                    pids[pid] = None
                    conn.close()
        if listener in ready:
            conn, _ = listener.accept()
            try:
                req, fds = recv_request(conn)
            except (OSError, EOFError, ValueError):
                conn.close()
                continue
            keep = [listener.fileno(), wake_r, wake_w, conn.fileno(), *conns]
            pid = os.fork()
            if pid == 0:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                numbers = req.get("fd_numbers", [0, 1, 2])
                # each descriptor to its number: first above all of them, so that no dup2
                # overwrites one still to be placed
                high = max([*numbers, *fds, *keep]) + 1
                moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, high) for fd in fds]
                for fd in {*keep, *fds} - {0, 1, 2}:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
                for number, fd in zip(numbers, moved):
                    os.dup2(fd, number)
                    os.close(fd)
                _program(req["argv"], req["env"], req["cwd"], base_path, spawn_exe)
            for fd in fds:
                os.close(fd)
            conn.sendall(struct.pack("!i", pid))
            tags[pid] = req["env"].get("PAGERUN_BLOCK", "")
            conns[conn.fileno()] = (conn, pid)
            pids[pid] = conn


def _fork_guard_armed() -> bool:
    """Whether a child forked now is in torch's "bad fork" state (CUDA unusable there)."""
    import torch

    check = getattr(torch._C, "_cuda_isInBadFork", None)  # only CUDA builds have the guard
    if check is None:
        return False
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(w, b"1" if check() else b"0")
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        armed = f.read(1) == b"1"
    os.waitpid(pid, 0)
    return armed


def _killpg(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _drop_library_finalizers() -> None:
    """Skip, at exit, the finalizers of torch.library's Library objects (about 170 once torch
    is imported): they take the kernels they registered out of the dispatcher, which changes
    nothing this process prints before os._exit. Here the dispatcher's tables are the fork
    server's pages, so taking kernels out copies them first: 27 ms of CPU and 7,000 page
    faults in each of the suite's ~350 warm processes (2-core AMD EPYC; 7 ms in a fresh
    interpreter). The program's own atexit functions and finalizers still run."""
    import weakref

    library = sys.modules.get("torch.library")
    registry = getattr(weakref.finalize, "_registry", None)  # CPython's list of finalizers
    if library is None or not isinstance(registry, dict):
        return
    for finalizer, info in list(registry.items()):
        if getattr(info, "func", None) is getattr(library, "_del_library", object()):
            finalizer.detach()


def _cuda_mark():
    """``pagerun/_site/sitecustomize.py``, the code fresh interpreters run on a GPU machine,
    loaded by its path (the children's ``sys.path`` is a fresh interpreter's, without the
    checkout)."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_site", "sitecustomize.py")
    spec = importlib.util.spec_from_file_location("pagerun_cuda_mark", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _program(argv: list[str], env: dict, cwd: str, base_path: list[str],
             spawn_exe: str | None = None) -> None:
    """In the forked child: become ``python argv...`` (a script, or ``-c CODE``) and never
    return. The processes it starts with multiprocessing's spawn (and its forkserver) start
    warm too, through ``spawn_exe`` (pagerun/_client.py --spawn), unless the program asks for
    its parent's pid: a warm child's parent is this server, not the program."""
    import atexit
    import builtins
    import io
    import traceback
    import types

    os.setsid()
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8",
                                  write_through=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8",
                                  errors="backslashreplace", write_through=True)
    sys.__stdout__, sys.__stderr__, sys.__stdin__ = sys.stdout, sys.stderr, sys.stdin
    code, script = 1, None
    try:
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        if env.get("PAGERUN_CUDA_MARK"):  # on a GPU machine: did it hold GPU memory?
            _cuda_mark().mark_at_exit(env["PAGERUN_CUDA_MARK"])
        if env.get("PYTHONFAULTHANDLER"):  # read at start-up, here
            import faulthandler

            faulthandler.enable()
        if "TORCH_DISTRIBUTED_DEBUG" in env:  # c10d's level, set when torch.distributed
            import torch.distributed  # is imported: here

            if torch.distributed.is_available():
                torch.distributed.set_debug_level_from_env()
        if env.get("OMP_NUM_THREADS", "").isdigit():  # OpenMP read it at start-up, here
            import torch

            torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
        main = types.ModuleType("__main__")
        main.__dict__.update(__cached__=None, __loader__=None, __package__=None,
                             __spec__=None, __builtins__=builtins)
        if argv[0] == "-c":  # multiprocessing's spawn child (pagerun/_client.py --spawn)
            script, source = "<string>", argv[1].encode()
            sys.argv = ["-c", *argv[2:]]
            sys.path[:] = ["", *base_path]
        else:
            script = os.path.abspath(argv[0])
            sys.argv = list(argv)
            sys.path[:] = [os.path.dirname(script), *base_path]
            with io.open_code(script) as f:
                source = f.read()
            main.__file__ = script
        if spawn_exe and b"getppid" not in source:
            import multiprocessing.spawn

            multiprocessing.spawn.set_executable(spawn_exe)
        # as runpy.run_path would, without its frames: the stack is a fresh interpreter's
        # (inspect.stack() walks every module for a frame whose file is not there: torchrun's
        # agent calls it)
        program = compile(source, script, "exec")
        sys.modules["__main__"] = main
        code = 0
        exec(program, main.__dict__)
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException as e:  # noqa: BLE001 - printed as the interpreter would
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != script:
            tb = tb.tb_next
        traceback.print_exception(type(e), e, tb or e.__traceback__)
        code = 1
    try:
        _drop_library_finalizers()
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        os._exit(code & 0xFF if code >= 0 else 1)


# --------------------------------------------------------------------------------------------
# the test session's side

class Cold(RuntimeError):
    """The fork server cannot start programs as a fresh interpreter would (the reason)."""


_COLD: str | None = None  # why programs start as fresh interpreters, once known


def cold_reason() -> str | None:
    """None where programs can start warm here; else why not (warned once)."""
    global _COLD
    if _COLD is None:
        try:
            address()
        except Cold as e:
            with _LOCK:
                if _COLD is None:
                    _COLD = str(e)
                    warnings.warn(f"pagerun: every program starts as a fresh interpreter: {e}",
                                  stacklevel=2)
    return _COLD


def address() -> str:
    """The server's socket, started on first use; it ends with the process that started it."""
    global _SERVER
    with _LOCK:
        if _SERVER is None or _SERVER[0].poll() is not None:
            folder = tempfile.mkdtemp(prefix="pagerun-")
            atexit.register(shutil.rmtree, folder, True)  # with the session, as the server
            path = os.path.join(folder, "fork.sock")
            # what torchrun's agent execs (and names as the "binary" in its failure report)
            client = os.path.join(folder, "python")
            with open(client, "w") as f:
                f.write(f'#!/bin/sh\nexec "{sys.executable}" -I -S "{CLIENT}" "$@"\n')
            os.chmod(client, 0o755)
            # `torchrun` for shell blocks: its agent starts here too (pagerun/_client.py)
            agents = os.path.join(folder, "bin")
            os.mkdir(agents)
            shim = os.path.join(agents, "torchrun")
            with open(shim, "w") as f:
                f.write(f'#!/bin/sh\nexec "{sys.executable}" -I -S "{CLIENT}" --torchrun '
                        f'"$0" "$@"\n')
            os.chmod(shim, 0o755)
            # what multiprocessing's spawn starts in a warm program (set_executable)
            spawn = os.path.join(folder, "spawn-python")
            with open(spawn, "w") as f:
                f.write(f'#!/bin/sh\nexec "{sys.executable}" -I -S "{CLIENT}" --spawn '
                        f'"{path}" "{sys.executable}" "$@"\n')
            os.chmod(spawn, 0o755)
            # a script, not -m: no runpy frames under the children's stack (inspect.stack(),
            # which torchrun's agent calls, walks every module for a frame whose file is not
            # there: a second of CPU per agent); the checkout on its path, as -m would put it
            checkout = str(Path(__file__).resolve().parent.parent)
            python_path = os.pathsep.join(filter(None, [checkout, os.environ.get("PYTHONPATH")]))
            proc = subprocess.Popen(
                [sys.executable, __file__, path],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True,
                env=dict(os.environ, PYTHONPATH=python_path, PAGERUN_CHECKOUT=checkout,
                         PAGERUN_CPU_FILE=os.path.join(folder, "cpu.json")))
            line = proc.stdout.readline().decode().strip()
            if line.startswith("cold: "):
                proc.wait()
                raise Cold(line[len("cold: "):])
            if line != "ready":
                raise RuntimeError("pagerun.warmpool: the fork server did not start")
            # its stdin stays open as long as this process lives
            _SERVER = (proc, path, client, agents)
        return _SERVER[1]


def cpu_seconds() -> dict[str, float]:
    """CPU seconds of the server's children that have ended, by their ``PAGERUN_BLOCK``."""
    try:
        with open(os.path.join(os.path.dirname(_SERVER[1]), "cpu.json")) as f:
            return json.load(f)
    except (TypeError, OSError, ValueError):
        return {}


def worker_exec() -> str:
    address()
    return _SERVER[2]


def agent_dir() -> str:
    """A folder whose ``torchrun`` starts torchrun's agent through the server (first on a shell
    block's PATH): the shell sees one process that acts as the agent (``$!``, signals, exit
    status), and the agent skips ``import torch``. Settings of ``IMPORT_TIME_ENV``, no server or
    another environment's torchrun: the real torchrun, exec'd."""
    address()
    return _SERVER[3]


def worker_env(env: dict) -> dict:
    """``env`` for torchrun's agent: its workers start through the server too."""
    return dict(env, PYTHON_EXEC=worker_exec(), PAGERUN_FORKSERVER=address(),
                PAGERUN_PYTHON=sys.executable)


def run(argv: list[str], env: dict, cwd, timeout: float) -> tuple[str, int, bool]:
    """Run one program; returns (output, exit status, timed out)."""
    fd, out_path = tempfile.mkstemp(prefix="pagerun-", suffix=".out")
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(out_path, os.O_WRONLY | os.O_APPEND)
    os.close(fd)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    timed_out = False
    try:
        sock.connect(address())
        pid = send_request(sock, argv, env, cwd, [null, out, out])
        os.close(null)
        os.close(out)
        null = out = -1
        end = time.monotonic() + max(timeout, 1)
        code = None
        while code is None:
            left = end - time.monotonic()
            if left <= 0 or not select.select([sock], [], [], left)[0]:
                timed_out = True
                _killpg(pid)
                code = read_int(sock)
                break
            code = read_int(sock)
            if code is None:
                code = 1
                break
        _killpg(pid)  # whatever it started, in its process group
        if code is not None and code < 0:  # killed by a signal: what a shell reports
            code = 128 - code
        with open(out_path, encoding="utf-8", errors="replace") as f:
            return f.read(), code if code is not None else 1, timed_out
    finally:
        sock.close()
        for f in (null, out):
            if f >= 0:
                os.close(f)
        os.unlink(out_path)


if __name__ == "__main__":
    serve(sys.argv[1])
