"""Hosts with their own network (tests/hosts.py): each is separate, and nothing is left behind —
after a failing test, after a SIGKILLed run, and after the multi-node page's runs (namespaces,
links, /etc/netns folders, Slurm and munge daemons).

Needs root and iproute2: elsewhere these tests are skipped with the reason; on CI (CI=true),
which runs as root, they fail instead."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

import hosts
from pagerun import pages, runner

WHY = hosts.unmet()


@pytest.fixture(autouse=True)
def _need_root():
    if WHY:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI runs as root with iproute2: {WHY}")
        pytest.skip(WHY)


@pytest.fixture
def two_hosts():
    with hosts.Hosts(2) as h:
        yield h
    assert hosts.leftovers(h.owner) == []


def test_each_host_has_its_own_name_address_and_etc_hosts(two_hosts):
    out = two_hosts.run({h: "hostname; ip -4 -o addr show eth0; ip route; cat /etc/hosts"
                         for h in two_hosts.names}, timeout=20)
    for i, host in enumerate(two_hosts.names, 1):
        code, text = out[host]
        assert code == 0, text
        lines = text.splitlines()
        assert lines[0] == host
        assert f"inet 192.0.2.{i}/24" in lines[1]
        # one route, to the bridge's network: no default route, nothing can leave
        assert [l.split()[0] for l in lines[2:] if "dev" in l] == ["192.0.2.0/24"], text
        assert "192.0.2.1\thost1" in text and "192.0.2.2\thost2" in text


LISTEN = ("python3 -c \"import socket; s = socket.create_server(('192.0.2.1', 9)); "
          "s.settimeout(10); s.accept()\"")
CONNECT = ("python3 -c \"import socket, time\n"
           "for _ in range(50):\n"
           "    if socket.socket().connect_ex(('host1', 9)) == 0: break\n"
           "    time.sleep(0.1)\n"
           "else: print('host1 unreachable')\n"
           "print('198.51.100.1:', socket.socket().connect_ex(('198.51.100.1', 9)))\"")


def test_hosts_reach_each_other_and_nothing_else(two_hosts):
    out = two_hosts.run({"host1": LISTEN, "host2": CONNECT}, timeout=20)
    assert out["host1"][0] == 0, out  # it accepted host2's connection
    # errno 101, ENETUNREACH: no route leaves the bridge (198.51.100.1 is TEST-NET-2)
    assert out["host2"] == (0, "198.51.100.1: 101\n"), out


def test_everything_is_removed_when_a_test_fails():
    with pytest.raises(RuntimeError):
        with hosts.Hosts(2) as h:
            h.start("host2", "sleep 60")
            assert hosts.leftovers(h.owner)
            raise RuntimeError("a failing test")
    assert hosts.leftovers(h.owner) == []


def test_a_sigkilled_run_is_swept_by_the_next():
    proc = subprocess.Popen([sys.executable, hosts.__file__, "--each", "sleep 60"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        end = time.monotonic() + 20
        while time.monotonic() < end and len(hosts.leftovers(proc.pid)) < 5:
            time.sleep(0.1)
        assert hosts.leftovers(proc.pid), "the run made no hosts"
        time.sleep(0.5)  # the sleeps have started on both hosts
    finally:
        proc.kill()  # SIGKILL: no cleanup of its own
        proc.wait()
    assert hosts.leftovers(proc.pid)  # it could not clean up ...
    assert proc.pid in hosts.sweep()  # ... the next run does, by name and process id
    assert hosts.leftovers(proc.pid) == []


def test_nothing_left_after_the_multinode_page():
    """The page's runs on hosts (the collector has run them: no extra job) left nothing."""
    blocks = [b for lang in pages.LANGS
              for b in pages.blocks(pages.DOCS / lang / "ddp" / "multinode.md")
              if "tests/hosts.py" in b.code]
    assert blocks
    for b in blocks:
        if runner.unmet(b.marks) is None:
            runner.run_cached(b)
    assert hosts.leftovers() == []
    assert hosts.sweep() == []
