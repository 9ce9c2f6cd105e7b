"""Start ``python snippets/PROGRAM.py ARGS`` as a child of an interpreter that has imported torch.

``run(argv, env, cwd, timeout)`` forks a process from ``multiprocessing``'s fork server (which
preloads ``pagerun._warm``: torch and friends, never CUDA) and makes it look like a fresh
``python PROGRAM ARGS`` started by a shell from ``cwd``:

- its own session and process group (so the caller can kill everything it starts);
- standard input ``/dev/null``; standard output and error into one file, unbuffered;
- ``os.environ``, the working directory, ``sys.argv``, and ``sys.path`` as a fresh interpreter
  of this environment has it, with the program's folder first;
- the program runs as ``__main__`` (``runpy.run_path``); ``sys.exit`` behaves as in Python (an
  int is the status, a string is printed to stderr with status 1); an uncaught exception prints
  the traceback Python prints (without runpy's frames) and exits with status 1;
- ``atexit`` handlers run, streams are flushed, and the process ends with ``os._exit``.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.spawn
import os
import subprocess
import sys
import tempfile
import threading

_CTX = None
_BASE_PATH: list[str] | None = None
_LOCK = threading.Lock()


def _context():
    global _CTX, _BASE_PATH
    with _LOCK:
        if _CTX is None:
            # sys.path of a fresh interpreter here (without the test runner's additions)
            out = subprocess.run([sys.executable, "-c", "import sys; print(*sys.path[1:], sep='\\n')"],
                                 capture_output=True, text=True, check=True)
            _BASE_PATH = [p for p in out.stdout.splitlines() if p]
            # The program, not the caller's __main__, is the child's main module: the fork server
            # must not re-import the caller's (pytest's, a script's, <stdin>) before forking.
            spawn = multiprocessing.spawn
            if not getattr(spawn.get_preparation_data, "_pagerun", False):
                original = spawn.get_preparation_data

                def get_preparation_data(name):
                    data = original(name)
                    data.pop("init_main_from_path", None)
                    data.pop("init_main_from_name", None)
                    return data

                get_preparation_data._pagerun = True
                spawn.get_preparation_data = get_preparation_data
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(["pagerun._warm"])
            _CTX = ctx
    return _CTX


def _child(argv: list[str], env: dict, cwd: str, out_path: str, base_path: list[str]) -> None:
    import atexit
    import io
    import runpy
    import traceback

    os.setsid()
    fd = os.open(out_path, os.O_WRONLY | os.O_APPEND)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8",
                                  write_through=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8",
                                  errors="backslashreplace", write_through=True)
    sys.__stdout__, sys.__stderr__, sys.__stdin__ = sys.stdout, sys.stderr, sys.stdin
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    if env.get("OMP_NUM_THREADS", "").isdigit():  # OpenMP read it at start-up, in the server
        import torch

        torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
    script = os.path.abspath(argv[0])
    sys.argv = list(argv)
    sys.path[:] = [os.path.dirname(script), *base_path]
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
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
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        os._exit(code & 0xFF if code >= 0 else 1)


def run(argv: list[str], env: dict, cwd, timeout: float) -> tuple[str, int, bool]:
    """Run one program; returns (output, exit status, timed out)."""
    ctx = _context()
    fd, out_path = tempfile.mkstemp(prefix="pagerun-", suffix=".out")
    os.close(fd)
    try:
        proc = ctx.Process(target=_child, args=(argv, env, str(cwd), out_path, _BASE_PATH))
        proc.start()
        proc.join(max(timeout, 1))
        timed_out = proc.is_alive()
        _kill(proc.pid)  # the program's process group: whatever it started goes too
        proc.join()
        code = proc.exitcode
        if code is not None and code < 0:  # killed by a signal: what a shell reports
            code = 128 - code
        with open(out_path, encoding="utf-8", errors="replace") as f:
            return f.read(), code if code is not None else 1, timed_out
    finally:
        os.unlink(out_path)


def _kill(pgid: int | None) -> None:
    import signal

    if pgid:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
