#!/usr/bin/env bash
# Arbor against Apache ZooKeeper 3.8 on this machine, in one run, and
# BENCHMARKS.md from it.
#
#   bench/compare.sh                    # ROUNDS=3, full sizes, both parts (about an hour)
#   QUICK=1 ROUNDS=1 bench/compare.sh   # small counts: checks the script in minutes
#   PART=standalone bench/compare.sh    # one part: standalone, ensemble, scale, zkport, recipes or all (default)
#   REPORT_ONLY=1 bench/compare.sh      # BENCHMARKS.md again from the results kept, measuring nothing
#
# Five parts, each with its own results in bench/results, committed with
# BENCHMARKS.md (results.jsonl, ensemble.jsonl, scale.jsonl, zkport.jsonl,
# recipes.jsonl; a QUICK run keeps its own under target/bench-compare, and
# RESULTS_DIR puts them anywhere); running one part replaces only its own,
# and BENCHMARKS.md shows every part that has results there. Each file
# starts with the machine it was measured on: a part kept from an earlier
# run may come from another machine, and the report says so.
# * standalone: one arbord against one ZooKeeper server (ZooKeeperServerMain).
# * ensemble: three arbord members against a three-server ZooKeeper ensemble
#   (QuorumPeerMain), all on this machine; loads spread over the members, and
#   the time writes take to be acknowledged again after kill -9 of the leader.
# * scale: the standalone servers again, as the work grows: znodes (10 k to
#   10 M; ZooKeeper up to 1 M, as far as its 1000 MB heap holds them, and
#   at 10 M the restart alone, on the bigger heap such a tree needs),
#   children of one node, idle sessions, watches. SCALE_ROUNDS rounds
#   (default ROUNDS): each size is a fresh server, its creates run
#   SCALE_CREATE_RUNS times (default 3). A size this machine cannot run
#   (too few open files) is recorded as not run, with why.
# * zkport: ZooKeeper's protocol, spoken to arbord's ZooKeeper port
#   (--zk-listen) and to Apache ZooKeeper, beside arbord's native port:
#   creates and gets at 64 in flight, with arbor-bench's lean jute client
#   and again with the zookeeper-client crate as a second load generator.
# * recipes: the standalone servers again: semaphore acquire/release and
#   queue put/take, Arbor's library recipes against Curator's
#   InterProcessSemaphoreV2, kazoo's Semaphore and kazoo's LockingQueue
#   protocols on ZooKeeper (bench/src/target/zk_recipes.rs).
#
# Everything runs on 127.0.0.1 with fsync on, tick 2000 ms, fresh data
# directories on the same filesystem (under target/bench-compare), and is
# measured in alternation, the order flipping every round (A B, B A, ...):
# in the standalone, ensemble, zkport and recipes parts each load, lock,
# expiry, failover and recipe workload runs against one server (or
# ensemble), then straight away against the other, both up (paired, after
# both are quiet), and each memory and recovery workload on a fresh server
# of its own; the scale part runs every workload against one, then every
# one against the other (its servers are fresh for each size). Every round
# also probes the disk's raw fsync latency, the floor under every write.
# Each workload prints one JSON line (arbor-bench); the tables in
# BENCHMARKS.md hold the median over rounds and the ratio Arbor/ZooKeeper.
# Load and listing rows also say how much of the machine's CPU the
# hypervisor stole while they ran; a row that lost more than
# STEAL_MAX_PERCENT (default 5) is measured again, up to STEAL_RETRIES
# (default 2) more times, whichever server it measures, and the attempt that
# lost least is kept: the tables compare the servers, not the neighbours.
#
# ZooKeeper runs as Debian's package runs it as a service: -Xmx1000m, log4j
# at INFO into a rolling file (-Dzookeeper.root.logger=INFO,ROLLINGFILE,
# -Dzookeeper.log.dir=<the server's directory>). Without those properties
# Debian's log4j.properties leaves the root logger at DEBUG with no appender,
# which slows ZooKeeper down for nothing; so before measuring, each server's
# zookeeper.log must exist, hold INFO lines and no DEBUG line, or the run stops.
set -euo pipefail

ROUNDS=${ROUNDS:-3}
REPORT_ONLY=${REPORT_ONLY:-0}
QUICK=${QUICK:-0}
PART=${PART:-all}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/BENCHMARKS.md}
WORK=$ROOT/target/bench-compare
ARBOR_PORT=${ARBOR_PORT:-7581}
ARBOR_ZK_PORT=${ARBOR_ZK_PORT:-2571}   # arbord's ZooKeeper port
ARBOR_ADMIN_PORT=${ARBOR_ADMIN_PORT:-7582}  # arbord's admin port: /metrics
ZK_PORT=${ZK_PORT:-2581}
# Ensemble member i (1-3) listens on each base port + i - 1.
ENS_ARBOR_PORT=${ENS_ARBOR_PORT:-7681}          # clients
ENS_ARBOR_PEER_PORT=${ENS_ARBOR_PEER_PORT:-7691}
ENS_ZK_PORT=${ENS_ZK_PORT:-2681}                # clients
ENS_ZK_QUORUM_PORT=${ENS_ZK_QUORUM_PORT:-2781}
ENS_ZK_ELECTION_PORT=${ENS_ZK_ELECTION_PORT:-2881}
MEMBERS=(1 2 3)
if [ "$QUICK" = 1 ]; then
    RESULTS_DIR=${RESULTS_DIR:-$WORK/quick-results}
else
    RESULTS_DIR=${RESULTS_DIR:-$ROOT/bench/results}
fi
RESULTS=$RESULTS_DIR/results.jsonl
ENSEMBLE=$RESULTS_DIR/ensemble.jsonl
SCALE=$RESULTS_DIR/scale.jsonl
ZKPORT=$RESULTS_DIR/zkport.jsonl
RECIPES=$RESULTS_DIR/recipes.jsonl
SCALE_ROUNDS=${SCALE_ROUNDS:-$ROUNDS}
STEAL_MAX_PERCENT=${STEAL_MAX_PERCENT:-5}
STEAL_RETRIES=${STEAL_RETRIES:-2}
PAIRED=   # set while the standalone part's paired rows run; kept with each row

case $PART in
standalone | ensemble | scale | zkport | recipes | all) ;;
*)
    echo "compare.sh: PART must be standalone, ensemble, scale, zkport, recipes or all, not '$PART'" >&2
    exit 2
    ;;
esac
part() { [ "$REPORT_ONLY" != 1 ] && { [ "$PART" = all ] || [ "$PART" = "$1" ]; }; }

