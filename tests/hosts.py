"""Hosts with a network of their own, on one Linux machine, for the multi-node page and its tests.

Each host is a network namespace with one interface, ``eth0``, at 192.0.2.N/24 (TEST-NET-1, the
range RFC 5737 reserves for documentation), its own host name (a UTS namespace per command) and its
own ``/etc/hosts`` (``/etc/netns/NS/hosts`` mounted over it, as ``ip netns exec`` does). The hosts are joined
by a bridge that has no address and no uplink in the machine's own namespace, and the namespaces
have no default route: nothing they send can leave the machine. The file system is shared, as on
a cluster with a shared home directory.

Needs root, ``ip`` (iproute2), ``unshare`` and ``nsenter`` (util-linux). With ``--slurm``, Debian's
``slurmctld``, ``slurmd`` and ``munged`` too.

As a program (what the page runs)::

    python tests/hosts.py [--hosts 2] [--etc-hosts cluster|debian|self] [--timeout 100] [--slurm]
        (--each CMD | --on host1 CMD --on host2 CMD ... | --submit CMD)

runs CMD in bash on every host at once (``--each``), or one command per host (``--on``), waits
for all of them (at most ``--timeout`` seconds, then kills what is left), and prints each host's
output (stdout and stderr) in host order, each under a line ``== hostN: exit S ==``
(``--stop-on-failure``: the first failure stops the others; ``--merged``: one section for all
hosts, when it does not matter which host prints a message first). It exits 0
when every command did, 1 otherwise. ``--submit CMD`` runs one command on host1 after starting a
Slurm cluster (``--slurm``). Everything it made (processes, namespaces, links, files, daemons) is
removed when it ends, also after an error, Ctrl-C or SIGTERM; what a SIGKILLed run left behind is
removed, by name and by process id, by the next run (``sweep``). Commands see ``HOSTS_TMP``, a
scratch folder shared by the hosts and removed at the end, also their ``TMPDIR``.

As a module (what tests/test_hosts.py uses): ``with Hosts(2) as h: h.run(...)``, ``leftovers()``.
"""

from __future__ import annotations

import argparse
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
from pathlib import Path

PREFIX = "pgx"  # every namespace, link and folder made here starts with pgx<pid of its owner>
NET = "192.0.2"  # TEST-NET-1 (RFC 5737): documentation only, never routed
ROOT = Path(__file__).resolve().parent.parent
ETC_NETNS = Path("/etc/netns")
# the engine's warm start (pagerun.warmpool) forks torchrun's workers from a server outside the
# hosts' namespaces: commands on a host start their own interpreters
NOT_INHERITED = ("PYTHON_EXEC", "PAGERUN_FORKSERVER", "PAGERUN_PYTHON")


def unmet() -> str | None:
    """Why hosts cannot be made here, or None."""
    if sys.platform != "linux":
        return "needs Linux network namespaces"
    if os.geteuid() != 0:
        return "needs root (network namespaces, a bridge)"
    for tool in ("ip", "unshare", "nsenter"):
        if shutil.which(tool) is None:
            return f"needs `{tool}` (Debian: iproute2, util-linux)"
    return None


def unmet_slurm() -> str | None:
    for tool in ("slurmctld", "slurmd", "munged", "sbatch"):
        if shutil.which(tool) is None:
            return f"needs `{tool}` (Debian: apt-get install slurm-wlm munge)"
    return unmet()


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10, check=check)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _owner(name: str) -> int | None:
    m = re.match(rf"{PREFIX}(\d+)", name)
    return int(m.group(1)) if m else None


def namespaces() -> list[str]:
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines()
            if line.strip() and line.startswith(PREFIX)]


def links() -> list[str]:
    out = _ip("-o", "link", "show", check=False).stdout
    names = [line.split(":")[1].strip().split("@")[0] for line in out.splitlines()
             if line.count(":") >= 2]
    return [n for n in names if n.startswith(PREFIX)]


