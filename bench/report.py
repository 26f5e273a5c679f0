#!/usr/bin/env python3
"""BENCHMARKS.md from the JSON lines bench/compare.sh collected.

Five parts, each in its own file, rendered when the file has results:
$RESULTS (standalone servers), $ENSEMBLE (three-member ensembles), $SCALE
(standalone servers as the work grows), $ZKPORT (ZooKeeper's protocol:
arbord's ZooKeeper port beside its native one and Apache ZooKeeper) and
$RECIPES (semaphore and queue: Arbor's recipes against Curator's and kazoo's
protocols on ZooKeeper). A file's first line says the machine it was
measured on ({"machine", "commit", "started", "quick"}); each other line is
{"round", "label", "quick", "commit", "result"} where result is one
arbor-bench line. The tables hold, per workload and target, the median over
rounds, and the ratio Arbor/ZooKeeper of those medians, against the targets
(standalone and scale: issue 12's; ensemble: issue 11's; zkport: issue 14's).
"""

import datetime
import json
import os
import platform
import statistics
import sys
from collections import defaultdict

env = os.environ.get
OUT = os.environ["OUT"]
PART = env("PART", "all")
# A row that lost more of the CPU than this to the hypervisor measured the
# neighbours as much as the server (compare.sh's threshold for measuring again).
STEAL_MAX = float(env("STEAL_MAX_PERCENT", "5"))


def stolen_from(result):
    # Results from before rows recorded steal say nothing of it.
    return result.get("steal_percent") or 0.0


def in_median(runs):
    """The results of one row that its median is taken over: those that lost
    at most STEAL_MAX to the hypervisor, or all of them if none did."""
    clean = [r for _, r in runs if stolen_from(r) <= STEAL_MAX]
    return clean or [r for _, r in runs]