if [ "$QUICK" = 1 ]; then
    LOAD_COUNT=5000 GET_COUNT=20000 ONE_COUNT=2000 LOCK_COUNT=200 BIG=20000 EXPIRY_ROUNDS=1 KILLS=3
    PAIR_LOAD_COUNT=5000 PAIR_GET_COUNT=20000
    IDLE_CONNS=512 WATCH_NODES=5000 WATCH_SESSIONS=2
    SCALE_ZNODES=(1000 10000) SCALE_ZK_ZNODES_MAX=10000 SCALE_ZK_RESTART_MAX=10000
    SCALE_CHILDREN=(10 1000) SCALE_SESSIONS=(256 1024)
    SCALE_WATCHES=20000
    SEM_COUNT=300 QUEUE_ITEMS=300
else
    LOAD_COUNT=50000 GET_COUNT=300000 ONE_COUNT=10000 LOCK_COUNT=2000 BIG=1000000 EXPIRY_ROUNDS=3 KILLS=10
    # The standalone part's load rows: at 50 000 writes Arbor's run lasted
    # 0.4-0.5 s and caught one snapshot or none (one per 100 000 txns, a
    # run's cleanup included), and the same run seconds apart gave 82-118 k
    # creates a second. Runs of about 2 s or more (ZooKeeper's longer) pay
    # their share of snapshots and average the machine's hiccups.
    PAIR_LOAD_COUNT=200000 PAIR_GET_COUNT=1000000
    IDLE_CONNS=4096 WATCH_NODES=50000 WATCH_SESSIONS=4
    SCALE_ZNODES=(10000 100000 1000000 10000000) SCALE_ZK_ZNODES_MAX=1000000 SCALE_ZK_RESTART_MAX=10000000
    SCALE_CHILDREN=(10 1000 100000)
    SCALE_SESSIONS=(10000 50000) SCALE_WATCHES=1000000
    SEM_COUNT=3000 QUEUE_ITEMS=3000
fi
# scale: listings timed per child count (a 100 k listing takes milliseconds),
# and the watches' paths (short, so a million fit ZooKeeper's heap), set by
# SCALE_WATCHERS sessions on SCALE_WATCHES / SCALE_WATCHERS nodes (arbor-client holds
# at most 65 536 watchers a session).
scale_listings() { if [ "$1" -ge 100000 ]; then echo 200; else echo 2000; fi; }
SCALE_WATCH_PATH_BYTES=64
SCALE_WATCHERS=16
# scale: the znodes are spread over this many parents at every size, so 10 M
# stay under Arbor's 2^20 children per node and every size has one shape.
SCALE_PARENTS=100
# scale: creates per multi while the tree is filled (8 multis in flight). With
# memory's default of 1 000, 8 000 creates were in flight: 80 % of a 10 k tree,
# whose RSS then held the buffers and allocator pages of that load (375–462 B
# a znode after a warm-up, against 168–185 B with 100, which the 100 k and 1 M
# trees give with either).
SCALE_FILL_BATCH=100
# scale: create runs of LOAD_COUNT on each filled tree per round, back to
# back. One run lasts about half a second, and on this VM the 10 M tree gave
# 61, 94 and 71 k creates a second in three rounds (e3098bc), and 62-88 k/s
# in nine runs (337e9b0); a longer run would grow the 10 k tree six-fold,
# while each run removes its znodes again, so repeating keeps the size and
# averages the hiccups.
SCALE_CREATE_RUNS=${SCALE_CREATE_RUNS:-3}
# scale: ZooKeeper's heap for the restart past SCALE_ZK_ZNODES_MAX. Its live
# heap holds about 350 B a znode (10 M: 3.5 GB), G1 wants room beside it.
SCALE_ZK_BIG_HEAP=${SCALE_ZK_BIG_HEAP:-8g}
# watch-memory: WATCH_SESSIONS sessions each watch WATCH_NODES nodes whose
# paths are this long, so bytes per watch can be set against path bytes
# (WATCH_NODES first watches alone on their paths: megabytes, well above
# the RSS's noise).
WATCH_PATH_BYTES=1024
# idle-memory holds IDLE_CONNS sessions (plus 16 warm-up ones) open on one
# server from one address; arbord's --max-connections (default 4096) and
# --max-connections-per-ip must let them all in.
ARBOR_MAX_CONNECTIONS=8192

log() { printf '%s %s\n' "$(date +%T)" "$*" >&2; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }
since() { local ms=$(($(now_ms) - $1)); printf '%d.%02d s' $((ms / 1000)) $((ms % 1000 / 10)); }

# idle-memory holds IDLE_CONNS sockets in arbor-bench and as many in the
# server (arbord, or the JVM), which inherit this shell's limit: raise the
# soft open-files limit to the hard one (the soft one is often 1024).
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if part standalone && [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt $((IDLE_CONNS + 1024)) ]; then
    log "open-files limit $(ulimit -n) is too low for $IDLE_CONNS idle sessions; raise ulimit -Hn"
    exit 1
fi

# --- Apache ZooKeeper --------------------------------------------------------

if [ ! -f /usr/share/java/zookeeper.jar ]; then
    log "installing Debian's zookeeper package"
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq zookeeper >/dev/null
fi
ZK_VERSION=$(dpkg-query -W -f='${Version}' zookeeper 2>/dev/null || echo unknown)
ZK_CP=/usr/share/java/zookeeper.jar
for jar in zookeeper-jute slf4j-api slf4j-log4j12 log4j-1.2 netty-buffer netty-codec netty-common \
    netty-handler netty-resolver netty-transport netty-transport-native-epoll \
    netty-transport-native-unix-common commons-cli metrics-core snappy-java \
    audience-annotations commons-io; do
    [ -f "/usr/share/java/$jar.jar" ] && ZK_CP=$ZK_CP:/usr/share/java/$jar.jar
done
ZK_LOG4J=/etc/zookeeper/conf/log4j.properties
if [ ! -f "$ZK_LOG4J" ]; then
    log "$ZK_LOG4J is missing: ZooKeeper would not log as Debian's service does"
    exit 1
fi

# java for a ZooKeeper server whose directory is $1: Debian's heap and
# logging (INFO into $1/zookeeper.log), its log4j.properties from $1/conf.
# The heap is read when the start script runs: $ZK_XMX if set (the scale
# part's 10 M restart), else Debian's 1000m.
zk_java() {
    printf 'java -Xmx${ZK_XMX:-1000m} -Dzookeeper.root.logger=INFO,ROLLINGFILE -Dzookeeper.log.dir="%s" -cp "%s"' \
        "$1" "$1/conf:$ZK_CP"
}

# Fails the run unless the ZooKeeper server in directory $1 logs at INFO.
check_zk_log() {
    local file=$1/zookeeper.log
    if [ ! -s "$file" ]; then
        log "$file is missing or empty: ZooKeeper is not logging as Debian's service does"
        exit 1
    fi
    if ! grep -q ' INFO ' "$file"; then
        log "$file has no INFO line: ZooKeeper is not logging at INFO"
        exit 1
    fi
    if grep -q ' DEBUG ' "$file"; then
        log "$file has DEBUG lines: ZooKeeper logs at DEBUG, which slows it down"
        grep -m 3 ' DEBUG ' "$file" >&2
        exit 1
    fi
}

