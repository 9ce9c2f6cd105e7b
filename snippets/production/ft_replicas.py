"""torchft: two replica groups train under a lighthouse; one is killed, the other
trains on alone, the killed one restarts, heals from the healthy one, and both end with
equal weights.

Run: python snippets/production/ft_replicas.py      (needs: pip install torchft)
"""

import argparse
import ctypes
import io
import multiprocessing as mp
import os
import queue
import signal
import sys
import tempfile
import time
from datetime import timedelta

import torch
from torch import nn

argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
os.environ.setdefault("RUST_LOG", "error")  # torchft's Rust part logs every quorum
KILL_AT, TOGETHER = 3, 3  # group 1 dies at step 3; the end: 3 steps after it is back
ctx = mp.get_context("fork")  # children start without importing torch again
both_up = ctx.Barrier(2)  # the first quorum waits for both groups


def die_with_parent() -> None:
    """Linux: the kernel kills this process when its parent dies; no orphans."""
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG


def lighthouse(out) -> None:
    die_with_parent()
    from torchft._torchft import LighthouseServer
    server = LighthouseServer(bind="127.0.0.1:0", min_replicas=1, join_timeout_ms=1000)
    out.put(server.address())
    signal.pause()  # serve until the parent ends it


# --8<-- [start:replica]
def replica(group: int, life: int, address: str, events, log: str) -> None:
    die_with_parent()
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(fd, 1), os.dup2(fd, 2)  # torchft's messages go to the group's log
    import torch.distributed as dist
    from torchft import DistributedDataParallel, Manager, Optimizer, ProcessGroupGloo

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    inner = torch.optim.AdamW(model.parameters(), lr=0.01)
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    manager = Manager(  # a group of one process: its rank 0 talks to the lighthouse
        pg=ProcessGroupGloo(timeout=timedelta(seconds=10)), min_replica_size=1,
        state_dict=lambda: {"model": model.state_dict(), "optim": inner.state_dict()},
        load_state_dict=lambda sd: (model.load_state_dict(sd["model"]),
                                    inner.load_state_dict(sd["optim"])),
        replica_id=f"group{group}", lighthouse_addr=address, hostname="127.0.0.1",
        store_addr="127.0.0.1", store_port=store.port, rank=0, world_size=1,
        timeout=timedelta(seconds=10), quorum_timeout=timedelta(seconds=60),
        connect_timeout=timedelta(seconds=10))
    ddp = DistributedDataParallel(manager, model)  # all-reduces across the groups
    opt = Optimizer(manager, inner)  # zero_grad() joins the quorum, step() commits
    if life == 0:  # both heartbeat to the lighthouse before either asks for a quorum
        both_up.wait(timeout=60)
        time.sleep(1)
    together, alone = 0, False
    while together < TOGETHER or not alone:
        step = manager.current_step()
        if group == 1 and life == 0 and step == KILL_AT:
            os.kill(os.getpid(), signal.SIGKILL)  # a crash: no goodbye to anyone
        g = torch.Generator().manual_seed(1000 * step + group)
        x, y = torch.randn(4, 8, generator=g), torch.randn(4, 1, generator=g)
        opt.zero_grad()
        nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
        time.sleep(0.05)  # stands for the compute of a real step
        n = manager.num_participants()
        committed = manager.current_step() > step
        events.put(("step", group, step, n, committed))
        alone = alone or n == 1 or life > 0
        together = together + 1 if alone and n == 2 else 0
    buf = io.BytesIO()  # bytes, not tensors: a queue would share tensors' memory with a
    torch.save(model.state_dict(), buf)  # process that is about to exit
    events.put(("final", group, buf.getvalue()))
    manager.shutdown()
# --8<-- [end:replica]


# --8<-- [start:run]
logs = tempfile.mkdtemp(prefix="ft-replicas-")
found = ctx.Queue()
lh = ctx.Process(target=lighthouse, args=(found,), daemon=True)
lh.start()
address = found.get(timeout=60)
events = ctx.Queue()
start = lambda g, life: ctx.Process(target=replica, daemon=True, args=(  # noqa: E731
    g, life, address, events, os.path.join(logs, f"group{g}.log")))
procs = {0: start(0, 0), 1: start(1, 0)}
for p in procs.values():
    p.start()
joint, solo, final, rejoined, restarted = [], 0, {}, None, False
last = time.monotonic()
try:
    while len(final) < 2:
        # group 1 is gone and group 0 has trained a step without it: start group 1 again
        if not restarted and procs[1].exitcode is not None and solo:
            print(f"group 1 killed at step {KILL_AT} (exit status {procs[1].exitcode}: "
                  f"SIGKILL); restarting it")
            procs[1], restarted = start(1, 1), True
            procs[1].start()
        try:
            ev = events.get(timeout=0.5)
        except queue.Empty:
            if time.monotonic() - last > 90:
                raise SystemExit(f"no progress for 90 s; the logs: {logs}") from None
            continue
        last = time.monotonic()
        if ev[0] == "step" and ev[1] == 0 and ev[3] == 1 and ev[4]:
            solo += 1  # group 0 committed a step with a quorum of one group
        elif ev[0] == "step" and ev[3] == 2 and not solo:
            joint.append(ev[2])
        elif ev[0] == "step" and ev[1] == 1 and ev[3] == 2 and rejoined is None:
            rejoined = ev[2]
        elif ev[0] == "final":
            final[ev[1]] = torch.load(io.BytesIO(ev[2]), weights_only=True)
finally:  # whatever happened: no process left behind
    for p in [*procs.values(), lh]:
        if p.is_alive():
            p.terminate()
        p.join(10)
print(f"steps {min(joint)} to {max(joint)}: both groups in the quorum")
print(f"steps group 0 trained alone: {solo} "
      + ("(>= 1: training went on without group 1)" if solo >= 1 else
         "(< 1: training stopped with group 1)"))
print(f"group 1 rejoined at step {rejoined} "
      + (f"(> {KILL_AT}: healed from group 0, not from step 0)" if rejoined > KILL_AT
         else f"(<= {KILL_AT}: not healed from group 0)"))
equal = all(torch.equal(final[0][k], final[1][k]) for k in final[0])
print(f"final weights of the two groups: torch.equal on all {len(final[0])}: {equal}")
if not (equal and solo >= 1 and rejoined > KILL_AT):
    raise SystemExit(f"fault tolerance failed; the groups' logs are in {logs}")
# --8<-- [end:run]
