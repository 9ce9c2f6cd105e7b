"""torchrun's ``PYTHON_EXEC`` in a warm block: start ``python -u PROGRAM ARGS`` through the
fork server of ``pagerun.warmpool`` and behave as that process would (signals, exit status).

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


IMPORT_TIME_ENV = ("TORCH_LOGS", "TORCHDYNAMO_", "TORCHINDUCTOR_", "TORCH_COMPILE_")  # _warm's


# --------------------------------------------------------------------------------------------
# protocol: a request is a 4-byte length and JSON {argv, env, cwd}, with three file descriptors
# (stdin, stdout, stderr) on its first byte; answers are 4-byte signed integers: pid, then status

def send_request(sock: socket.socket, argv, env, cwd, fds) -> int:
    data = json.dumps({"argv": list(argv), "env": dict(env), "cwd": str(cwd)}).encode()
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
    first, fds, _, _ = socket.recv_fds(conn, 1, 3)
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


def main() -> None:
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
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(address)
    except OSError:  # no server: a fresh interpreter, as without us
        os.execve(python, [python, *args], env)
    pid = send_request(sock, args[1:], env, os.getcwd(), [0, 1, 2])

    def forward(sig, _frame):
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT,
                signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, forward)
    code = read_int(sock)
    if code is None:
        sys.exit(1)
    if code < 0:  # the worker was killed by a signal: so is this process
        if -code not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


if __name__ == "__main__":
    main()