# `srvr`'s Mode (standalone, leader, follower), or nothing while the server
# does not serve (`ruok` answers before the data is loaded; `srvr` does not).
zk_mode() {
    { (exec 3<>"/dev/tcp/127.0.0.1/$1" && printf srvr >&3 && timeout 2 cat <&3) 2>/dev/null || true; } |
        sed -n 's/^Mode: //p'
}

# --- build -------------------------------------------------------------------

ARBORD=$ROOT/target/release/arbord
if [ "$REPORT_ONLY" != 1 ] || [ ! -x "$ARBORD" ]; then
    log "building arbord and arbor-bench (release)"
    (cd "$ROOT" && cargo build --release --locked -p arbor-server -p arbor-bench >&2)
fi
BENCH=$ROOT/target/release/arbor-bench
COMMIT=$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo unknown)
if part ensemble && ! "$BENCH" failover --help >/dev/null 2>&1; then
    log "this arbor-bench has no failover subcommand, which the ensemble part needs"
    exit 1
fi

# --- processes ---------------------------------------------------------------

# Alive, and not a zombie nobody has reaped yet (members started by
# arbor-bench's --start-cmd are orphans; a zombie holds no port or file).
# A zombie leader whose other threads still exit ("Zl") still holds them:
# the data directory's lock stays taken until the last thread is gone.
running() {
    local state
    state=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
    [[ -n $state && ($state != *Z* || $state == *l*) ]]
}

any_running() {
    local pid
    for pid in "$@"; do
        if running "$pid"; then return 0; fi
    done
    return 1
}

# stop_pids PIDFILE...: SIGTERM to each, up to 10 s for all to go, then
# SIGKILL; the pid files are removed. Missing pid files are skipped.
stop_pids() {
    local file pids=()
    for file in "$@"; do
        if [ -f "$file" ]; then pids+=("$(cat "$file")"); fi
    done
    if [ ${#pids[@]} -gt 0 ]; then
        kill "${pids[@]}" 2>/dev/null || true
        for _ in $(seq 1 100); do
            any_running "${pids[@]}" || break
            sleep 0.1
        done
        kill -9 "${pids[@]}" 2>/dev/null || true
        while any_running "${pids[@]}"; do sleep 0.01; done
    fi
    rm -f "$@"
}

stop() { stop_pids "$WORK/$1/pid"; }
ens_stop() { stop_pids "$WORK/ens-$1"/m*/pid; }  # m*/pid: an unmatched glob stays as is, skipped
stop_all() {
    stop arbor
    stop zookeeper
    ens_stop arbor
    ens_stop zookeeper
}

# A REPORT_ONLY run starts nothing, so it stops nothing: its pid files may
# be another run's, still measuring (one stopped an ensemble mid-round).
if [ "$REPORT_ONLY" != 1 ]; then trap stop_all EXIT; fi
trap 'exit 130' INT
trap 'exit 143' TERM

# record FILE ROUND TARGET LABEL ARGS...: one arbor-bench run with ARGS, its
# JSON line appended to FILE (TARGET only names it in the progress).
# The steal_percent of a result line, or nothing if it has none.
steal_of() { sed -n 's/.*"steal_percent":\([0-9.]*\).*/\1/p' <<<"$1"; }

record() {
    local file=$1 round=$2 target=$3 label=$4 line kept="" kept_steal="" steal attempt
    shift 4
    for attempt in $(seq 1 $((STEAL_RETRIES + 1))); do
        log "round $round $target $label"
        if ! line=$("$BENCH" "$@" 2>>"$BENCH_LOG"); then
            log "arbor-bench $* failed; the end of $BENCH_LOG:"
            tail -5 "$BENCH_LOG" >&2
            exit 1
        fi
        steal=$(steal_of "$line")
        if [ -z "$steal" ]; then
            kept=$line
            break
        fi
        if [ -z "$kept" ] || awk -v a="$steal" -v b="$kept_steal" 'BEGIN { exit !(a < b) }'; then
            kept=$line kept_steal=$steal
        fi
        if awk -v a="$steal" -v max="$STEAL_MAX_PERCENT" 'BEGIN { exit !(a <= max) }'; then
            break
        fi
        log "round $round $target $label: the hypervisor stole $steal % of the CPU (over $STEAL_MAX_PERCENT %)"
    done
    printf '{"round":%s,"label":"%s","quick":%s,"commit":"%s","attempts":%s,"paired":%s,"result":%s}\n' \
        "$round" "$label" "$([ "$QUICK" = 1 ] && echo true || echo false)" "$COMMIT" "$attempt" \
        "$([ -n "$PAIRED" ] && echo true || echo false)" "$kept" >>"$file"
}

# not_run FILE ROUND TARGET LABEL WHY: a run this machine cannot make, kept
# in FILE so the report shows the row as not run, and why, instead of
# leaving it out.
not_run() {
    local file=$1 round=$2 target=$3 label=$4 why=$5
    log "round $round $target $label: not run: $why"
    printf '{"round":%s,"label":"%s","quick":%s,"commit":"%s","attempts":1,"result":{"target":"%s","not_run":"%s"}}\n' \
        "$round" "$label" "$([ "$QUICK" = 1 ] && echo true || echo false)" "$COMMIT" "$target" "$why" >>"$file"
}

# quiet PID...: waits (up to QUIET_MAX_SECS) until the servers together
# spend at most QUIET_TICKS ticks of CPU (of 100 a second) in
# QUIET_WINDOW_SECS, so a paired row does not measure one server beside
# the other's leftovers (a JVM still compiling after its run, a snapshot
# arbord writes after many writes).
QUIET_TICKS=2
QUIET_WINDOW_SECS=0.3
QUIET_MAX_SECS=15
quiet() {
    local before after start
    start=$(now_ms)
    while [ $(($(now_ms) - start)) -lt $((QUIET_MAX_SECS * 1000)) ]; do
        before=$(cpu_ticks "$@")
        sleep "$QUIET_WINDOW_SECS"
        after=$(cpu_ticks "$@")
        if [ $((after - before)) -le "$QUIET_TICKS" ]; then
            if [ $(($(now_ms) - start)) -gt 1000 ]; then log "servers quiet after $(since "$start")"; fi
            return 0
        fi
    done
    log "servers $* still busy after ${QUIET_MAX_SECS} s; measuring anyway"
}

# warm_up TARGET SERVERS: not recorded; the JVM's JIT (and both systems'
# caches) sees reads, writes, creates and deletes before anything is measured.
warm_up() {
    local warm
    for warm in "mixed --secs 4" "create --secs 3" "delete --count 20000"; do
        # shellcheck disable=SC2086 # the workload and its flags, split on purpose
        if ! "$BENCH" --target "$1" --server "$2" $warm >/dev/null 2>>"$BENCH_LOG"; then
            log "warm-up $warm of $1 failed; the end of $BENCH_LOG:"
            tail -5 "$BENCH_LOG" >&2
            exit 1
        fi
    done
}

# --- standalone servers ------------------------------------------------------
# Each server gets a start script (reused by the recovery workload's restart
# command), a pid file and a log, all under $WORK/<target>.

write_scripts() {
    local dir=$WORK/arbor
    mkdir -p "$dir"
    cat >"$dir/start.sh" <<EOF
#!/bin/sh
# ARBOR_MAX_CONNECTIONS from the environment: the scale part's many sessions.
max=\${ARBOR_MAX_CONNECTIONS:-$ARBOR_MAX_CONNECTIONS}
exec "$ARBORD" --data-dir "$dir/data" --listen 127.0.0.1:$ARBOR_PORT --zk-listen 127.0.0.1:$ARBOR_ZK_PORT --admin-listen 127.0.0.1:$ARBOR_ADMIN_PORT --max-connections \$max --max-connections-per-ip \$max </dev/null >>"$dir/server.log" 2>&1
EOF
    # maxClientCnxns=0: no per-address connection limit (Debian's zoo.cfg
    # sets 60; every benchmark connection comes from 127.0.0.1, idle-memory's
    # IDLE_CONNS of them at once).
    dir=$WORK/zookeeper
    mkdir -p "$dir/conf"
    cat >"$dir/conf/zoo.cfg" <<EOF
tickTime=2000
dataDir=$dir/data
clientPort=$ZK_PORT
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=*
forceSync=yes
maxClientCnxns=0
EOF
    cp "$ZK_LOG4J" "$dir/conf/"
    cat >"$dir/start.sh" <<EOF
#!/bin/sh
exec $(zk_java "$dir") org.apache.zookeeper.server.ZooKeeperServerMain "$dir/conf/zoo.cfg" </dev/null >>"$dir/server.log" 2>&1
EOF
    for target in arbor zookeeper; do
        dir=$WORK/$target
        chmod +x "$dir/start.sh"
        # kill -9 (a crash, for both), wait until gone, start again in the
        # background; output to the log so no pipe holds the caller.
        cat >"$dir/restart.sh" <<EOF
#!/bin/sh
pid=\$(cat "$dir/pid")
kill -9 "\$pid" 2>/dev/null
while state=\$(ps -o stat= -p "\$pid"); do
    case \$state in *l*) ;; *Z*) break ;; esac
    sleep 0.01
done
nohup "$dir/start.sh" >/dev/null 2>&1 &
echo \$! >"$dir/pid"
EOF
        chmod +x "$dir/restart.sh"
    done
}

