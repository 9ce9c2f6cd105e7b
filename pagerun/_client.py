"""torchrun's ``PYTHON_EXEC`` in a warm block: start ``python -u PROGRAM ARGS`` through the
fork server of ``pagerun.warmpool`` and behave as that process would (signals, exit status).

Also ``torchrun`` itself in a shell block (``_client.py --torchrun SHIM ARGS``, from the
``torchrun`` script that ``pagerun.warmpool.agent_dir`` puts first on the block's PATH): the
agent, ``torch.distributed.run``, starts in the server with the shell's environment, working
directory and streams; this process stays the one the shell knows (``$!``, ``wait``, ``kill``).

Standard library only, and nothing else imported: this is a process per worker, started as
``python -I -S pagerun/_client.py`` (no site-packages, no ``PYTHON*`` settings of the reader's,
not even this package on its path), so the wire protocol lives here and the server imports it
from this module.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys


IMPORT_TIME_ENV = ("TORCH_LOGS", "TORCHDYNAMO_", "TORCHINDUCTOR_", "TORCH_COMPILE_",
                   "TORCH_CPP_LOG_LEVEL")  # _warm's


# --------------------------------------------------------------------------------------------
# protocol: a request is a 4-byte length and JSON {argv, env, cwd, fd_numbers}, with its file
# descriptors on its first byte (stdin, stdout, stderr, then any others), each to become the
# number of the same place in fd_numbers in the child; answers are 4-byte signed integers: pid,
# then status

MAX_FDS = 64


def send_request(sock: socket.socket, argv, env, cwd, fds, numbers=(0, 1, 2)) -> int:
    data = json.dumps({"argv": list(argv), "env": dict(env), "cwd": str(cwd),
                       "fd_numbers": list(numbers)}).encode()
    msg = struct.pack("!I", len(data)) + data
    socket.send_fds(sock, [msg[:1]], list(fds))
    sock.sendall(msg[1:])
    return read_int(sock)


def read_int(sock: socket.socket) -> int | None:
    buf = b""
    while len(buf) < 4:
        chunk = sock.recv(4 - len(buf))
        if not chunk:
            return None
        buf += chunk
    return struct.unpack("!i", buf)[0]


def recv_request(conn: socket.socket):
    """The server's side of ``send_request``: (request, file descriptors)."""
    first, fds, _, _ = socket.recv_fds(conn, 1, MAX_FDS)
    buf = first
    while len(buf) < 4:
        buf += conn.recv(4 - len(buf))
    size = struct.unpack("!I", buf[:4])[0]
    data = buf[4:]
    while len(data) < size:
        chunk = conn.recv(min(1 << 16, size - len(data)))
        if not chunk:
            raise EOFError
        data += chunk
    return json.loads(data), fds


# --------------------------------------------------------------------------------------------
# the client


def _real_torchrun(shim: str, env: dict) -> str | None:
    """The ``torchrun`` the shell would have run without the shim: the next one on PATH."""
    mine = os.path.realpath(os.path.dirname(shim))
    for folder in env.get("PATH", "").split(os.pathsep):
        path = os.path.join(folder or ".", "torchrun")
        if os.path.realpath(folder or ".") != mine and os.access(path, os.X_OK) \
                and os.path.isfile(path):
            return path
    return None


def _same_python(script: str, python: str) -> bool:
    """``script``'s ``#!`` names an interpreter of the server's environment (same bin folder)."""
    try:
        with open(script, "rb") as f:
            first = f.readline(512).decode("utf-8", "replace")
    except OSError:
        return False
    if not first.startswith("#!"):
        return False
    interp = first[2:].split()[0] if first[2:].split() else ""
    return interp == python or os.path.dirname(interp) == os.path.dirname(python)


def agent(shim: str, args: list[str]) -> None:
    """``torchrun ARGS`` in a shell block: its agent forked from the server."""
    env = dict(os.environ)
    real = _real_torchrun(shim, env)
    if real is None:
        sys.stderr.write("torchrun: command not found\n")
        sys.exit(127)
    address = env.get("PAGERUN_FORKSERVER", "")
    python = env.get("PAGERUN_PYTHON", "")
    if (not address or not python or not _same_python(real, python)
            or any(k.startswith(IMPORT_TIME_ENV) for k in env)):
        os.execve(real, ["torchrun", *args], env)  # what the shell would have done
    _forward_and_exit(address, [real, *args], env,
                      lambda: os.execve(real, ["torchrun", *args], env), os.kill)


