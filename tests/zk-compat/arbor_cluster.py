"""A pytest plugin that runs kazoo's own test suite against arbord.

kazoo's tests get their ZooKeeper servers from
``kazoo.testing.harness.get_global_cluster()``; it has no switch for an
external server, so this plugin replaces that function with one returning
``ArborCluster``: the same interface (servers with ``address``,
``client_port``, ``running``, ``run``, ``stop``, ``reset``), backed by arbord
processes serving ZooKeeper's protocol on ``--zk-listen``.

Settings (environment):

* ``ARBORD``: the arbord binary (default: target/release/arbord of this
  repository).
* ``ARBOR_ZK_CLUSTER_SIZE``: 1 (default) runs one standalone server.
"""

import os
import pathlib
import shutil
import subprocess
import tempfile
import time

import kazoo.testing.harness as harness

REPO = pathlib.Path(__file__).resolve().parents[2]

# kazoo's harness gives its servers the superuser digest of "super:test".
SUPER_DIGEST = "super:D/InIHSb7yEEbrWz8b9l71RjZJU="

# Where the servers listen: ZooKeeper clients on PORT_BASE + 10 * i, Arbor's
# own protocol one above.
PORT_BASE = int(os.environ.get("ARBOR_ZK_PORT_BASE", "21810"))

# How long a server may take to start (recovering its data directory).
START_TIMEOUT_S = 30


def arbord_path():
    return os.environ.get("ARBORD", str(REPO / "target" / "release" / "arbord"))


class ArborServer:
    """One arbord process, in the shape of kazoo's ManagedZooKeeper."""

    host = "127.0.0.1"

    def __init__(self, index, work_dir):
        self.index = index
        self.client_port = PORT_BASE + 10 * index
        self.native_port = self.client_port + 1
        self.secure_client_port = self.client_port + 4
        self.working_path = os.path.join(work_dir, "server-%d" % index)
        self.process = None

    @property
    def address(self):
        return "%s:%s" % (self.host, self.client_port)

    @property
    def secure_address(self):
        return "%s:%s" % (self.host, self.secure_client_port)

    @property
    def running(self):
        return self.process is not None and self.process.poll() is None

    def run(self):
        if self.running:
            return
        os.makedirs(self.working_path, exist_ok=True)
        log = open(os.path.join(self.working_path, "arbord.log"), "ab")
        self.process = subprocess.Popen(
            [
                arbord_path(),
                "--exit-on-stdin-close",
                "--data-dir",
                os.path.join(self.working_path, "data"),
                "--listen",
                "%s:%d" % (self.host, self.native_port),
                "--zk-listen",
                self.address,
                "--super-digest",
                SUPER_DIGEST,
                # kazoo's servers allow any number of connections per client.
                "--max-connections-per-ip",
                "4096",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            line = self.process.stdout.readline().decode()
            if not line:
                raise RuntimeError(
                    "arbord exited at start; see %s/arbord.log" % self.working_path
                )
            if line.startswith("arbord listening for ZooKeeper clients on"):
                return
        raise RuntimeError("arbord did not start in %d s" % START_TIMEOUT_S)

    def stop(self):
        """Stops the server, keeping its data (as ZooKeeper's stop does)."""
        if not self.running:
            return
        self.process.terminate()
        self.process.wait()
        self.process = None

    def reset(self):
        self.stop()
        shutil.rmtree(os.path.join(self.working_path, "data"), True)

    def destroy(self):
        self.stop()
        shutil.rmtree(self.working_path, True)

    def get_logs(self, num_lines=100):
        path = pathlib.Path(self.working_path, "arbord.log")
        if not path.exists():
            return []
        return path.read_text(errors="replace").splitlines()[-num_lines:]


class ArborCluster:
    """kazoo's ZookeeperCluster interface over arbord servers."""

    def __init__(self, size):
        self._work_dir = tempfile.mkdtemp(prefix="arbor-zk-compat-")
        self._servers = [ArborServer(i, self._work_dir) for i in range(size)]

    def __getitem__(self, k):
        return self._servers[k]

    def __iter__(self):
        return iter(self._servers)

    def start(self):
        for server in self._servers:
            server.run()

    def stop(self):
        for server in self._servers:
            server.stop()

    def terminate(self):
        for server in self._servers:
            server.destroy()

    def reset(self):
        for server in self._servers:
            server.reset()

    def get_logs(self):
        logs = []
        for server in self._servers:
            logs += server.get_logs()
        return logs


_CLUSTER = None


def get_arbor_cluster():
    global _CLUSTER
    if _CLUSTER is None:
        _CLUSTER = ArborCluster(int(os.environ.get("ARBOR_ZK_CLUSTER_SIZE", "1")))
    return _CLUSTER


def pytest_configure(config):
    harness.get_global_cluster = get_arbor_cluster


def pytest_unconfigure(config):
    if _CLUSTER is not None:
        _CLUSTER.terminate()
