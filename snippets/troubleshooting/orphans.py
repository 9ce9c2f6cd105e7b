"""Workers left running when torchrun is killed, and how to make sure none is left.

Run with: python snippets/troubleshooting/orphans.py
(Linux: it reads /proc. It runs torchrun's own entry point, torch.distributed.run.main,
in a forked child, so that it can kill that torchrun; the workers are this file with
--worker.)
"""

import argparse
import ctypes
import os
import signal
import sys
import tempfile
import time

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--worker", metavar="DIR",
                    help="what torchrun starts: report to DIR")
parser.add_argument("--pdeathsig", action="store_true",
                    help="worker: die with the launcher")
args = parser.parse_args()
if not sys.platform.startswith("linux"):
    sys.exit("this demo reads /proc and uses prctl: it needs Linux")


def die_with_parent():
    # --8<-- [start:pdeathsig]
    # Linux: SIGTERM this process when the process that started it (torchrun) dies,
    # even by SIGKILL; then check that it did not die before the call
    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG
    if os.getppid() != parent:
        sys.exit("the launcher is gone already")
    # --8<-- [end:pdeathsig]


if args.worker:  # a worker: stdlib only; stands in for a process holding GPU memory
    if args.pdeathsig:
        die_with_parent()
    report = os.path.join(args.worker, os.environ["RANK"])
    with open(report + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(report + ".tmp", report)  # complete when it appears
    end = time.monotonic() + 20  # a safety net: no worker of this demo lives longer
    while time.monotonic() < end:
        time.sleep(0.05)
    sys.exit(0)

import multiprocessing  # noqa: E402

from torch.distributed.run import main as torchrun  # noqa: E402


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is gone
    except FileNotFoundError:
        return False


def agent(argv, log):  # the forked child: torchrun, its log in a file
    fd = os.open(log, os.O_WRONLY | os.O_CREAT)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    torchrun(argv)


def wait_for(test, seconds):
    end = time.monotonic() + seconds
    while not test() and time.monotonic() < end:
        time.sleep(0.05)
    return test()


def run(label, sig, *worker_args):
    folder = tempfile.mkdtemp(prefix="orphans-")
    argv = ["--standalone", "--nproc-per-node=2",
            __file__, "--worker", folder, *worker_args]
    launcher = multiprocessing.get_context("fork").Process(
        target=agent, args=(argv, os.path.join(folder, "log")))
    launcher.start()
    files = [os.path.join(folder, str(rank)) for rank in range(2)]
    pids = []
    try:
        if not wait_for(lambda: all(map(os.path.exists, files)), 30):
            sys.exit("the workers did not start within 30 s")
        pids = [int(open(f).read()) for f in files]
        os.kill(launcher.pid, sig)  # what `kill -9`, `kill` or Ctrl-C sends to torchrun
        launcher.join(40)
        wait_for(lambda: not any(map(alive, pids)), 1)
        left = sum(map(alive, pids))
        result = f"torchrun gone; {left} of 2 workers still running"
        print(f"{label}:" + (" " if len(label) + len(result) < 79 else "\n  ") + result)
        return pids
    finally:
        if launcher.is_alive():
            launcher.kill()
            launcher.join(5)
        if pids and any(map(alive, pids)):
            cleanup(pids)
        for name in os.listdir(folder):
            os.unlink(os.path.join(folder, name))
        os.rmdir(folder)


# --8<-- [start:cleanup]
def cleanup(pids):
    # torchrun starts every worker in a session (and process group) of its own:
    # kill each worker's group, which also holds whatever that worker started
    for pid in pids:
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    if not wait_for(lambda: not any(map(alive, pids)), 10):
        for pid in filter(alive, pids):
            os.killpg(pid, signal.SIGKILL)
    return sum(map(alive, pids))
# --8<-- [end:cleanup]


# --8<-- [start:kill9]
pids = run("kill -9 torchrun (SIGKILL)", signal.SIGKILL)
print(f"  after killpg(SIGTERM) on each worker's group: {cleanup(pids)} left")
# --8<-- [end:kill9]
# --8<-- [start:fix]
run("Ctrl-C to torchrun (SIGINT)", signal.SIGINT)
run("kill torchrun (SIGTERM)", signal.SIGTERM)
run("kill -9 torchrun, workers with PR_SET_PDEATHSIG", signal.SIGKILL, "--pdeathsig")
# --8<-- [end:fix]