port_of() { if [ "$1" = arbor ]; then echo "$ARBOR_PORT"; else echo "$ZK_PORT"; fi; }

ready() {
    if [ "$1" = arbor ]; then
        grep -q "arbord listening on" "$WORK/arbor/server.log" 2>/dev/null
    else
        [ "$(zk_mode "$ZK_PORT")" = standalone ]
    fi
}

start_fresh() {
    local target=$1 dir=$WORK/$1 started
    stop "$target"
    rm -rf "$dir/data" "$dir/server.log" "$dir"/zookeeper.log*
    mkdir -p "$dir/data"
    started=$(now_ms)
    nohup "$dir/start.sh" >/dev/null 2>&1 &
    echo $! >"$dir/pid"
    for _ in $(seq 1 600); do
        if ready "$target"; then
            if [ "$target" = zookeeper ]; then check_zk_log "$dir"; fi
            log "$target ready after $(since "$started")"
            return 0
        fi
        sleep 0.1
    done
    log "$target did not start; its log:"
    tail -20 "$dir/server.log" >&2
    if [ -f "$dir/zookeeper.log" ]; then tail -20 "$dir/zookeeper.log" >&2; fi
    exit 1
}

# run_on FILE ROUND TARGET LABEL ARGS...: one arbor-bench run against TARGET's
# standalone server, kept in FILE; run keeps it with the standalone part's.
run_on() {
    local file=$1 round=$2 target=$3 label=$4
    shift 4
    record "$file" "$round" "$target" "$label" \
        --target "$target" --server "127.0.0.1:$(port_of "$target")" "$@"
}
run() { run_on "$RESULTS" "$@"; }

# paired_start ORDER: both standalone servers fresh and warmed, in ORDER
# ("arbor zookeeper" or the reverse), and the rows that follow recorded as
# paired, until paired_stop.
paired_start() {
    local target
    for target in $1; do start_fresh "$target"; done
    for target in $1; do warm_up "$target" "127.0.0.1:$(port_of "$target")"; done
    PAIR_ORDER=$1
    PAIRED=1
}
paired_stop() {
    local target
    PAIRED=
    for target in $PAIR_ORDER; do stop "$target"; done
}

# quiet_both: quiet, for the two standalone servers.
quiet_both() { quiet "$(cat "$WORK/arbor/pid")" "$(cat "$WORK/zookeeper/pid")"; }

# pair ROUND LABEL CPU ARGS...: one workload against both servers, both up,
# one right after the other in the round's order ($PAIR_ORDER), each once
# both servers are quiet. CPU=cpu adds the measured server's --server-pid,
# and for Arbor its admin port, whose metrics say what the log's syncs did.
pair() {
    local round=$1 label=$2 cpu=$3 target measured
    shift 3
    for target in $PAIR_ORDER; do
        quiet_both
        measured=()
        if [ "$cpu" = cpu ]; then
            measured=(--server-pid "$(cat "$WORK/$target/pid")")
            if [ "$target" = arbor ]; then
                measured+=(--admin "127.0.0.1:$ARBOR_ADMIN_PORT")
            fi
        fi
        run "$round" "$target" "$label" "$@" "${measured[@]}"
    done
}