def spawned(address: str, python: str, args: list[str]) -> None:
    """``python ARGS`` that multiprocessing starts (``multiprocessing.set_executable``, which the
    server sets in a warm program: see pagerun.warmpool): a spawn child (``-c "from
    multiprocessing.spawn import spawn_main; ..." --multiprocessing-fork``), a forkserver or a
    resource tracker. The child skips ``import torch``; it gets the descriptors multiprocessing
    passed this process, at the same numbers. This process stays the one its parent knows
    (``Process.pid``, ``terminate()``, ``exitcode``, its sentinel)."""
    env = dict(os.environ)

    def fresh():  # what multiprocessing would have started
        os.execve(python, [python, *args], env)

    # the interpreter's options (the server's own, as the parent was its child) come first
    i = args.index("-c") if "-c" in args else -1
    if (i < 0 or not all(a.startswith("-") for a in args[:i]) or len(args) <= i + 1
            or not args[i + 1].startswith("from multiprocessing.")
            or any(k.startswith(IMPORT_TIME_ENV) for k in env)):
        fresh()
    numbers = []
    for name in os.listdir("/dev/fd"):  # what multiprocessing passed (and 0, 1, 2)
        try:
            os.fstat(int(name))  # not the listing's own descriptor, closed by now
        except (OSError, ValueError):
            continue
        numbers.append(int(name))
    numbers = sorted(numbers)
    if len(numbers) > MAX_FDS or numbers[:3] != [0, 1, 2]:
        fresh()

    def killpg(pid, sig):
        os.killpg(pid, sig)

    _forward_and_exit(address, args[i:], env, fresh, killpg, numbers)


def _forward_and_exit(address, argv, env, fallback, send, numbers=(0, 1, 2)) -> None:
    """Start ``argv`` in the server, forward signals to it with ``send``, exit as it did."""
    pid = None
    pending = []

    def forward(sig, _frame):
        if pid is None:
            pending.append(sig)
            return
        try:
            send(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT,
                signal.SIGUSR1, signal.SIGUSR2):
        if signal.getsignal(sig) != signal.SIG_IGN:  # ignored stays ignored (a `&` job's INT)
            signal.signal(sig, forward)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(address)
    except OSError:  # no server: a fresh interpreter, as without us
        fallback()
    pid = send_request(sock, argv, env, os.getcwd(), list(numbers), numbers)
    if pid is None:
        sys.exit(1)
    for fd in numbers[3:]:  # the child has them: a pipe's end closes when the child ends
        os.close(fd)
    for sig in pending:
        forward(sig, None)
    code = read_int(sock)
    if code is None:
        sys.exit(1)
    if code < 0:  # killed by a signal: so is this process
        if -code not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


def main() -> None:
    if len(sys.argv) >= 3 and sys.argv[1] == "--torchrun":
        agent(sys.argv[2], sys.argv[3:])
        return
    if len(sys.argv) >= 4 and sys.argv[1] == "--spawn":
        spawned(sys.argv[2], sys.argv[3], sys.argv[4:])
        return
    env = dict(os.environ)
    address = env.pop("PAGERUN_FORKSERVER", "")
    python = env.pop("PAGERUN_PYTHON", sys.executable)
    env.pop("PYTHON_EXEC", None)
    args = sys.argv[1:]
    # not what torchrun starts, or settings that the server's imports would not see
    if (not (address and len(args) >= 2 and args[0] == "-u")
            or any(k.startswith(IMPORT_TIME_ENV) for k in env)):
        os.execve(python, [python, *args], env)
    try:  # the agent is this process's parent: when it dies, this goes, and then the worker
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass

    def killpg(pid, sig):
        os.killpg(pid, sig)

    _forward_and_exit(address, args[1:], env, lambda: os.execve(python, [python, *args], env),
                      killpg)


if __name__ == "__main__":
    main()
