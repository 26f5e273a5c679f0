#!/usr/bin/env python3
"""A second load generator for the ensemble's failover row, from another
ZooKeeper client: kazoo (`pip install kazoo`).

arbor-bench measures ZooKeeper through the `zookeeper-client` crate, whose
reconnect behaviour is part of what it measures. This script measures the
same thing with kazoo against the three-server ZooKeeper ensemble that
`PART=ensemble bench/compare.sh` leaves under target/bench-compare
(its member scripts): three writers, each a client with every server in its
connect string, set their own node in a loop; each round kills the leader
(the member whose `srvr` says `Mode: leader`) with the harness's
kill-member.sh and times the first set acknowledged after the kill returns.

    python3 bench/kazoo_failover.py [KILLS]     # default 6
"""
import os
import socket
import subprocess
import sys
import threading
import time

from kazoo.client import KazooClient
from kazoo.retry import KazooRetry

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE = os.path.join(ROOT, "target", "bench-compare", "ens-zookeeper")
SERVERS = ["127.0.0.1:%d" % int(os.environ.get("ENS_ZK_PORT", 2681) + i) for i in range(3)]
WRITERS = 3
# Every writer must have had a set acknowledged this recently before a kill.
STEADY_S = 0.2
SETTLE_S = 2.0


def mode(addr):
    """The `Mode:` line of `srvr` at addr, or None if it does not answer."""
    host, port = addr.split(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1) as s:
            s.sendall(b"srvr")
            out = b""
            while len(out) < 16384:
                chunk = s.recv(4096)
                if not chunk:
                    break
                out += chunk
    except OSError:
        return None
    for line in out.decode(errors="replace").splitlines():
        if line.startswith("Mode: "):
            return line[len("Mode: "):]
    return None


def wait_whole():
    """Waits until every member answers and one leads; returns its index."""
    while True:
        modes = [mode(a) for a in SERVERS]
        if all(modes) and modes.count("leader") == 1:
            return modes.index("leader")
        time.sleep(0.05)


def member(script, index):
    subprocess.run([os.path.join(BASE, script), str(index + 1)], check=True)


def main():
    kills = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    acked = [0.0] * WRITERS
    stop = threading.Event()

    def writer(i):
        zk = KazooClient(
            hosts=",".join(SERVERS),
            timeout=10.0,
            connection_retry=KazooRetry(max_tries=-1, delay=0.01, max_delay=0.1),
        )
        zk.start()
        path = "/kazoo-failover-%d" % i
        zk.ensure_path(path)
        while not stop.is_set():
            try:
                zk.set(path, b"x")
                acked[i] = time.monotonic()
            except Exception:  # connection loss, session moved: try again
                time.sleep(0.005)
        zk.stop()

    for i in range(len(SERVERS)):
        member("start-member.sh", i)
    wait_whole()
    for i in range(WRITERS):
        threading.Thread(target=writer, args=(i,), daemon=True).start()
    samples = []
    try:
        for k in range(kills):
            leader = wait_whole()
            while min(acked) < time.monotonic() - STEADY_S:
                time.sleep(0.01)
            member("kill-member.sh", leader)
            killed = time.monotonic()
            while max(acked) <= killed:
                time.sleep(0.001)
            samples.append(min(a for a in acked if a > killed) - killed)
            print("kill %d: member %d, first set acknowledged after %.0f ms"
                  % (k + 1, leader + 1, samples[-1] * 1000), flush=True)
            member("start-member.sh", leader)
            wait_whole()
            time.sleep(SETTLE_S)
    finally:
        stop.set()
        for i in range(len(SERVERS)):
            member("kill-member.sh", i)
    samples.sort()
    print("kazoo: kill -9 of the ZooKeeper leader to the first acknowledged set: "
          "p50 %.0f ms over %d kills (%s)"
          % (samples[len(samples) // 2] * 1000, len(samples),
             ", ".join("%.0f" % (s * 1000) for s in samples)))


if __name__ == "__main__":
    main()