# The standalone part's round: ORDER is "arbor zookeeper" or the reverse.
# The load, lock and expiry rows run paired: both servers up and warmed,
# each workload against one, then straight away against the other, so the
# two sides of a ratio are seconds apart, not minutes (this machine's
# speed drifts over minutes; rounds that ran every workload against one
# server, then every one against the other, put that drift into the
# ratios). The memory and recovery rows need a server of their own, fresh
# for each: they run one server at a time.
workloads() {
    local round=$1 order=$2 target pid
    paired_start "$order"
    # Load rows also report the server's CPU time per op (and arbor-bench's).
    pair "$round" create-64 cpu create --concurrency 64 --conns 8 --count "$PAIR_LOAD_COUNT"
    pair "$round" set-64 cpu set --concurrency 64 --conns 8 --count "$PAIR_LOAD_COUNT"
    # The same writes on one connection, as tasks sharing one client send them.
    pair "$round" set-64-1conn cpu set --concurrency 64 --conns 1 --count "$PAIR_LOAD_COUNT"
    pair "$round" get-64 cpu get --concurrency 64 --conns 8 --count "$PAIR_GET_COUNT"
    pair "$round" mixed-64 cpu mixed --concurrency 64 --conns 8 --count "$PAIR_LOAD_COUNT"
    pair "$round" delete-64 cpu delete --concurrency 64 --conns 8 --count "$PAIR_LOAD_COUNT"
    pair "$round" get-1 cpu get --concurrency 1 --conns 1 --count "$ONE_COUNT"
    pair "$round" create-1 cpu create --concurrency 1 --conns 1 --count "$ONE_COUNT"
    pair "$round" lock - lock --count "$LOCK_COUNT"
    pair "$round" handoff-10 - handoff --waiters 10
    pair "$round" handoff-100 - handoff --waiters 100
    pair "$round" handoff-1000 - handoff --waiters 1000
    pair "$round" handoff-100-herd - handoff --waiters 100 --herd
    pair "$round" expiry - expiry --session-timeout-ms 4000 --rounds "$EXPIRY_ROUNDS"
    paired_stop
    for target in $order; do
        # Memory on a fresh server: RSS growth for BIG znodes of 32 bytes.
        start_fresh "$target"
        pid=$(cat "$WORK/$target/pid")
        run "$round" "$target" memory memory --count "$BIG" --server-pid "$pid"
        # Memory per idle session, then per watch, each on a fresh server too: a
        # server that has grown and freed memory reuses it without growing RSS.
        start_fresh "$target"
        pid=$(cat "$WORK/$target/pid")
        run "$round" "$target" idle-memory idle-memory --conns "$IDLE_CONNS" --server-pid "$pid"
        start_fresh "$target"
        pid=$(cat "$WORK/$target/pid")
        run "$round" "$target" watch-memory watch-memory --nodes "$WATCH_NODES" --watchers "$WATCH_SESSIONS" \
            --path-bytes "$WATCH_PATH_BYTES" --server-pid "$pid"
        # Recovery: a fresh server filled with BIG znodes, killed, restarted.
        start_fresh "$target"
        run "$round" "$target" recovery recovery --count "$BIG" --restart-cmd "$WORK/$target/restart.sh"
        stop "$target"
    done
}

# --- ZooKeeper's protocol ----------------------------------------------------
# One arbord serves both its ports, so its two protocols are measured on the
# same server; Apache ZooKeeper gets the same requests from the same two
# clients. Paired as the standalone part: all three sides up and warmed, each
# workload against every side back to back (the round's order flips which
# side goes first), each once both servers are quiet. Rows as long as the
# standalone part's (PAIR_LOAD_COUNT, PAIR_GET_COUNT), for the same reason.

# zkport_run ROUND SIDE CLIENT LABEL ARGS...: one workload through CLIENT
# (lean or crate) against SIDE: arbord's native port, arbord's ZooKeeper
# port, or ZooKeeper.
zkport_run() {
    local round=$1 side=$2 client=$3 label=$4 target server tag="" pid
    shift 4
    case $side in
    native) target=arbor server=127.0.0.1:$ARBOR_PORT ;;
    port) target=zookeeper server=127.0.0.1:$ARBOR_ZK_PORT tag=port- ;;
    zookeeper) target=zookeeper server=127.0.0.1:$ZK_PORT ;;
    esac
    if [ "$client" = crate ]; then tag=${tag}crate-; fi
    if [ "$side" = zookeeper ]; then pid=$(cat "$WORK/zookeeper/pid"); else pid=$(cat "$WORK/arbor/pid"); fi
    quiet_both
    record "$ZKPORT" "$round" "$target" "$tag$label" --target "$target" --zk-client "$client" \
        --server "$server" "$@" --server-pid "$pid"
}

zkport_workloads() {
    local round=$1 order=$2 sides client side
    paired_start "$order"
    warm_up zookeeper "127.0.0.1:$ARBOR_ZK_PORT"
    if [ "$order" = "arbor zookeeper" ]; then sides="native port zookeeper"; else sides="zookeeper port native"; fi
    for client in lean crate; do
        # The second load generator speaks ZooKeeper's protocol only.
        for side in $sides; do
            if [ "$client" = lean ] || [ "$side" != native ]; then
                zkport_run "$round" "$side" "$client" create-64 create --concurrency 64 --conns 8 --count "$PAIR_LOAD_COUNT"
            fi
        done
        for side in $sides; do
            if [ "$client" = lean ] || [ "$side" != native ]; then
                zkport_run "$round" "$side" "$client" get-64 get --concurrency 64 --conns 8 --count "$PAIR_GET_COUNT"
            fi
        done
    done
    paired_stop
}

# --- recipes -----------------------------------------------------------------
# Semaphore and queue on the standalone servers, paired as the standalone
# part. ZooKeeper's semaphore rows run Curator's protocol, the -kazoo rows
# kazoo's; its queue rows kazoo's LockingQueue. Semaphore: 4 permits, one
# client (the uncontended cost of a grant) and 16 clients (contended),
# holding for nothing or 2 ms (16 clients on 4 permits held 2 ms each: at
# best 2000 grants a second). Queue: 2 producers and 4 consumers with up to
# 100 items waiting (throughput), and 1 producer with 1 item at a time
# (put->take latency to idle consumers).

# recipe_pair ROUND LABEL SEMAPHORE ARGS...: one recipe workload against each
# server back to back, once both are quiet; with SEMAPHORE=semaphore,
# ZooKeeper runs it with Curator's protocol, then with kazoo's.
recipe_pair() {
    local round=$1 label=$2 semaphore=$3 target
    shift 3
    for target in $PAIR_ORDER; do
        quiet_both
        run_on "$RECIPES" "$round" "$target" "$label" "$@"
        if [ "$target" = zookeeper ] && [ "$semaphore" = semaphore ]; then
            quiet_both
            run_on "$RECIPES" "$round" "$target" "$label-kazoo" "$@" --zk-recipe kazoo
        fi
    done
}

recipe_workloads() {
    local round=$1 order=$2
    paired_start "$order"
    recipe_pair "$round" semaphore-4x1 semaphore semaphore --permits 4 --clients 1 --count "$SEM_COUNT"
    recipe_pair "$round" semaphore-4x16 semaphore semaphore --permits 4 --clients 16 --count "$SEM_COUNT"
    recipe_pair "$round" semaphore-4x16-hold semaphore semaphore --permits 4 --clients 16 --hold-us 2000 \
        --count "$SEM_COUNT"
    recipe_pair "$round" queue-2x4 - queue --producers 2 --consumers 4 --max-backlog 100 --items "$QUEUE_ITEMS"
    recipe_pair "$round" queue-1x4-idle - queue --producers 1 --consumers 4 --max-backlog 1 --items $((QUEUE_ITEMS / 3))
    paired_stop
}

