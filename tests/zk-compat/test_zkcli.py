"""zkCli.sh, ZooKeeper's own shell (Debian's zookeeper package), scripted
against arbord's ZooKeeper port, its output checked line by line. Run by
scripts/zk-compat.sh (which installs the package if it is missing)."""

import os
import re
import subprocess
import uuid

import arbor_cluster

ZKCLI = os.environ.get("ZKCLI", "/usr/share/zookeeper/bin/zkCli.sh")

# zkCli.sh starts a JVM, connects, runs the script and exits.
ZKCLI_TIMEOUT_S = 120


def zkcli(server, script):
    done = subprocess.run(
        [ZKCLI, "-server", server.address],
        input="\n".join(script + ["quit"]) + "\n",
        capture_output=True,
        text=True,
        timeout=ZKCLI_TIMEOUT_S,
    )
    # zkCli logs through log4j to the same streams; keep what it prints.
    return [
        line
        for line in (done.stdout + done.stderr).splitlines()
        if not re.match(r"^\d{4}-\d{2}-\d{2}[ T]", line)
    ]


def test_zkcli_commands_and_their_output():
    cluster = arbor_cluster.get_arbor_cluster()
    cluster.start()
    server = cluster[0]
    root = "/zkcli-" + uuid.uuid4().hex[:8]
    out = zkcli(
        server,
        [
            "create %s top" % root,
            "addWatch -m PERSISTENT_RECURSIVE %s" % root,
            "create -e -s %s/e- eph" % root,
            "create %s/p data" % root,
            "ls -R %s" % root,
            "get -s %s/p" % root,
            "set -v 0 %s/p changed" % root,
            "set -v 0 %s/p stale" % root,
            "get %s/p" % root,
            "stat %s/p" % root,
            "setAcl %s/p world:anyone:cdrwa,digest:alice:D/InIHSb7yEEbrWz8b9l71RjZJU=:r" % root,
            "getAcl %s/p" % root,
            "delete %s/missing" % root,
            "delete %s" % root,
            "deleteall %s" % root,
            "ls %s" % root,
        ],
    )
    text = "\n".join(out)
    assert "Created %s" % root in out, text
    # Sequential names are ten digits.
    sequential = [line for line in out if line.startswith("Created %s/e-" % root)]
    assert len(sequential) == 1 and re.fullmatch(
        r"Created %s/e-\d{10}" % re.escape(root), sequential[0]
    ), text
    name = sequential[0][len("Created "):]
    # ls -R lists the subtree, parent first.
    at = out.index(root)
    assert sorted(out[at + 1 : at + 3]) == sorted([name, root + "/p"]), text
    # get -s: the data, then the stat, as ZooKeeper prints it.
    assert "data" in out, text
    for field in ("cZxid = 0x", "dataVersion = 0", "ephemeralOwner = 0x0", "dataLength = 4"):
        assert any(line.startswith(field) for line in out), field + "\n" + text
    # set -v: the right version changes it, a stale one is refused.
    assert "version No is not valid : %s/p" % root in out, text
    assert "changed" in out, text
    assert any(line == "dataVersion = 1" for line in out), text
    # getAcl after setAcl: both entries, the digest shown to its ADMIN.
    assert "'world,'anyone" in out and ": cdrwa" in out, text
    assert "'digest,'alice:D/InIHSb7yEEbrWz8b9l71RjZJU=" in out and ": r" in out, text
    assert "Node does not exist: %s/missing" % root in out, text
    assert "Node not empty: %s" % root in out, text
    # The recursive watch saw the creates below the root.
    for created in (name, root + "/p"):
        assert (
            "WatchedEvent state:SyncConnected type:NodeCreated path:%s" % created in out
        ), text
    # deleteall removed the subtree.
    assert "Node does not exist: %s" % root in out[-3:], text
