"""kazoo and Arbor's own client on one lock: a kazoo ``Lock`` and
``arbor lock`` (the client's ``recipes::Mutex``) on the same path queue
together, whichever takes it first. Run by scripts/zk-compat.sh beside
kazoo's own suite, against the same arbord.

kazoo's Lock names its nodes ``<id>__lock__<seq>`` and Arbor's Mutex
``_c_<id>-lock-<seq>`` (Curator's form); kazoo learns the other form from
``extra_lock_patterns``, and Arbor's Mutex orders every child by its
sequence number, whatever its name.
"""

import os
import pathlib
import subprocess
import time
import uuid

from kazoo.client import KazooClient
from kazoo.recipe.lock import Lock

import arbor_cluster

ARBOR = os.environ.get(
    "ARBOR_CLI", str(arbor_cluster.REPO / "target" / "release" / "arbor")
)

# How long a contender is watched to see that it does not get the lock.
WAITS_S = 1.0


def arbor_lock(server, path, *command):
    return subprocess.Popen(
        [
            ARBOR,
            "--server",
            "%s:%d" % (server.host, server.native_port),
            "lock",
            path,
            "--",
            *command,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def test_kazoo_lock_and_arbor_mutex_queue_together(tmp_path):
    cluster = arbor_cluster.get_arbor_cluster()
    cluster.start()
    server = cluster[0]
    client = KazooClient(server.address)
    client.start()
    path = "/interop-" + uuid.uuid4().hex
    try:
        kazoo_lock = Lock(client, path, extra_lock_patterns=["-lock-"])
        assert kazoo_lock.acquire(timeout=10)
        # Arbor waits behind kazoo's holder...
        marker = tmp_path / "ran"
        waiting = arbor_lock(server, path, "touch", str(marker))
        time.sleep(WAITS_S)
        assert waiting.poll() is None, waiting.stderr.read()
        assert not marker.exists()
        assert len(client.get_children(path)) == 2
        # ...and runs once it lets go.
        kazoo_lock.release()
        assert waiting.wait(timeout=10) == 0, waiting.stderr.read()
        assert marker.exists()

        # The other way round: kazoo waits behind Arbor's holder.
        holding = arbor_lock(server, path, "sleep", "3")
        deadline = time.monotonic() + 10
        while not client.get_children(path) and time.monotonic() < deadline:
            time.sleep(0.05)
        second = Lock(client, path, extra_lock_patterns=["-lock-"])
        started = time.monotonic()
        assert second.acquire(timeout=10)
        assert time.monotonic() - started >= 1.5, "kazoo took a lock Arbor held"
        assert holding.wait(timeout=10) == 0
        second.release()
    finally:
        client.stop()
        client.close()