# --- scale -------------------------------------------------------------------
# The standalone servers and start scripts, fresh for each size.

scale_run() { run_on "$SCALE" "$@"; }

# cpu_ticks PID...: the CPU time the processes have spent, in ticks (of
# 100 a second), user and system.
cpu_ticks() {
    local pid sum=0
    for pid in "$@"; do
        sum=$((sum + $(awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$pid/stat")))
    done
    echo "$sum"
}

# settle PID: waits (up to SETTLE_MAX_SECS) until the process spends under
# SETTLE_IDLE_TICKS ticks of CPU (of 100 a second) in a second. A fill of
# millions of znodes leaves work behind it in both servers (a snapshot of
# the tree being written, a JVM's collector and compiler), and the rows
# after it measure a tree of that size, not the tail of its fill.
SETTLE_IDLE_TICKS=5
SETTLE_MAX_SECS=120
settle() {
    local pid=$1 before after waited=0
    while [ "$waited" -lt "$SETTLE_MAX_SECS" ]; do
        before=$(cpu_ticks "$pid")
        sleep 1
        after=$(cpu_ticks "$pid")
        waited=$((waited + 1))
        if [ $((after - before)) -lt "$SETTLE_IDLE_TICKS" ]; then
            log "server $pid settled after ${waited} s"
            return 0
        fi
    done
    log "server $pid still busy after ${SETTLE_MAX_SECS} s; measuring anyway"
}

scale_workloads() {
    local round=$1 target=$2 n pid limit sizes=("${SCALE_ZNODES[@]}")
    # Smallest tree first on odd rounds, largest first on even ones: the disk's
    # speed drifts over the minutes a round takes (fsync p50 362 µs at the
    # start of a round and 207 µs at its end), and a fixed order handed that
    # drift to the sizes as if the tree's size had made it.
    if [ $((round % 2)) -eq 0 ]; then
        sizes=()
        for n in "${SCALE_ZNODES[@]}"; do sizes=("$n" "${sizes[@]}"); done
    fi
    for n in "${sizes[@]}"; do
        if [ "$target" = zookeeper ] && [ "$n" -gt "$SCALE_ZK_ZNODES_MAX" ]; then
            # Past what Debian's heap holds: the restart target alone, on the
            # heap a user holding N znodes has to give ZooKeeper.
            if [ "$n" -le "$SCALE_ZK_RESTART_MAX" ]; then
                export ZK_XMX=$SCALE_ZK_BIG_HEAP
                start_fresh "$target"
                scale_run "$round" "$target" "recovery-$n" recovery --count "$n" --parents "$SCALE_PARENTS" \
                    --restart-cmd "$WORK/$target/restart.sh"
                stop "$target"
                unset ZK_XMX
            fi
            continue
        fi
        # N znodes kept in place, then creates and single reads on top.
        start_fresh "$target"
        warm_up "$target" "127.0.0.1:$(port_of "$target")"
        pid=$(cat "$WORK/$target/pid")
        scale_run "$round" "$target" "znodes-$n" --keep memory --count "$n" --parents "$SCALE_PARENTS" --batch "$SCALE_FILL_BATCH" \
            --server-pid "$pid"
        for _ in $(seq "$SCALE_CREATE_RUNS"); do
            settle "$pid"
            scale_run "$round" "$target" "create-$n" create --concurrency 64 --conns 8 --count "$LOAD_COUNT" --server-pid "$pid"
        done
        scale_run "$round" "$target" "get-$n" get --concurrency 1 --conns 1 --count "$ONE_COUNT" --server-pid "$pid"
        start_fresh "$target"
        scale_run "$round" "$target" "recovery-$n" recovery --count "$n" --parents "$SCALE_PARENTS" \
            --restart-cmd "$WORK/$target/restart.sh"
    done
    for n in "${SCALE_CHILDREN[@]}"; do
        # Latency rows on a warm JIT, as the znode rows.
        start_fresh "$target"
        warm_up "$target" "127.0.0.1:$(port_of "$target")"
        scale_run "$round" "$target" "children-$n" children --children "$n" --count "$(scale_listings "$n")"
    done
    limit=$(ulimit -n)
    for n in "${SCALE_SESSIONS[@]}"; do
        # Both arbor-bench and the server hold one socket per session.
        if [ "$limit" != unlimited ] && [ "$limit" -lt $((n + 1024)) ]; then
            not_run "$SCALE" "$round" "$target" "sessions-$n" \
                "the open-files limit is $limit (hard $(ulimit -Hn)); $n sessions need $((n + 1024))"
            continue
        fi
        ARBOR_MAX_CONNECTIONS=$((n + 1024)) start_fresh "$target"
        pid=$(cat "$WORK/$target/pid")
        scale_run "$round" "$target" "sessions-$n" idle-memory --conns "$n" --server-pid "$pid"
    done
    start_fresh "$target"
    pid=$(cat "$WORK/$target/pid")
    scale_run "$round" "$target" "watches-$SCALE_WATCHES" watch-memory --nodes $((SCALE_WATCHES / SCALE_WATCHERS)) \
        --watchers "$SCALE_WATCHERS" --path-bytes "$SCALE_WATCH_PATH_BYTES" --server-pid "$pid"
    stop "$target"
}

# --- ensembles ---------------------------------------------------------------
# Member i of each ensemble has, under $WORK/ens-<target>/m<i>: start.sh
# (starts it in the background, output to server.log, pid to pid, returns at
# once), kill.sh (kill -9, returns once it is gone), its data directory and
# logs. $WORK/ens-<target>/start-member.sh N and kill-member.sh N run member
# N's: arbor-bench's failover calls them with the leader's number.

ens_client_port() { if [ "$1" = arbor ]; then echo $((ENS_ARBOR_PORT + $2 - 1)); else echo $((ENS_ZK_PORT + $2 - 1)); fi; }
ens_servers() {
    local i servers=()
    for i in "${MEMBERS[@]}"; do servers+=("127.0.0.1:$(ens_client_port "$1" "$i")"); done
    (IFS=,; echo "${servers[*]}")
}

# The command line of member $2 of $1's ensemble (the process itself).
ens_command() {
    local target=$1 i=$2 m=$WORK/ens-$1/m$2 j
    if [ "$target" = arbor ]; then
        printf '"%s" --data-dir "%s" --listen 127.0.0.1:%s --member-id %s' \
            "$ARBORD" "$m/data" $((ENS_ARBOR_PORT + i - 1)) "$i"
        for j in "${MEMBERS[@]}"; do
            printf ' --member %s=127.0.0.1:%s/127.0.0.1:%s' "$j" $((ENS_ARBOR_PORT + j - 1)) $((ENS_ARBOR_PEER_PORT + j - 1))
        done
        printf ' --max-connections-per-ip 4096'
    else
        printf '%s org.apache.zookeeper.server.quorum.QuorumPeerMain "%s"' "$(zk_java "$m")" "$m/conf/zoo.cfg"
    fi
}

write_ensemble_scripts() {
    local target dir m i j action
    for i in "${MEMBERS[@]}"; do
        m=$WORK/ens-zookeeper/m$i
        mkdir -p "$m/conf"
        {
            printf 'tickTime=2000\ninitLimit=10\nsyncLimit=5\n'
            printf 'dataDir=%s\nclientPort=%s\nclientPortAddress=127.0.0.1\n' "$m/data" $((ENS_ZK_PORT + i - 1))
            for j in "${MEMBERS[@]}"; do
                printf 'server.%s=127.0.0.1:%s:%s\n' "$j" $((ENS_ZK_QUORUM_PORT + j - 1)) $((ENS_ZK_ELECTION_PORT + j - 1))
            done
            printf 'admin.enableServer=false\n4lw.commands.whitelist=*\nforceSync=yes\nmaxClientCnxns=0\n'
        } >"$m/conf/zoo.cfg"
        cp "$ZK_LOG4J" "$m/conf/"
    done
    for target in arbor zookeeper; do
        dir=$WORK/ens-$target
        for i in "${MEMBERS[@]}"; do
            m=$dir/m$i
            mkdir -p "$m"
            # $! is the member itself: nohup execs it.
            cat >"$m/start.sh" <<EOF
#!/bin/sh
# Starts $target member $i in the background (output to server.log, pid to
# pid) and returns at once.
if [ -f "$m/pid" ] && state=\$(ps -o stat= -p "\$(cat "$m/pid")") && [ "\${state#*Z}" = "\$state" ]; then
    echo "$target member $i runs already (pid \$(cat "$m/pid"))" >&2
    exit 1
fi
nohup $(ens_command "$target" "$i") </dev/null >>"$m/server.log" 2>&1 &
echo \$! >"$m/pid"
EOF
            cat >"$m/kill.sh" <<EOF
#!/bin/sh
# kill -9 of $target member $i (a crash); returns once it is gone.
if [ ! -f "$m/pid" ]; then
    echo "$target member $i: no pid file" >&2
    exit 1
fi
pid=\$(cat "$m/pid")
kill -9 "\$pid" 2>/dev/null
# Gone: no such process, or a zombie (it holds no port or file any more).
while state=\$(ps -o stat= -p "\$pid"); do
    case \$state in *l*) ;; *Z*) break ;; esac
    sleep 0.01
done
rm -f "$m/pid"
EOF
            chmod +x "$m/start.sh" "$m/kill.sh"
        done
        for action in start kill; do
            cat >"$dir/$action-member.sh" <<EOF
#!/bin/sh
# $action-member.sh N: runs $action.sh of $target member N (${MEMBERS[*]}).
case \${1:-} in
'' | *[!0-9]*) echo "usage: \$0 MEMBER" >&2; exit 2 ;;
esac
if [ ! -x "$dir/m\$1/$action.sh" ]; then
    echo "$target has no member \$1" >&2
    exit 2
fi
exec "$dir/m\$1/$action.sh"
EOF
            chmod +x "$dir/$action-member.sh"
        done
    done
}

