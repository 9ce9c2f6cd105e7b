"""torchrun's ``PYTHON_EXEC`` in a warm block: start ``python -u PROGRAM ARGS`` through the
fork server of ``pagerun.warmpool`` and behave as that process would (signals, exit status).

Standard library only, and nothing else imported: this is a process per worker.
"""

import os
import signal
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


IMPORT_TIME_ENV = ("TORCH_LOGS", "TORCHDYNAMO_", "TORCHINDUCTOR_", "TORCH_COMPILE_")  # _warm's


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
    from pagerun.warmpool import read_int, send_request  # no torch in there

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