class Part:
    """The runs of one part: (label, target) -> [(round, result)]."""

    def __init__(self, name, path):
        self.name = name
        self.runs = defaultdict(list)
        self.not_run = {}
        self.quick = False
        self.commits = []
        self.rounds = 0
        # Rows measured again because the hypervisor stole too much CPU.
        self.remeasured = 0
        # Rows run paired: each against both servers, one straight after the other.
        self.paired = 0
        # Files written before the machine line: the machine reporting now.
        self.machine = None
        self.started = None
        with open(path) as lines:
            for line in lines:
                entry = json.loads(line)
                if "machine" in entry:
                    self.machine = entry["machine"]
                    self.started = datetime.datetime.strptime(
                        entry["started"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
                    continue
                result = entry["result"]
                target = result.get("target", "disk")
                if "not_run" in result:
                    # A run this machine could not make (compare.sh says why).
                    self.not_run[(entry["label"], target)] = result["not_run"]
                self.runs[(entry["label"], target)].append((entry["round"], result))
                self.remeasured += entry.get("attempts", 1) > 1
                self.paired += bool(entry.get("paired"))
                # Lines written before "quick" existed: as this run says.
                self.quick |= bool(entry.get("quick", env("QUICK") == "1"))
                commit = entry.get("commit")
                if commit and commit not in self.commits:
                    self.commits.append(commit)
                self.rounds = max(self.rounds, entry["round"])
        # The file's time is its checkout's in a fresh clone: the machine
        # line's start time, where there is one.
        self.measured = self.started or datetime.datetime.fromtimestamp(
            os.path.getmtime(path), datetime.timezone.utc)
        # Measured by this run of compare.sh, or kept from an earlier one.
        self.now = PART in ("all", name)

    def values(self, label, target, field):
        kept = in_median(self.runs.get((label, target), []))
        return [r[field] for r in kept if r.get(field) is not None]

    def left_out(self):
        """Results left out of their row's median for the CPU they lost."""
        return sum(len(runs) - len(in_median(runs)) for runs in self.runs.values())

    def median(self, label, target, field):
        found = self.values(label, target, field)
        return statistics.median(found) if found else None

    def fsync_rounds(self):
        return sorted(self.values("fsync", "disk", "p50_us") + self.values("fsync-after", "disk", "p50_us"))


def load(name, path):
    if not path or not os.path.exists(path) or os.path.getsize(path) == 0:
        return None
    return Part(name, path)


standalone = load("standalone", env("RESULTS"))
ensemble = load("ensemble", env("ENSEMBLE"))
scale = load("scale", env("SCALE"))
zkport = load("zkport", env("ZKPORT"))
recipes = load("recipes", env("RECIPES"))
parts = [p for p in (standalone, ensemble, scale, zkport, recipes) if p is not None]
if not parts:
    sys.exit("report.py: no results in $RESULTS, $ENSEMBLE, $SCALE, $ZKPORT or $RECIPES")


def fmt(value, unit=""):
    if value is None:
        return "–"
    if unit == "ops/s":
        return f"{value / 1000:.1f} k/s"
    if unit == "us":
        return f"{value / 1000:.2f} ms" if value >= 10_000 else f"{value:.0f} µs"
    if unit == "ms":
        return f"{value / 1000:.2f} s" if value >= 10_000 else f"{value:.0f} ms"
    if unit == "cpu":
        return f"{value:.1f} µs"
    if unit == "%":
        return f"{value:.0f} %"
    if unit == "B":
        return f"{value / 1024:.1f} KiB" if abs(value) >= 10_240 else f"{value:.0f} B"
    return f"{value:.3g}"


def ratio(a, b):
    if a is None or b in (None, 0):
        return None
    return a / b


# (row, label, field, unit, goal, bound): goal "min" means ratio >= bound,
# "max" means ratio <= bound, "abs-max" means Arbor's own figure <= bound (in
# the row's unit; the ratio is still shown).
# The standalone targets are issue 12's, set against ZooKeeper at INFO.
TARGETS = [
    ("create, 64 in flight, 8 conns: throughput", "create-64", "ops_per_s", "ops/s", "min", 2.5),
    ("create, 64 in flight, 8 conns: p999", "create-64", "p999_us", "us", "max", 0.5),
    ("set, 64 in flight, 8 conns: throughput", "set-64", "ops_per_s", "ops/s", "min", 2.5),
    ("set, 64 in flight, 8 conns: p999", "set-64", "p999_us", "us", "max", 0.5),
    ("get, 64 in flight, 8 conns: throughput", "get-64", "ops_per_s", "ops/s", "min", 3.0),
    ("get, 1 in flight: p50", "get-1", "p50_us", "us", "max", 1 / 3),
    ("mixed 90/10, 64 in flight: throughput", "mixed-64", "ops_per_s", "ops/s", "min", 2.5),
    ("delete, 64 in flight: throughput", "delete-64", "ops_per_s", "ops/s", "min", 2.5),
    ("server CPU per op, get 64 in flight", "get-64", "server_cpu_us_per_op", "cpu", "max", 1 / 3),
    ("server CPU per op, set 64 in flight", "set-64", "server_cpu_us_per_op", "cpu", "max", 1 / 3),
    ("lock acquire+release, uncontended: p50", "lock", "cycle_p50_us", "us", "max", 0.5),
    ("handoff, 100 waiters: p50", "handoff-100", "handoff_p50_us", "us", "max", 0.5),
    ("handoff, 1000 waiters: p50", "handoff-1000", "handoff_p50_us", "us", "max", 0.5),
    ("memory per znode (32 B), RSS", "memory", "bytes_per_znode", "B", "abs-max", 200),
    ("memory per idle connection, RSS", "idle-memory", "bytes_per_connection", "B", "abs-max", 16 * 1024),
    ("memory per watch, RSS, above path bytes (one watch per path)", "watch-memory", "bytes_per_watch_over_path",
     "B", "abs-max", 64),
    ("recovery (restart after kill -9)", "recovery", "recovery_ms", "ms", "max", 0.5),
]

# (name, field, unit) of what arbor-bench --admin reports of Arbor's log.
LOG_FIGURES = [
    ("writes per sync", "writes_per_log_sync", ""),
    ("sync mean", "log_sync_mean_us", "us"),
    ("share of the run spent syncing", "log_syncing_percent", "%"),
]

# (name, field, unit) of where a write's round trip went, from the same
# runs: the server's own time per write (its admin port's request latency,
# from reading the request to making the answer) and the rest of the
# client's mean round trip, the way back: the answer's way out, the client's
# next request, and its way in.
WRITE_PATH = [
    ("the server's time per write, read to answer", "server_write_mean_us", "us"),
    ("the way back per write (mean round trip less the server's time)", "way_back_mean_us", "us"),
]

INFO = [
    ("set, 64 in flight, 1 conn: throughput", "set-64-1conn", "ops_per_s", "ops/s"),
    ("set, 64 in flight, 1 conn: p99", "set-64-1conn", "p99_us", "us"),
    ("server CPU per op, create 64 in flight", "create-64", "server_cpu_us_per_op", "cpu"),
    ("server CPU per op, mixed 64 in flight", "mixed-64", "server_cpu_us_per_op", "cpu"),
    ("server CPU per op, delete 64 in flight", "delete-64", "server_cpu_us_per_op", "cpu"),
    ("server CPU per op, get 1 in flight", "get-1", "server_cpu_us_per_op", "cpu"),
    ("server CPU per op, create 1 in flight", "create-1", "server_cpu_us_per_op", "cpu"),
    ("arbor-bench CPU per op, get 64 in flight", "get-64", "bench_cpu_us_per_op", "cpu"),
    ("arbor-bench CPU per op, set 64 in flight", "set-64", "bench_cpu_us_per_op", "cpu"),
] + [
    # Arbor's write-ahead log over the same runs (its admin port's metrics):
    # the write rows follow its syncs, which ZooKeeper's figures do not show.
    (f"Arbor's log, {workload} 64 in flight: {name}", f"{workload}-64", field, unit)
    for workload in ("set", "delete") for name, field, unit in LOG_FIGURES
] + [
    ("Arbor's log, create 64 in flight: writes per sync", "create-64", "writes_per_log_sync", ""),
] + [
    (f"{workload}, 64 in flight: mean round trip", f"{workload}-64", "mean_us", "us")
    for workload in ("set", "delete")
] + [
    (f"Arbor, {workload} 64 in flight: {name}", f"{workload}-64", field, unit)
    for workload in ("set", "delete") for name, field, unit in WRITE_PATH
] + [
    ("get, 1 in flight: p99", "get-1", "p99_us", "us"),
    ("create, 1 in flight: p50", "create-1", "p50_us", "us"),
    ("lock: acquire p50", "lock", "acquire_p50_us", "us"),
    ("lock: release p50", "lock", "release_p50_us", "us"),
    ("lock: cycle p99", "lock", "cycle_p99_us", "us"),
    ("handoff, 10 waiters: p50", "handoff-10", "handoff_p50_us", "us"),
    ("handoff, 100 waiters: p99", "handoff-100", "handoff_p99_us", "us"),
    ("handoff, 1000 waiters: p99", "handoff-1000", "handoff_p99_us", "us"),
    ("herd lock, 100 waiters: handoff p50", "handoff-100-herd", "handoff_p50_us", "us"),
    ("herd lock, 100 waiters: notifications per release", "handoff-100-herd", "notifications_per_release", ""),
    ("expiry of a 4 s session: observed p50", "expiry", "observed_p50_ms", "ms"),
    ("expiry of a 4 s session: observed max", "expiry", "observed_max_ms", "ms"),
    ("memory per watch, RSS: first watch of a path, path included", "watch-memory", "bytes_per_first_watch", "B"),
    ("memory per watch, RSS: another session watching a watched path", "watch-memory", "bytes_per_added_watch", "B"),
    ("memory per watch, RSS: all watches", "watch-memory", "bytes_per_watch", "B"),
    ("watched path length", "watch-memory", "path_bytes", "B"),
]

ENS_TARGETS = [
    ("create, 64 in flight, 9 conns: throughput", "ens-create-64", "ops_per_s", "ops/s", "min", 2.0),
    ("set, 64 in flight, 9 conns: throughput", "ens-set-64", "ops_per_s", "ops/s", "min", 2.0),
    ("get, 64 in flight, 9 conns: throughput", "ens-get-64", "ops_per_s", "ops/s", "min", 3.0),
    ("leader kill → first acknowledged write: p50", "ens-failover", "first_write_p50_ms", "ms", "max", 0.5),
]

ENS_INFO = [
    ("CPU per op, all three members: create 64 in flight", "ens-create-64", "server_cpu_us_per_op", "cpu"),
    ("CPU per op, all three members: set 64 in flight", "ens-set-64", "server_cpu_us_per_op", "cpu"),
    ("CPU per op, all three members: get 64 in flight", "ens-get-64", "server_cpu_us_per_op", "cpu"),
    ("create, 64 in flight: p99", "ens-create-64", "p99_us", "us"),
    ("set, 64 in flight: p99", "ens-set-64", "p99_us", "us"),
    ("get, 64 in flight: p99", "ens-get-64", "p99_us", "us"),
    ("leader kill → first acknowledged write: p99", "ens-failover", "first_write_p99_ms", "ms"),
    ("leader kill → every writer acknowledged again: p50", "ens-failover", "all_writers_p50_ms", "ms"),
    ("leader kill → every writer acknowledged again: p99", "ens-failover", "all_writers_p99_ms", "ms"),
]

# Fields of a result shown as flags in "How it was run".
FLAGS = ("concurrency", "conns", "count", "size", "waiters", "herd", "session_timeout_ms", "rounds", "kills", "writers",
         "nodes", "path_bytes", "watchers", "children", "parents", "permits", "clients", "hold_us",
         "producers", "consumers", "max_backlog", "items")


def targets_table(part, rows):
    w("| workload | Arbor | ZooKeeper | Arbor/ZooKeeper | target | met |")
    w("| --- | ---: | ---: | ---: | --- | :---: |")
    for row, label, field, unit, goal, bound in rows:
        a = part.median(label, "arbor", field)
        z = part.median(label, "zookeeper", field)
        r = ratio(a, z)
        if goal == "abs-max":
            # An absolute bound on Arbor's figure, whatever ZooKeeper's.
            met = "?" if a is None else ("✅" if a <= bound else "❌")
            w(f"| {row} | {fmt(a, unit)} | {fmt(z, unit)} | {fmt(r)} | Arbor ≤ {fmt(bound, unit)} | {met} |")
            continue
        if r is None:
            met = "?"
        elif goal == "min":
            met = "✅" if r >= bound else "❌"
        else:
            met = "✅" if r <= bound else "❌"
        sign = "≥" if goal == "min" else "≤"
        bound_text = {1 / 3: "⅓", 0.5: "½"}.get(bound, f"{bound:g}×")
        w(f"| {row} | {fmt(a, unit)} | {fmt(z, unit)} | {fmt(r)} | {sign} {bound_text} | {met} |")


def info_table(part, rows):
    w("| workload | Arbor | ZooKeeper | Arbor/ZooKeeper |")
    w("| --- | ---: | ---: | ---: |")
    for row, label, field, unit in rows:
        a = part.median(label, "arbor", field)
        z = part.median(label, "zookeeper", field)
        w(f"| {row} | {fmt(a, unit)} | {fmt(z, unit)} | {fmt(ratio(a, z))} |")


def every_run_table(part, rows):
    w("| workload | field | Arbor, per round | ZooKeeper, per round |")
    w("| --- | --- | --- | --- |")
    for label, field, unit in rows:
        a = ", ".join(fmt(v, unit) for v in part.values(label, "arbor", field))
        z = ", ".join(fmt(v, unit) for v in part.values(label, "zookeeper", field))
        w(f"| {label} | {field} | {a} | {z} |")
    w(f"| raw fsync (4 KiB + fdatasync) | p50 before/after each round | "
      f"{', '.join(fmt(v, 'us') for v in part.fsync_rounds())} | |")


def commands(part, server):
    """One arbor-bench command line per workload, from Arbor's first run."""
    seen = set()
    for (label, target), found in part.runs.items():
        if target not in ("arbor", "disk") or label in seen or not found:
            continue
        result = found[0][1]
        if "workload" not in result:  # not run: no command to show
            continue
        seen.add(label)
        params = {k: v for k, v in result.items() if k in FLAGS}
        which = "" if target == "disk" else f"--target arbor|zookeeper {server}"
        line = (f"arbor-bench {which}{result['workload']} " +
                " ".join(f"--{k.replace('_', '-')} {v}" for k, v in params.items()
                         if v not in (None, False)).replace(" True", ""))
        if result["workload"] == "failover":
            line += (" --kill-cmd 'ens-TARGET/kill-member.sh {member}'"
                     " --start-cmd 'ens-TARGET/start-member.sh {member}'")
        w(line)


def sizes(part, prefix):
    """The sizes N of a scale part's labels PREFIX-N, in order."""
    found = set()
    for label, _target in part.runs:
        if label.startswith(prefix + "-") and label[len(prefix) + 1:].isdigit():
            found.add(int(label[len(prefix) + 1:]))
    return sorted(found)


def count_text(n):
    for div, suffix in ((1_000_000, " M"), (1_000, " k")):
        if n >= div and n % div == 0:
            return f"{n // div}{suffix}"
    return str(n)


# (title, label prefix, field, unit) of each scale table; rows by size.
SCALE_TABLES = [
    ("znodes", "creates, 64 in flight, 8 conns: throughput", "create", "ops_per_s", "ops/s"),
    ("znodes", "server CPU per create", "create", "server_cpu_us_per_op", "cpu"),
    ("znodes", "get, 1 in flight: p50", "get", "p50_us", "us"),
    ("znodes", "memory per znode (32 B), RSS", "znodes", "bytes_per_znode", "B"),
    ("znodes", "memory per znode (32 B), RSS, second half of the fill only", "znodes", "marginal_bytes_per_znode", "B"),
    ("znodes", "filling them (multis of {batch} creates, {concurrency} in flight): znodes per second", "znodes",
     "ops_per_s", "ops/s"),
    ("znodes", "restart after kill -9", "recovery", "recovery_ms", "ms"),
    ("children", "get-children, 1 in flight: p50", "children", "p50_us", "us"),
    ("children", "get-children, 1 in flight: p99", "children", "p99_us", "us"),
    ("idle sessions", "memory per idle session, RSS", "sessions", "bytes_per_connection", "B"),
    ("idle sessions", "server CPU while they idle (heartbeats), ms per second", "sessions", "idle_server_cpu_ms_per_s", ""),
    ("watches", "memory per watch, RSS, all watches", "watches", "bytes_per_watch", "B"),
    ("watches", "memory per watch, RSS, first watch of a path above its path bytes", "watches",
     "bytes_per_watch_over_path", "B"),
]


def first_record(part, prefix):
    """The first result of the rows labelled PREFIX-<size>, or an empty one."""
    return next((r for (label, _), runs in part.runs.items() if label.startswith(f"{prefix}-")
                 for _, r in runs), {})


def runs_per_round(part, label, target="arbor"):
    """How many times LABEL ran against TARGET in a round (the most of any round)."""
    rounds = [rnd for rnd, _ in part.runs.get((label, target), [])]
    return max((rounds.count(rnd) for rnd in set(rounds)), default=0)


def scale_table(part, size_name, title, prefix, field, unit):
    # A title may name the run's settings ({batch}), as the rows' records have them.
    title = title.format_map(defaultdict(lambda: "?", first_record(part, prefix)))
    w(f"**{title}**")
    w("")
    w(f"| {size_name} | Arbor | ZooKeeper | Arbor/ZooKeeper |")
    w("| ---: | ---: | ---: | ---: |")
    why_not = []
    for n in sizes(part, prefix):
        label = f"{prefix}-{n}"
        a = part.median(label, "arbor", field)
        z = part.median(label, "zookeeper", field)
        texts = []
        for target, value in (("arbor", a), ("zookeeper", z)):
            why = part.not_run.get((label, target))
            if value is None and why is not None:
                if why not in why_not:
                    why_not.append(why)
                texts.append(f"not run ({why_not.index(why) + 1})")
            else:
                texts.append(fmt(value, unit) if value is not None else "not run")
        w(f"| {count_text(n)} | {texts[0]} | {texts[1]} | {fmt(ratio(a, z))} |")
    w("")
    for i, why in enumerate(why_not, 1):
        w(f"({i}) Not run on this machine: {why}.")
        w("")


def spread(part, prefix, field, smallest=0):
    """Arbor's lowest and highest median of FIELD over the sizes from SMALLEST, with them."""
    found = [(part.median(f"{prefix}-{n}", "arbor", field), n) for n in sizes(part, prefix) if n >= smallest]
    found = [(v, n) for v, n in found if v is not None]
    if len(found) < 2:
        return None
    return min(found), max(found)


def scale_targets(part):
    w("| target | figure | met |")
    w("| --- | --- | :---: |")
    for what, prefix, field, unit, better, smallest in (
        ("create throughput within 20 % from the smallest to the largest tree", "create", "ops_per_s", "ops/s", "high",
         0),
        ("memory per znode flat (within 20 %) from the smallest to the largest tree", "znodes", "bytes_per_znode", "B",
         "low", 0),
        # Not the target: the same question where RSS can answer it.
        ("(beside the target) memory per znode over the second half of each fill, flat within 20 % from 100 k up",
         "znodes", "marginal_bytes_per_znode", "B", "low", 100_000),
    ):
        found = spread(part, prefix, field, smallest)
        if found is None:
            w(f"| {what} | – | ? |")
            continue
        (low, low_n), (high, high_n) = found
        span = f"{fmt(low, unit)} at {count_text(low_n)} … {fmt(high, unit)} at {count_text(high_n)}"
        if low <= 0:
            # RSS growth at a small size can drown in the allocator's noise.
            w(f"| {what} | {span} (a figure at or below zero: noise) | ? |")
            continue
        ok = low / high >= 0.8 if better == "high" else high / low <= 1.2
        w(f"| {what} | {span} | {'✅' if ok else '❌'} |")
    largest = max(sizes(part, "recovery"), default=None)
    if largest is not None:
        a = part.median(f"recovery-{largest}", "arbor", "recovery_ms")
        z = part.median(f"recovery-{largest}", "zookeeper", "recovery_ms")
        if z is None:
            zk = sizes(part, "recovery")
            zk = [n for n in zk if part.median(f"recovery-{n}", "zookeeper", "recovery_ms") is not None]
            held = f"; ZooKeeper was run up to {count_text(max(zk))}, what its 1000 MB heap holds" if zk else ""
            w(f"| restart at {count_text(largest)} znodes ≤ ¼ of ZooKeeper's | Arbor {fmt(a, 'ms')}, ZooKeeper "
              f"not run{held} | n/a |")
        else:
            r = ratio(a, z)
            w(f"| restart at {count_text(largest)} znodes ≤ ¼ of ZooKeeper's | {fmt(a, 'ms')} against "
              f"{fmt(z, 'ms')}: {fmt(r)} | {'✅' if r is not None and r <= 0.25 else '❌'} |")


# (row, label, field, unit) of the zkport part; issue 14's targets: the
# port within 15 % of the native protocol's throughput, and at least twice
# Apache ZooKeeper's.
ZKPORT_ROWS = [
    ("create, 64 in flight, 8 conns: throughput", "create-64", "ops_per_s", "ops/s"),
    ("get, 64 in flight, 8 conns: throughput", "get-64", "ops_per_s", "ops/s"),
]
ZKPORT_INFO = [
    ("server CPU per op, create 64 in flight", "create-64", "server_cpu_us_per_op", "cpu"),
    ("server CPU per op, get 64 in flight", "get-64", "server_cpu_us_per_op", "cpu"),
    ("arbor-bench CPU per op, create 64 in flight", "create-64", "bench_cpu_us_per_op", "cpu"),
    ("arbor-bench CPU per op, get 64 in flight", "get-64", "bench_cpu_us_per_op", "cpu"),
    ("create, 64 in flight: p99", "create-64", "p99_us", "us"),
    ("get, 64 in flight: p99", "get-64", "p99_us", "us"),
]
PORT_OVER_NATIVE_MIN = 0.85
PORT_OVER_ZOOKEEPER_MIN = 2.0


def zkport_tables(part):
    """The three servers side by side: (native, port, Apache) medians."""
    def three(label, field, client=""):
        return (part.median(label, "arbor", field),
                part.median(f"port-{client}{label}", "zookeeper", field),
                part.median(f"{client}{label}", "zookeeper", field))

    w("| workload | Arbor, native protocol | Arbor, ZooKeeper port | Apache ZooKeeper | port/native "
      "| port/ZooKeeper | target | met |")
    w("| --- | ---: | ---: | ---: | ---: | ---: | --- | :---: |")
    for row, label, field, unit in ZKPORT_ROWS:
        native, port, apache = three(label, field)
        over_native, over_zk = ratio(port, native), ratio(port, apache)
        met = "?" if None in (over_native, over_zk) else (
            "✅" if over_native >= PORT_OVER_NATIVE_MIN and over_zk >= PORT_OVER_ZOOKEEPER_MIN else "❌")
        w(f"| {row} | {fmt(native, unit)} | {fmt(port, unit)} | {fmt(apache, unit)} | {fmt(over_native)} "
          f"| {fmt(over_zk)} | port ≥ {PORT_OVER_NATIVE_MIN:g}× native, ≥ {PORT_OVER_ZOOKEEPER_MIN:g}× ZooKeeper "
          f"| {met} |")
    w("")
    w("Other figures (lean client):")
    w("")
    w("| workload | Arbor, native protocol | Arbor, ZooKeeper port | Apache ZooKeeper |")
    w("| --- | ---: | ---: | ---: |")
    for row, label, field, unit in ZKPORT_INFO:
        native, port, apache = three(label, field)
        w(f"| {row} | {fmt(native, unit)} | {fmt(port, unit)} | {fmt(apache, unit)} |")
    w("")
    w("Second load generator: the same workloads on both ZooKeeper servers through the")
    w("`zookeeper-client` crate instead of arbor-bench's lean client:")
    w("")
    w("| workload | Arbor, ZooKeeper port | Apache ZooKeeper | port/ZooKeeper | server CPU per op, port "
      "| server CPU per op, ZooKeeper | arbor-bench CPU per op, port |")
    w("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row, label, field, unit in ZKPORT_ROWS:
        _, port, apache = three(label, field, "crate-")
        _, port_cpu, apache_cpu = three(label, "server_cpu_us_per_op", "crate-")
        _, bench_cpu, _ = three(label, "bench_cpu_us_per_op", "crate-")
        w(f"| {row} | {fmt(port, unit)} | {fmt(apache, unit)} | {fmt(ratio(port, apache))} | "
          f"{fmt(port_cpu, 'cpu')} | {fmt(apache_cpu, 'cpu')} | {fmt(bench_cpu, 'cpu')} |")
    w("")
    w("Every run:")
    w("")
    w("| workload | field | native, per round | port, per round | ZooKeeper, per round |")
    w("| --- | --- | --- | --- | --- |")
    for client in ("", "crate-"):
        for _row, label, field, unit in ZKPORT_ROWS:
            native = ", ".join(fmt(v, unit) for v in part.values(label, "arbor", field)) if not client else "–"
            port = ", ".join(fmt(v, unit) for v in part.values(f"port-{client}{label}", "zookeeper", field))
            apache = ", ".join(fmt(v, unit) for v in part.values(f"{client}{label}", "zookeeper", field))
            w(f"| {client}{label} | {field} | {native} | {port} | {apache} |")


# (row, label, field, unit) of the recipes part. ZooKeeper runs each
# semaphore label with Curator's protocol and LABEL-kazoo with kazoo's; its
# queue labels run kazoo's LockingQueue (Curator has no such queue).
RECIPE_ROWS = [
    ("semaphore, 4 permits, 1 client: acquire+release p50", "semaphore-4x1", "cycle_p50_us", "us"),
    ("semaphore, 4 permits, 1 client: acquire p99", "semaphore-4x1", "acquire_p99_us", "us"),
    ("semaphore, 4 permits, 16 clients: acquire+release cycles", "semaphore-4x16", "ops_per_s", "ops/s"),
    ("semaphore, 4 permits, 16 clients: acquire p50", "semaphore-4x16", "p50_us", "us"),
    ("semaphore, 4 permits, 16 clients: acquire p99", "semaphore-4x16", "p99_us", "us"),
    ("semaphore, 4 permits, 16 clients: acquire p999", "semaphore-4x16", "p999_us", "us"),
    ("semaphore, 4 permits, 16 clients: notifications per release", "semaphore-4x16",
     "notifications_per_release", ""),
    ("semaphore, 16 clients hold 2 ms: cycles (ideal 2.0 k/s)", "semaphore-4x16-hold", "ops_per_s", "ops/s"),
    ("semaphore, 16 clients hold 2 ms: acquire p99", "semaphore-4x16-hold", "p99_us", "us"),
    ("semaphore, 16 clients hold 2 ms: notifications per release", "semaphore-4x16-hold",
     "notifications_per_release", ""),
    ("queue, 2 producers, 4 consumers: takes end to end", "queue-2x4", "takes_per_s", "ops/s"),
    ("queue, 2 producers, 4 consumers: puts", "queue-2x4", "puts_per_s", "ops/s"),
    ("queue, 2 producers, 4 consumers: put p50", "queue-2x4", "put_p50_us", "us"),
    ("queue, 2 producers, 4 consumers: take to completed p50", "queue-2x4", "complete_p50_us", "us"),
    ("queue, 2 producers, 4 consumers: notifications per item", "queue-2x4", "notifications_per_item", ""),
    ("queue, 1 item at a time, 4 idle consumers: put→take p50", "queue-1x4-idle", "p50_us", "us"),
    ("queue, 1 item at a time, 4 idle consumers: put→take p99", "queue-1x4-idle", "p99_us", "us"),
    ("queue, 1 item at a time, 4 idle consumers: notifications per item", "queue-1x4-idle",
     "notifications_per_item", ""),
]


def recipes_tables(part):
    """Arbor against Curator's and kazoo's protocols, medians over rounds."""
    w("| workload | Arbor | ZooKeeper, Curator | ZooKeeper, kazoo | Arbor/Curator | Arbor/kazoo |")
    w("| --- | ---: | ---: | ---: | ---: | ---: |")
    for row, label, field, unit in RECIPE_ROWS:
        a = part.median(label, "arbor", field)
        if label.startswith("queue"):
            curator, kazoo = None, part.median(label, "zookeeper", field)
        else:
            curator = part.median(label, "zookeeper", field)
            kazoo = part.median(f"{label}-kazoo", "zookeeper", field)
        w(f"| {row} | {fmt(a, unit)} | {fmt(curator, unit)} | {fmt(kazoo, unit)} "
          f"| {fmt(ratio(a, curator))} | {fmt(ratio(a, kazoo))} |")
    w("")
    w("Every run:")
    w("")
    w("| workload | field | Arbor, per round | Curator, per round | kazoo, per round |")
    w("| --- | --- | --- | --- | --- |")
    for _row, label, field, unit in RECIPE_ROWS:
        if field not in ("ops_per_s", "takes_per_s", "p50_us", "cycle_p50_us"):
            continue
        runs = lambda lab: ", ".join(fmt(v, unit) for v in part.values(lab, "zookeeper", field))
        a = ", ".join(fmt(v, unit) for v in part.values(label, "arbor", field))
        curator, kazoo = ("–", runs(label)) if label.startswith("queue") else (runs(label), runs(f"{label}-kazoo"))
        w(f"| {label} | {field} | {a} | {curator} | {kazoo} |")
    w(f"| raw fsync (4 KiB + fdatasync) | p50 before/after each round | "
      f"{', '.join(fmt(v, 'us') for v in part.fsync_rounds())} | | |")


def zk_clients(part):
    """The ZooKeeper clients a part's load rows were measured with."""
    found = {r.get("zk_client", "crate (before zk_client was recorded)")
             for (label, target), runs in part.runs.items() if target == "zookeeper"
             for _, r in runs if r.get("workload") in ("create", "get", "set", "delete", "mixed")}
    return ", ".join(sorted(found)) or "–"


out = []
w = out.append
w("# Benchmarks: Arbor against Apache ZooKeeper")
w("")
w("Generated by `bench/compare.sh` (do not edit by hand). Arbor and ZooKeeper ran on this")
w("machine in the same time slot, on 127.0.0.1, with fsync on and fresh data directories")
w("on the same filesystem, alternating which went first from round to round.")
paired = [p for p in parts if p.paired]
unpaired = [p for p in parts if not p.paired]
if paired:
    names = ", ".join(p.name for p in paired)
    w(f"In the paired parts ({names}) both servers were up and warmed, and each load, lock,")
    w("expiry and recipe workload ran against one, then straight away against the other, once")
    w(f"both servers were quiet (together at most {10 * int(env('QUIET_TICKS', '2'))} ms of CPU in"
      f" {env('QUIET_WINDOW_SECS', '0.3')} s): a ratio's two sides are seconds apart.")
    if standalone and standalone.paired:
        w("The standalone part's memory and recovery rows ran on a fresh server each, one server")
        w("at a time.")
if unpaired:
    names = ", ".join(p.name for p in unpaired)
    w(f"Each round of the other parts ({names}) ran every workload against one server, then")
    w("every one against the other.")
w("Figures are medians over rounds; the ratio is Arbor's median over ZooKeeper's.")
w("Clients and servers share the machine's cores.")
if standalone and ensemble:
    w("The standalone sections compare one `arbord` with one ZooKeeper server; the ensemble")
    w("section three `arbord` members with a three-server ZooKeeper ensemble.")
elif ensemble:
    w("This report holds only the ensemble part: three `arbord` members against a")
    w("three-server ZooKeeper ensemble.")
if scale:
    w("The scale section runs the standalone servers again as the work grows.")
quick = [p.name for p in parts if p.quick]
if quick:
    w("")
    w(f"**QUICK run ({', '.join(quick)}): small counts, for checking the script; not the figures to quote.**")

if standalone:
    s = standalone
    fsync_p50 = s.median("fsync", "disk", "p50_us")
    w("")
    w("## Targets")
    w("")
    targets_table(s, TARGETS)
    a = s.median("create-1", "arbor", "p50_us")
    floor = ratio(a, fsync_p50)
    met = "?" if floor is None else ("✅" if floor <= 1.2 else "❌")
    w(f"| create, 1 in flight: p50 against the disk's raw fsync p50 ({fmt(fsync_p50, 'us')}) "
      f"| {fmt(a, 'us')} | {fmt(s.median('create-1', 'zookeeper', 'p50_us'), 'us')} "
      f"| {fmt(floor)} of fsync | ≤ 1.2× fsync | {met} |")
    for label in ("handoff-100", "handoff-1000"):
        for target in ("arbor", "zookeeper"):
            n = s.values(label, target, "notifications_per_release")
            if n:
                w(f"| {label}: notifications per release, {target} | | | {', '.join(f'{x:g}' for x in n)} | exactly 1 | "
                  f"{'✅' if all(x == 1.0 for x in n) else '❌'} |")

    w("")
    w("## Other figures")
    w("")
    info_table(s, INFO)

    w("")
    w("## Every run")
    w("")
    every_run_table(s, [(label, field, unit) for _row, label, field, unit, _goal, _bound in TARGETS] +
                    [(label, field, unit) for label in ("set-64", "delete-64")
                     for _name, field, unit in LOG_FIGURES[:2] + WRITE_PATH])

if ensemble:
    e = ensemble
    w("")
    w("## Ensemble: 3 members")
    w("")
    w("Three `arbord` members against three ZooKeeper servers (`QuorumPeerMain`), all on")
    w("this machine. Each client connection is pinned to one member (connection i to member")
    w("i mod 3), so reads are served by all three and writes go through the leader, which")
    w("acknowledges them once a majority has them on disk. Leader kill: writers overwrite")
    w("their own node in a loop, one write in flight each (a writer whose session ran out")
    w("during an outage opens a new one, as an application would); the leader is killed with")
    w("`kill -9` several times a round (started again after each recovery); the first")
    w("acknowledged write is the time from the kill to the first write acknowledged after")
    w("it, \"every writer\" until each writer has had one (clients of the dead member have")
    w("moved). Percentiles of a round are over its kills; the tables hold their median over")
    w("rounds.")
    if ensemble.paired:
        w("Both ensembles are up through a round; each workload, the leader kills included,")
        w("runs against one, then straight away against the other, once every member of both")
        w("is quiet.")
    w("")
    w("### Targets")
    w("")
    targets_table(e, ENS_TARGETS)
    w("")
    w("### Other figures")
    w("")
    info_table(e, ENS_INFO)
    w("")
    w("### Every run")
    w("")
    every_run_table(e, [(label, field, unit) for _row, label, field, unit, _goal, _bound in ENS_TARGETS] +
                    [(label, field, unit) for _row, label, field, unit in ENS_INFO if label == "ens-failover"])

if scale:
    c = scale
    w("")
    w("## Scale: how cost grows with the work")
    w("")
    w("One `arbord` and one ZooKeeper server as in the standalone part, a fresh data directory")
    w("for each size. Znodes: the tree is filled with N znodes of 32 B spread over 100 parents")
    fill = first_record(c, "znodes")
    batch, in_flight = fill.get("batch", "?"), fill.get("concurrency", "?")
    w(f"(`memory --keep --parents 100 --batch {batch}`: the RSS they add, created in multis of")
    w(f"{batch}, {in_flight} in flight; the fill pauses halfway until RSS settles, and the second half's")
    w("growth per znode leaves out the fixed costs of a load), then 50 000 creates at 64 in")
    smallest = min(sizes(c, "create"), default=None)
    create_runs = runs_per_round(c, f"create-{smallest}") if smallest is not None else 0
    gets = "10 000 single gets run on top of them; the restart is `recovery` on another"
    if create_runs > 1:
        w(f"flight, {create_runs} runs back to back in each round (each removes its znodes again, so the")
        w("tree is back at N for the next; the median is over every run of every round), and")
        w(gets)
    else:
        w(f"flight and {gets}")
    w("fresh server holding N znodes. ZooKeeper")
    w("runs only up to the sizes its `-Xmx1000m` heap holds (about 1 KB a znode); past them it")
    w("runs the restart alone, with the bigger heap (`-Xmx` in `SCALE_ZK_BIG_HEAP`, 8 GB by")
    w("default) a user holding that many znodes has to give it. Children:")
    w("one node with N children, listed with one request in flight. Idle sessions: as")
    w("`idle-memory`, with the server's CPU time while they idle. Watches: sessions setting")
    w("exists watches on short paths until there are that many. Odd rounds build the trees")
    w("smallest first, even rounds largest first, so that the disk's drift over a round does not")
    w("pass for the effect of a tree's size.")
    w("")
    w("### Targets")
    w("")
    scale_targets(c)
    w("")
    current = None
    for size_name, title, prefix, field, unit in SCALE_TABLES:
        if not sizes(c, prefix):
            continue
        if size_name != current:
            w(f"### By {size_name}")
            w("")
            current = size_name
        scale_table(c, size_name, title, prefix, field, unit)

if zkport:
    w("")
    w("## ZooKeeper's protocol: Arbor's ZooKeeper port")
    w("")
    w("One `arbord` serving its native port and its ZooKeeper port (`--zk-listen`), and one")
    w("Apache ZooKeeper server, as in the standalone part. On each round the two Arbor ports")
    w("are measured on the same fresh server, after a warm-up on each and on ZooKeeper.")
    if zkport.paired:
        w("Each workload runs against the three sides back to back (native, port, ZooKeeper;")
        w("the reverse on even rounds), each once both servers are quiet.")
    else:
        w("Arbor's two ports are measured one after the other (which goes first flips every")
        w("round); ZooKeeper on its own server before or after them.")
    w("ZooKeeper's protocol is spoken by")
    w("arbor-bench's lean jute client (`--zk-client lean`, the default: one task per")
    w("connection, requests queued while it reads leave in one write, as arbor-client")
    w("does), then again by the `zookeeper-client` crate (`--zk-client crate`) as a second")
    w("load generator. The clients share the machine's two cores with the server, so what")
    w("a client spends per request is taken from the server it measures: the crate writes")
    w("each request on its own, which costs it and the server more per request.")
    w("")
    zkport_tables(zkport)
    w("")

if recipes:
    w("")
    w("## Recipes")
    w("")
    if recipes.paired:
        w("One `arbord` and one ZooKeeper server as in the standalone part, fresh in each round")
        w("and warmed alike; each workload runs against both back to back (ZooKeeper's semaphore")
        w("with Curator's protocol, then kazoo's), each once both are quiet. Every client has its")
        w("own session. Arbor runs")
    else:
        w("One `arbord` and one ZooKeeper server as in the standalone part, fresh for each target")
        w("in each round, after the same warm-up. Every client has its own session. Arbor runs")
    w("its library recipes (`arbor_client::recipes::Semaphore`, `Queue`); ZooKeeper runs the")
    w("node protocols of Curator's `InterProcessSemaphoreV2` and kazoo's `Semaphore` and")
    w("`LockingQueue`, written over the `zookeeper-client` crate (`bench/src/target/zk_recipes.rs`;")
    w("both semaphores take a lock, then list the leases). `semaphore`: each client loops")
    w("acquire, hold, release; the acquire is timed from the call to the grant, waiting for")
    w("a permit included. `queue`: producers put numbered items, consumers take and")
    w("complete them (Arbor: the fenced completion; kazoo: `consume`), at most")
    w("`--max-backlog` outstanding; put→take runs from the put's call to the take's return;")
    w("every item must be taken exactly once or the run fails. Notifications are the watch")
    w("events the clients' sessions received. Client and server share the machine's two")
    w("cores, so a recipe with more round trips also takes more CPU from the server.")
    w("")
    recipes_tables(recipes)
    w("")

fsync_all = [v for p in parts for v in p.values("fsync", "disk", "p50_us")]
fsync_all_p99 = [v for p in parts for v in p.values("fsync", "disk", "p99_us")]
fsync_p50 = statistics.median(fsync_all) if fsync_all else None
fsync_p99 = statistics.median(fsync_all_p99) if fsync_all_p99 else None

def machine_of(part):
    """The machine a part was measured on, as one line."""
    m = part.machine or {"cpu": env("CPU_MODEL", "?"), "cores": os.cpu_count(), "mem_gib": env("MEM_GIB", "?"),
                         "kernel": platform.release(), "fs": env("FS_TYPE", "?")}
    return (f"CPU: {m['cpu']}, {m['cores']} cores; memory {m['mem_gib']} GiB; kernel {m['kernel']}; "
            f"filesystem of the data directories: {m['fs']}")


machines = list(dict.fromkeys(machine_of(p) for p in parts))
w("")
w("## Machine and versions")
w("")
if len(machines) == 1:
    w(f"* {machines[0]}")
else:
    w("* **The parts were measured on different machines** (each part's machine is below):")
    w("  ratios within a part compare like with like, figures across parts do not.")
w(f"* Disk: raw 4 KiB write + fdatasync p50 {fmt(fsync_p50, 'us')}, p99 {fmt(fsync_p99, 'us')} "
  "(median of the probes taken at the start of each round)")
measured_commits = list(dict.fromkeys(c for p in parts for c in p.commits)) or [env("COMMIT", "?")]
w(f"* Arbor {env('ARBOR_VERSION', '?')} (commit {', '.join(measured_commits)}), {env('RUSTC', '?')}, release build")
w(f"* Apache ZooKeeper {env('ZK_VERSION', '?')} (Debian package), {env('JAVA', '?')}, `-Xmx1000m`, "
  "logging at INFO to a rolling file as Debian's service does")
for p in parts:
    when = p.measured.strftime("%Y-%m-%d %H:%M UTC")
    source = "this run" if p.now else "kept from an earlier run of `bench/compare.sh`"
    w(f"* {p.name.capitalize()} part: {p.rounds} round{'s' if p.rounds != 1 else ''}, "
      f"measured {when} at commit {', '.join(p.commits) or '?'} ({source})")
    if len(machines) > 1:
        w(f"  on {machine_of(p)}")
w("")
w("## How it was run")
w("")
w("```text")
w("bench/compare.sh            # ROUNDS=3; QUICK=1 for small counts; PART=standalone|ensemble|scale|zkport|recipes|all")
zk_java = "java -Xmx1000m -Dzookeeper.root.logger=INFO,ROLLINGFILE -Dzookeeper.log.dir=DIR"
if standalone:
    max_conns = env("ARBOR_MAX_CONNECTIONS", "4096")
    w(f"arbord --data-dir DIR --listen 127.0.0.1:{env('ARBOR_PORT', '7581')} "
      f"--zk-listen 127.0.0.1:{env('ARBOR_ZK_PORT', '2571')} "
      f"--admin-listen 127.0.0.1:{env('ARBOR_ADMIN_PORT', '7582')} "
      f"--max-connections {max_conns} --max-connections-per-ip {max_conns}   # fsync always, tick 2000")
    w(f"{zk_java} ... ZooKeeperServerMain zoo.cfg   # tickTime=2000 forceSync=yes maxClientCnxns=0")
    commands(standalone, "")
    w(f"# ZooKeeper's load client: {zk_clients(standalone)}")
if ensemble:
    if standalone:
        w("")
    members = " ".join(
        f"--member {i}=127.0.0.1:{int(env('ENS_ARBOR_PORT', '7681')) + i - 1}"
        f"/127.0.0.1:{int(env('ENS_ARBOR_PEER_PORT', '7691')) + i - 1}" for i in (1, 2, 3))
    w(f"arbord --data-dir DIR_i --listen 127.0.0.1:CLIENT_i --member-id i {members} "
      "--max-connections-per-ip 4096   # i = 1..3; fsync always, tick 2000")
    quorum, election = int(env("ENS_ZK_QUORUM_PORT", "2781")), int(env("ENS_ZK_ELECTION_PORT", "2881"))
    w(f"{zk_java}_i ... QuorumPeerMain zoo.cfg   # i = 1..3; tickTime=2000 initLimit=10 syncLimit=5 "
      f"server.i=127.0.0.1:{quorum}+i-1:{election}+i-1 forceSync=yes maxClientCnxns=0")
    commands(ensemble, "--server A,B,C ")
    w(f"# ZooKeeper's load client: {zk_clients(ensemble)}")
    w(f"# --server: Arbor {env('ENS_ARBOR_SERVERS', '?')}, ZooKeeper {env('ENS_ZK_SERVERS', '?')}")
if scale:
    w("")
    w("# scale: the standalone servers; each command once per size N")
    commands(scale, "")
    w(f"# ZooKeeper's load client: {zk_clients(scale)}")
if zkport:
    w("")
    w("# zkport: the standalone servers; Arbor's ZooKeeper port is --target zookeeper "
      f"--server 127.0.0.1:{env('ARBOR_ZK_PORT', '2571')}")
    commands(zkport, "")
    w("# each ZooKeeper row again with --zk-client crate")
if recipes:
    w("")
    w("# recipes: the standalone servers; ZooKeeper's LABEL-kazoo semaphore rows add --zk-recipe kazoo")
    commands(recipes, "")
w("```")
w("")
w("ZooKeeper runs as Debian's package runs it as a service: `-Xmx1000m`, Debian's")
w("`log4j.properties` with `zookeeper.root.logger=INFO,ROLLINGFILE` (INFO into")
w("`zookeeper.log` in the server's directory); before measuring, the script checks that")
w("each server's `zookeeper.log` has INFO lines and no DEBUG line (left unset, that")
w("property leaves log4j's root logger at DEBUG with no appender, which slows ZooKeeper")
w("down for nothing).")
if standalone:
    w("")
    w("Standalone: each data directory is fresh for the load workloads, again for `memory`")
    w("(RSS of the server process before and after creating the znodes, 32 B each, in")
    w("multis of 1000), again for `idle-memory` (RSS, settled, before and after opening the")
    w("idle sessions, each its own connection, kept alive by heartbeats alone for one session")
    w("timeout; 16 warm-up sessions are open before the first reading), again for")
    w("`watch-memory` (RSS, settled: before any watch, after one session has set an exists")
    w("watch on every node, and after the other sessions have too; \"above path bytes\" is the")
    w("first watch of a path less the path's length, \"another session\" what each further")
    w("watch of an already watched path adds; a JVM's RSS counts the heap pages it has")
    w("touched, not its live objects, so ZooKeeper's split between the two follows its")
    w("garbage collector and its figure for all watches is the one to compare),")
    w("and again for `recovery` (fill, `kill -9`, start, time until a new")
    w("session reads the last znode). The lock on ZooKeeper is Curator's InterProcessMutex")
    w("algorithm written over the `zookeeper-client` crate; on Arbor it is")
    w("`arbor_client::recipes::Mutex`.")
if ensemble:
    w("")
    w("Ensemble: every member's data directory is fresh for each target in each round; the")
    w("ensemble counts as up once every member serves and a majority agree on one leader")
    w("(ZooKeeper: `srvr` says `leader` on one server and `follower` on the others). The")
    w("failover's kill command is `kill -9` of the leader's process, returning once it is")
    w("gone; its start command starts that member again in the background.")
w("")
w("A warm-up (not recorded: 4 s of `mixed`, 3 s of `create`, 20 000 `delete`s) runs")
if ensemble:
    w("before the first measured workload of each target in each round, for the JVM's JIT")
    w(f"(for the ensembles {env('ENS_WARM_UPS', '3')} times over: three JVMs took that long to reach their")
    w("plateau).")
else:
    w("before the first measured workload of each target in each round, for the JVM's JIT.")
def kept_steal(part, pick=lambda runs: [r for _, r in runs]):
    """The steal of each result kept (or of those PICK takes from each row)."""
    return [r["steal_percent"] for runs in part.runs.values() for r in pick(runs)
            if r.get("steal_percent") is not None]


# Results from before rows recorded steal say nothing of it.
stolen = [s for p in parts for s in kept_steal(p)]
if stolen:
    w("")
    w("This machine is a virtual machine: load and listing rows record the share of the machine's")
    w("CPU ticks the hypervisor gave to another guest while they ran (`steal_percent`, from")
    w(f"`/proc/stat`); a row that lost more than {STEAL_MAX:g} % was measured again, up to")
    w(f"{env('STEAL_RETRIES', '2')} more times, against either server, and the attempt that lost least kept.")
    w(f"A kept row that still lost more than {STEAL_MAX:g} % is left out of its median when another run")
    w("measured that row under it (the same rule for both servers): such a row measured the other guests")
    w(f"as much as the server. Rows measured again in this report: {sum(p.remeasured for p in parts)};")
    w(f"left out of their medians: {sum(p.left_out() for p in parts)}; the most any row kept lost:")
    w(f"{max(stolen):.1f} %, the most any row in a median lost: {max(s for p in parts for s in kept_steal(p, in_median)):.1f} %.")
if scale and kept_steal(scale):
    w("In the scale part the timed rows on a filled tree start once the server has spent under")
    w(f"{env('SETTLE_IDLE_TICKS', '5')} % of a core for a second (waiting at most "
      f"{env('SETTLE_MAX_SECS', '120')} s): the fill's own aftermath (a snapshot")
    w("being written, a JVM's collector) belongs to the fill, not to the tree it leaves.")

with open(OUT, "w") as f:
    f.write("\n".join(out) + "\n")