# The number of the leader if a majority of members name the same one, and
# every member has named one (Arbor: its log's latest "leader changed";
# ZooKeeper: `srvr` answers on all and exactly one says leader, the others
# follower).
ens_leader() {
    local target=$1 dir=$WORK/ens-$1 i m name names=() leader=""
    for i in "${MEMBERS[@]}"; do
        m=$dir/m$i
        if [ "$target" = arbor ]; then
            grep -q "arbord listening on" "$m/server.log" 2>/dev/null || return 1
            name=$( (grep -a "leader changed" "$m/server.log" 2>/dev/null || true) | tail -1 |
                sed -n 's/.*leader=Some(\([0-9]*\)).*/\1/p')
            [ -n "$name" ] || return 1
            names+=("$name")
        else
            case $(zk_mode "$(ens_client_port zookeeper "$i")") in
            leader)
                [ -z "$leader" ] || return 1
                leader=$i
                ;;
            follower) ;;
            *) return 1 ;;
            esac
        fi
    done
    if [ "$target" = arbor ]; then
        leader=$(printf '%s\n' "${names[@]}" | sort | uniq -c |
            awk -v need=$((${#MEMBERS[@]} / 2 + 1)) '$1 >= need {print $2}')
    fi
    [ -n "$leader" ] && echo "$leader"
}

ens_start_fresh() {
    local target=$1 dir=$WORK/ens-$1 i m started leader
    ens_stop "$target"
    for i in "${MEMBERS[@]}"; do
        m=$dir/m$i
        rm -rf "$m/data" "$m/server.log" "$m"/zookeeper.log*
        mkdir -p "$m/data"
        if [ "$target" = zookeeper ]; then echo "$i" >"$m/data/myid"; fi
    done
    started=$(now_ms)
    for i in "${MEMBERS[@]}"; do "$dir/m$i/start.sh"; done
    for _ in $(seq 1 1200); do
        if leader=$(ens_leader "$target"); then
            if [ "$target" = zookeeper ]; then
                for i in "${MEMBERS[@]}"; do check_zk_log "$dir/m$i"; done
            fi
            log "$target ensemble ready after $(since "$started"), member $leader leads"
            return 0
        fi
        for i in "${MEMBERS[@]}"; do
            running "$(cat "$dir/m$i/pid")" || { log "$target member $i died while starting"; break 2; }
        done
        sleep 0.1
    done
    log "$target ensemble did not form; the end of each member's log:"
    for i in "${MEMBERS[@]}"; do
        log "member $i:"
        tail -10 "$dir/m$i/server.log" >&2
        if [ -f "$dir/m$i/zookeeper.log" ]; then tail -10 "$dir/m$i/zookeeper.log" >&2; fi
    done
    exit 1
}

# ens_run ROUND TARGET LABEL ARGS...: one arbor-bench run against TARGET's
# ensemble (every member in --server), kept.
ens_run() {
    local round=$1 target=$2 label=$3
    shift 3
    record "$ENSEMBLE" "$round" "$target" "$label" --target "$target" --server "$(ens_servers "$target")" "$@"
}

# quiet_ensembles: quiet, for every member of both ensembles.
quiet_ensembles() {
    # shellcheck disable=SC2046 # one pid per member, split on purpose
    quiet $(cat "$WORK"/ens-arbor/m*/pid "$WORK"/ens-zookeeper/m*/pid)
}

# ens_pair ROUND LABEL ARGS...: one workload against both ensembles, one
# right after the other in the round's order, each once every member of
# both is quiet; the measured ensemble's members' CPU is counted.
ens_pair() {
    local round=$1 label=$2 target
    shift 2
    for target in $PAIR_ORDER; do
        quiet_ensembles
        ens_run "$round" "$target" "$label" "$@" --server-pid "$(cat "$WORK/ens-$target"/m*/pid | paste -sd, -)"
    done
}

# The ensemble part's round, paired as the standalone part: both ensembles
# up and warmed, each workload against one, then straight away the other.
# Three JVMs take longer to warm than one: after one warm-up a ZooKeeper
# ensemble's sets at 64 in flight still rose from 13.3 k/s to 18.5 k/s over
# the next four runs (creates 12 k -> 14 k); after three it gave 17.8 k/s at
# once. A standalone ZooKeeper is at its plateau after one (sets 58-65 k/s
# over five runs).
ENS_WARM_UPS=${ENS_WARM_UPS:-3}
ensemble_workloads() {
    local round=$1 order=$2 target warm
    for target in $order; do ens_start_fresh "$target"; done
    for target in $order; do
        for warm in $(seq 1 "$ENS_WARM_UPS"); do
            log "round $round $target warm-up $warm of $ENS_WARM_UPS"
            warm_up "$target" "$(ens_servers "$target")"
        done
    done
    PAIR_ORDER=$order
    PAIRED=1
    ens_pair "$round" ens-create-64 create --concurrency 64 --conns 9 --count "$PAIR_LOAD_COUNT"
    ens_pair "$round" ens-set-64 set --concurrency 64 --conns 9 --count "$PAIR_LOAD_COUNT"
    ens_pair "$round" ens-get-64 get --concurrency 64 --conns 9 --count "$PAIR_GET_COUNT"
    # kill -9 of the leader, KILLS times; {member} is its number in --server.
    for target in $order; do
        quiet_ensembles
        ens_run "$round" "$target" ens-failover failover --kills "$KILLS" \
            --kill-cmd "'$WORK/ens-$target/kill-member.sh' {member}" \
            --start-cmd "'$WORK/ens-$target/start-member.sh' {member}"
    done
    PAIRED=
    for target in $order; do ens_stop "$target"; done
}

# --- the runs ----------------------------------------------------------------

# each_round FILE ROUNDS WORKLOADS [paired]: ROUNDS rounds into FILE, each
# running `WORKLOADS ROUND TARGET` for both targets (which goes first
# alternates) between two probes of the disk's raw fsync; with `paired`,
# `WORKLOADS ROUND ORDER` once, which pairs the targets itself.
each_round() {
    local file=$1 rounds=$2 workloads=$3 paired=${4:-} round order target
    for round in $(seq 1 "$rounds"); do
        record "$file" "$round" disk fsync fsync-probe --dir "$WORK" --count 2000
        if [ $((round % 2)) = 1 ]; then order="arbor zookeeper"; else order="zookeeper arbor"; fi
        if [ "$paired" = paired ]; then
            "$workloads" "$round" "$order"
        else
            for target in $order; do
                "$workloads" "$round" "$target"
            done
        fi
        record "$file" "$round" disk fsync-after fsync-probe --dir "$WORK" --count 2000
    done
}

# begin_results FILE: empties a part's results and starts them with the
# machine they are measured on (a part kept in bench/results may be rerun
# on another machine than the rest).
begin_results() {
    printf '{"machine":{"cpu":"%s","cores":%s,"mem_gib":%s,"kernel":"%s","fs":"%s"},"commit":"%s","started":"%s","quick":%s}\n' \
        "$CPU_MODEL" "$(nproc)" "$MEM_GIB" "$(uname -r)" "$FS_TYPE" "$COMMIT" \
        "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$([ "$QUICK" = 1 ] && echo true || echo false)" >"$1"
}

mkdir -p "$WORK" "$RESULTS_DIR"
CPU_MODEL=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)
MEM_GIB=$(free -g | awk '/^Mem:/ {print $2}')
FS_TYPE=$(df -T "$WORK" | awk 'NR == 2 {print $2}')
if part standalone; then
    stop arbor
    stop zookeeper
    rm -rf "$WORK/arbor" "$WORK/zookeeper" "$WORK/bench.log"
    begin_results "$RESULTS"
    BENCH_LOG=$WORK/bench.log
    write_scripts
    each_round "$RESULTS" "$ROUNDS" workloads paired
fi

if part ensemble; then
    ens_stop arbor
    ens_stop zookeeper
    rm -rf "$WORK/ens-arbor" "$WORK/ens-zookeeper" "$WORK/ensemble-bench.log"
    begin_results "$ENSEMBLE"
    BENCH_LOG=$WORK/ensemble-bench.log
    write_ensemble_scripts
    each_round "$ENSEMBLE" "$ROUNDS" ensemble_workloads paired
fi

# again_on_standalone FILE LOG ROUNDS WORKLOADS [paired]: a part that runs on
# the standalone servers' scripts (kept from the standalone part), into FILE.
again_on_standalone() {
    stop arbor
    stop zookeeper
    rm -rf "$2"
    begin_results "$1"
    BENCH_LOG=$2
    write_scripts
    each_round "$1" "$3" "$4" "${5:-}"
}
if part scale; then again_on_standalone "$SCALE" "$WORK/scale-bench.log" "$SCALE_ROUNDS" scale_workloads; fi
if part zkport; then again_on_standalone "$ZKPORT" "$WORK/zkport-bench.log" "$ROUNDS" zkport_workloads paired; fi
if part recipes; then again_on_standalone "$RECIPES" "$WORK/recipes-bench.log" "$ROUNDS" recipe_workloads paired; fi

# --- report ------------------------------------------------------------------

ARBOR_VERSION=$("$ARBORD" --version | awk '{print $2}')
RUSTC=$(rustc --version)
JAVA=$(java -version 2>&1 | head -1)
ENS_ARBOR_SERVERS=$(ens_servers arbor)
ENS_ZK_SERVERS=$(ens_servers zookeeper)
# report.py says which parts this run measured: none, when only reporting.
if [ "$REPORT_ONLY" = 1 ]; then PART=none; fi
export RESULTS ENSEMBLE SCALE ZKPORT RECIPES OUT ROUNDS QUICK PART ZK_VERSION ARBOR_VERSION COMMIT CPU_MODEL MEM_GIB FS_TYPE RUSTC JAVA
export ARBOR_PORT ARBOR_ZK_PORT ARBOR_ADMIN_PORT ARBOR_MAX_CONNECTIONS ZK_PORT ENS_ARBOR_PORT ENS_ARBOR_PEER_PORT ENS_ZK_PORT ENS_ZK_QUORUM_PORT ENS_ZK_ELECTION_PORT
export ENS_ARBOR_SERVERS ENS_ZK_SERVERS
export ENS_WARM_UPS STEAL_MAX_PERCENT STEAL_RETRIES SETTLE_IDLE_TICKS SETTLE_MAX_SECS QUIET_TICKS QUIET_WINDOW_SECS QUIET_MAX_SECS
python3 "$ROOT/bench/report.py"
log "wrote $OUT"