def _ns_pids(ns: str) -> list[int]:
    out = _ip("netns", "pids", ns, check=False).stdout
    return [int(p) for p in out.split() if p.isdigit()]


def daemons() -> list[str]:
    """Slurm and munge daemons started from a folder of ours (``/tmp/pgx...``)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue  # dead, waiting for its parent (or init) to collect its status
        except (OSError, IndexError):
            continue
        if re.search(r"\b(slurmctld|slurmd|slurmstepd|munged)\b", cmd) and f"/{PREFIX}" in cmd:
            found.append(f"{proc.name} {cmd.strip()}")
    return found


def leftovers(owner: int | None = None) -> list[str]:
    """Namespaces, links, /etc/netns folders and daemons of ours (of one owner pid, or all)."""
    def mine(name: str) -> bool:
        return owner is None or _owner(name) == owner
    left = [f"netns {n}" for n in namespaces() if mine(n)]
    left += [f"link {n}" for n in links() if mine(n)]
    if ETC_NETNS.is_dir():
        left += [f"dir {p}" for p in ETC_NETNS.iterdir() if p.name.startswith(PREFIX) and mine(p.name)]
    left += [f"daemon {d}" for d in daemons() if owner is None or f"/{PREFIX}{owner}" in d]
    return left


def _remove(owner: int) -> None:
    """Remove everything made by the run of process ``owner``: processes first, then names."""
    tag = f"{PREFIX}{owner}"
    for ns in [n for n in namespaces() if _owner(n) == owner]:
        for _ in range(20):  # a dying process may still start another: repeat until empty
            pids = _ns_pids(ns)
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.05)
        _ip("netns", "del", ns, check=False)
    for d in daemons():  # munged runs outside the namespaces
        if f"/{tag}" in d:
            try:
                os.kill(int(d.split()[0]), signal.SIGKILL)
            except ProcessLookupError:
                pass
    for link in [l for l in links() if _owner(l) == owner]:
        _ip("link", "del", link, check=False)
    if ETC_NETNS.is_dir():
        for p in ETC_NETNS.glob(f"{tag}*"):
            if _owner(p.name) == owner:
                shutil.rmtree(p, ignore_errors=True)
    for p in Path(tempfile.gettempdir()).glob(f"{tag}-*"):
        if _owner(p.name) == owner:
            shutil.rmtree(p, ignore_errors=True)


def sweep() -> list[int]:
    """Remove what runs that no longer exist left behind (a SIGKILLed run cannot clean up)."""
    owners = {_owner(n) for n in namespaces() + links()}
    if ETC_NETNS.is_dir():
        owners |= {_owner(p.name) for p in ETC_NETNS.iterdir()}
    owners |= {_owner(p.name) for p in Path(tempfile.gettempdir()).glob(f"{PREFIX}*-*")}
    stale = sorted(o for o in owners if o is not None and o != os.getpid() and not _alive(o))
    for owner in stale:
        _remove(owner)
    return stale


class Hosts:
    """``n`` hosts host1..hostN at 192.0.2.1..N on one bridge; removed on exit, whatever happens.

    ``etc_hosts``: "cluster" lists every host in every host's /etc/hosts (a cluster set up
    right); "debian" gives each host what Debian's installer writes: its own name at 127.0.1.1
    and no other host.
    """

    def __init__(self, n: int = 2, etc_hosts: str = "cluster"):
        if not 1 <= n <= 9:
            raise ValueError("1 to 9 hosts")
        self.n, self.etc_hosts = n, etc_hosts
        self.owner = os.getpid()
        self.tag = f"{PREFIX}{self.owner}"
        self.names = [f"host{i}" for i in range(1, n + 1)]
        self.addr = {h: f"{NET}.{i}" for i, h in enumerate(self.names, 1)}
        self.procs: list[subprocess.Popen] = []
        self.dir = Path(tempfile.mkdtemp(prefix=f"{self.tag}-"))

    def ns(self, host: str) -> str:
        return f"{self.tag}{host.replace('host', 'h')}"

    # -- making and removing ------------------------------------------------------------------
    def __enter__(self) -> "Hosts":
        sweep()
        try:
            bridge = f"{self.tag}b"
            _ip("link", "add", bridge, "type", "bridge")
            _ip("link", "set", bridge, "up")
            for i, host in enumerate(self.names, 1):
                ns, veth = self.ns(host), f"{self.tag}v{i}"
                _ip("netns", "add", ns)
                _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
                _ip("link", "set", veth, "master", bridge, "up")
                _ip("-n", ns, "addr", "add", f"{self.addr[host]}/24", "dev", "eth0")
                _ip("-n", ns, "link", "set", "eth0", "up")
                _ip("-n", ns, "link", "set", "lo", "up")
                etc = ETC_NETNS / ns
                etc.mkdir(parents=True, exist_ok=True)
                (etc / "hosts").write_text(self._etc_hosts(host))
                (etc / "resolv.conf").write_text("# no name server: names come from /etc/hosts\n")
        except BaseException:
            self.close()
            raise
        return self

    def _etc_hosts(self, host: str) -> str:
        lines = ["127.0.0.1\tlocalhost"]
        if self.etc_hosts == "debian":  # the line Debian's installer writes, kept on the node
            lines.append(f"127.0.1.1\t{host}")
        if self.etc_hosts == "self":
            lines.append(f"{self.addr[host]}\t{host}")
        else:
            lines += [f"{self.addr[h]}\t{h}" for h in self.names]
        return "\n".join(lines) + "\n"

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        _remove(self.owner)
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass

    def __exit__(self, *exc) -> None:
        self.close()

    # -- running ------------------------------------------------------------------------------
    def argv(self, host: str, command: str) -> list[str]:
        """``command`` in bash on ``host``: its network, its /etc/hosts and its host name.

        Like ``ip netns exec``, but /sys stays the machine's (slurmd reads its cgroups there)."""
        etc = ETC_NETNS / self.ns(host)
        inner = (f"mount --bind {etc}/hosts /etc/hosts && "
                 f"mount --bind {etc}/resolv.conf /etc/resolv.conf && "
                 f"hostname {host} && exec bash -c {shlex.quote(command)}")
        return ["nsenter", f"--net=/run/netns/{self.ns(host)}", "unshare", "--mount", "--uts",
                "--propagation", "private", "--", "bash", "-c", inner]

    def env(self, extra: dict | None = None) -> dict:
        e = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
        e["HOSTS_TMP"] = str(self.dir)  # a scratch folder every host sees, removed at the end
        # and the temporary folder of this run's hosts: two runs at once (two blocks of the
        # suite) must not share files named after the job id (elastic.py's checkpoints)
        e["TMPDIR"] = str(self.dir)
        e.update(extra or {})
        return e

    def start(self, host: str, command: str, env: dict | None = None, **kw) -> subprocess.Popen:
        p = subprocess.Popen(self.argv(host, command), cwd=kw.pop("cwd", ROOT),
                             env=self.env(env), start_new_session=True,
                             stdin=subprocess.DEVNULL, **kw)
        self.procs.append(p)
        return p

    def kill_host(self, host: str) -> None:
        """Every process of ``host`` dies at once, as in a power cut (SIGKILL)."""
        for pid in _ns_pids(self.ns(host)):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def run(self, commands: dict[str, str], timeout: float = 60, env: dict | None = None,
            stop_on_failure: bool = False) -> dict[str, tuple[int | str, str]]:
        """Run one command per host at once; {host: (exit status, or why it was killed, output)}.

        A command still running after ``timeout`` seconds is killed ("killed after N s"); with
        ``stop_on_failure``, the others are killed as soon as one fails ("stopped: HOST failed").
        """
        procs, outs, readers = {}, {}, []
        for host, cmd in commands.items():
            p = self.start(host, cmd, env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            procs[host], outs[host] = p, []
            t = threading.Thread(target=lambda p=p, o=outs[host]: o.append(p.stdout.read()),
                                 daemon=True)
            t.start()
            readers.append(t)
        end = time.monotonic() + timeout
        why: dict[str, str] = {}
        while any(p.poll() is None for p in procs.values()):
            failed = [h for h, p in procs.items() if p.poll() not in (None, 0)]
            if time.monotonic() > end or (stop_on_failure and failed):
                for host, p in procs.items():
                    if p.poll() is None:
                        why[host] = (f"stopped: {failed[0]} failed" if stop_on_failure and failed
                                     else f"killed after {timeout:g} s")
                        self.kill_host(host)
                        try:
                            os.killpg(p.pid, signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                        p.wait()
                break
            time.sleep(0.05)
        for t in readers:
            t.join(timeout=5)
        return {h: (why.get(h, p.returncode), b"".join(outs[h]).decode("utf-8", "replace"))
                for h, p in procs.items()}

    # -- Slurm --------------------------------------------------------------------------------
    def slurm(self, timeout: float = 30) -> dict:
        """Start munged, slurmctld on host1 and slurmd on every host; the environment for
        ``sbatch``/``srun``/``scontrol`` (SLURM_CONF). Stopped by close()."""
        d = self.dir / "slurm"
        for sub in ("state", "log", "munge", *(f"spool/{h}" for h in self.names)):
            (d / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(d / "munge", 0o700)
        key = d / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        sock = d / "munge" / "munge.socket"
        # one munged serves every host (they share the file system; on a real cluster each
        # node runs its own, with the same key)
        munged = subprocess.Popen(
            ["munged", "--foreground", "--force", f"--socket={sock}", f"--key-file={key}",
             f"--pid-file={d / 'munge' / 'munged.pid'}", f"--log-file={d / 'log' / 'munged.log'}",
             f"--seed-file={d / 'munge' / 'seed'}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
        self.procs.append(munged)
        conf = d / "slurm.conf"
        nodes = ",".join(self.names)
        conf.write_text(SLURM_CONF.format(
            dir=d, sock=sock, head=self.names[0], head_addr=self.addr[self.names[0]],
            nodes=f"host[1-{self.n}]" if self.n > 1 else "host1",
            addrs=",".join(self.addr[h] for h in self.names), cpus=os.cpu_count() or 1,
            names=nodes))
        env = {"SLURM_CONF": str(conf)}
        _wait_for(lambda: sock.exists(), 10, "munged did not start", d / "log" / "munged.log")
        self.start(self.names[0], f"exec slurmctld -D -i -f {conf}", env,
                   stdout=subprocess.DEVNULL, stderr=(d / "log" / "slurmctld.err").open("wb"))
        for host in self.names:
            self.start(host, f"exec slurmd -D -f {conf} -N {host}", env,
                       stdout=subprocess.DEVNULL,
                       stderr=(d / "log" / f"slurmd-{host}.err").open("wb"))
        # ready when every node is idle
        def idle() -> bool:
            out = self.run({self.names[0]: "sinfo -h -N -o '%N %t'"}, timeout=10, env=env)
            text = out[self.names[0]][1]
            return all(re.search(rf"^{h} idle", text, re.M) for h in self.names)
        _wait_for(idle, timeout, "the Slurm nodes did not become idle", d / "log")
        return env


# ProctrackType=linuxproc and TaskPlugin=none: no cgroups needed (the hosts share one machine).
SLURM_CONF = """\
ClusterName=pgx
SlurmctldHost={head}({head_addr})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={sock}
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
SchedulerType=sched/backfill
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool/%n
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd-%n.pid
SlurmctldLogFile={dir}/log/slurmctld.log
SlurmdLogFile={dir}/log/slurmd-%n.log
MessageTimeout=5
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=2
NodeName={nodes} NodeAddr={addrs} CPUs={cpus} State=UNKNOWN
PartitionName=main Nodes={nodes} Default=YES MaxTime=5 State=UP
"""


# c10d's and torchrun's log prefixes ("[W1123 20:05:35.625637594 socket.cpp:764] ",
# "E1123 20:05:46.042000 16159 torch/.../api.py:1002] "): time, process id, source line
LOG_PREFIX = re.compile(r"^\[?[IWE]\d{4} [\d:.]+ (?:\d+ )?[\w/.]+:\d+\] ")
# a retried connection to a store that was not listening yet: harmless, and how many depends on
# who started first
RETRIED = re.compile(r"\[c10d\] The hostname of the client socket cannot be retrieved")
EPHEMERAL_PORT = re.compile(r"(?<=\]:)\d+(?:\$\d+)?|(?<=[ :,(])(?:3[2-9]\d{3}|[4-5]\d{4}|60\d{3})\b")


def shown(output: str, show: str | None) -> str:
    """A host's output as the page shows it: without the retry warnings; with ``show``, only
    the lines that match it, without log prefixes, each once, random ports as <port>."""
    lines = [l for l in output.splitlines() if not RETRIED.search(l)]
    if show:
        keep = re.compile(show)
        seen: dict[str, None] = {}
        for line in lines:
            line = EPHEMERAL_PORT.sub("<port>", LOG_PREFIX.sub("", line))
            if keep.search(line):
                seen.setdefault(line)
        lines = list(seen)
    return "".join(l + "\n" for l in lines)


def _wait_for(cond, timeout: float, what: str, log: Path) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.2)
    logs = sorted(log.glob("*")) if log.is_dir() else [log]
    tail = "".join(f"--- {p.name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-15:])
                   + "\n" for p in logs if p.is_file())
    raise RuntimeError(f"{what} within {timeout:g} s\n{tail}")


def _terminate(signum, frame):
    raise SystemExit(128 + signum)  # so that the finally blocks remove everything


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=2, help="how many hosts (default 2)")
    ap.add_argument("--etc-hosts", choices=["cluster", "debian", "self"], default="cluster",
                    help="cluster: every host's /etc/hosts names every host; debian: the same, "
                         "after the installer's line for the host's own name at 127.0.1.1; "
                         "self: only the host's own name")
    ap.add_argument("--timeout", type=float, default=100,
                    help="seconds, then kill (default 100: below the page engine's 120)")
    ap.add_argument("--slurm", action="store_true", help="start a Slurm cluster first")
    ap.add_argument("--each", metavar="CMD", help="run CMD on every host")
    ap.add_argument("--on", nargs=2, action="append", metavar=("HOST", "CMD"), default=[],
                    help="run CMD on HOST (repeat for each host)")
    ap.add_argument("--submit", metavar="CMD", help="run CMD on host1 (with --slurm: sbatch ...)")
    ap.add_argument("--stop-on-failure", action="store_true",
                    help="when a command fails, kill the others")
    ap.add_argument("--merged", action="store_true",
                    help="one section for all hosts (with --show: each line once), for "
                         "failures that show up on whichever host gets there first")
    ap.add_argument("--show", metavar="REGEX",
                    help="print only the lines that match, each once, without log prefixes")
    args = ap.parse_args(argv)
    why = unmet_slurm() if args.slurm else unmet()
    if why:
        print(f"hosts.py: {why}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGHUP, _terminate)
    with Hosts(args.hosts, args.etc_hosts) as h:
        commands = dict(args.on)
        if args.each:
            commands = {host: args.each for host in h.names}
        if args.submit:
            commands = {h.names[0]: args.submit}
        unknown = set(commands) - set(h.names)
        if not commands or unknown:
            ap.error(f"no command, or unknown hosts {sorted(unknown)}: hosts are {h.names}")
        env = h.slurm() if args.slurm else {}
        results = h.run(commands, timeout=args.timeout, env=env,
                        stop_on_failure=args.stop_on_failure)
        if args.merged:
            print("== all hosts ==")
            sys.stdout.write(shown("".join(out for _, out in results.values()), args.show))
        for host, (code, out) in results.items() if not args.merged else ():
            print(f"== {host}: {code if isinstance(code, str) else f'exit {code}'} ==")
            sys.stdout.write(shown(out, args.show))
        return 0 if all(code == 0 for code, _ in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
