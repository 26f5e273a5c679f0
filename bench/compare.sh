#!/usr/bin/env bash
# Arbor against Apache ZooKeeper 3.8 on this machine, in one run, and
# BENCHMARKS.md from it.
#
#   bench/compare.sh                 # ROUNDS=3, full sizes (about half an hour)
#   QUICK=1 ROUNDS=1 bench/compare.sh   # small counts: checks the script in minutes
#
# Both servers run on 127.0.0.1 with fsync on, tick 2000 ms, fresh data
# directories on the same filesystem (under target/bench-compare), and are
# measured in alternation: each round runs every workload against one, then
# the other, and the order flips every round (A B, B A, ...). Every round
# also probes the disk's raw fsync latency, the floor under every write.
# Each workload prints one JSON line (arbor-bench); the table in
# BENCHMARKS.md holds the median over rounds and the ratio Arbor/ZooKeeper.
set -euo pipefail

ROUNDS=${ROUNDS:-3}
QUICK=${QUICK:-0}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/BENCHMARKS.md}
WORK=$ROOT/target/bench-compare
ARBOR_PORT=${ARBOR_PORT:-7581}
ZK_PORT=${ZK_PORT:-2581}
RESULTS=$WORK/results.jsonl

if [ "$QUICK" = 1 ]; then
    LOAD_COUNT=5000 GET_COUNT=20000 ONE_COUNT=2000 LOCK_COUNT=200 BIG=20000 EXPIRY_ROUNDS=1
else
    LOAD_COUNT=50000 GET_COUNT=300000 ONE_COUNT=10000 LOCK_COUNT=2000 BIG=1000000 EXPIRY_ROUNDS=3
fi

log() { printf '%s %s\n' "$(date +%T)" "$*" >&2; }

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

# --- build -------------------------------------------------------------------

log "building arbord and arbor-bench (release)"
(cd "$ROOT" && cargo build --release --locked -p arbor-server -p arbor-bench >&2)
ARBORD=$ROOT/target/release/arbord
BENCH=$ROOT/target/release/arbor-bench

rm -rf "$WORK"
mkdir -p "$WORK"
: >"$RESULTS"

# --- servers -----------------------------------------------------------------
# Each server gets a start script (reused by the recovery workload's restart
# command), a pid file and a log, all under $WORK/<target>.

write_scripts() {
    local dir=$WORK/arbor
    mkdir -p "$dir"
    cat >"$dir/start.sh" <<EOF
#!/bin/sh
exec "$ARBORD" --data-dir "$dir/data" --listen 127.0.0.1:$ARBOR_PORT --max-connections-per-ip 4096 </dev/null >>"$dir/server.log" 2>&1
EOF
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
    [ -f /etc/zookeeper/conf/log4j.properties ] && cp /etc/zookeeper/conf/log4j.properties "$dir/conf/"
    cat >"$dir/start.sh" <<EOF
#!/bin/sh
exec java -Xmx1000m -cp "$dir/conf:$ZK_CP" org.apache.zookeeper.server.ZooKeeperServerMain "$dir/conf/zoo.cfg" </dev/null >>"$dir/server.log" 2>&1
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
while kill -0 "\$pid" 2>/dev/null; do sleep 0.01; done
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
        # `ruok` answers before the data is loaded; `srvr` says standalone after.
        (exec 3<>"/dev/tcp/127.0.0.1/$ZK_PORT" && printf srvr >&3 && timeout 2 cat <&3) 2>/dev/null |
            grep -q "Mode: standalone"
    fi
}

start_fresh() {
    local target=$1 dir=$WORK/$1
    stop "$target"
    rm -rf "$dir/data" "$dir/server.log"
    mkdir -p "$dir/data"
    nohup "$dir/start.sh" >/dev/null 2>&1 &
    echo $! >"$dir/pid"
    for _ in $(seq 1 600); do
        ready "$target" && return 0
        sleep 0.1
    done
    log "$target did not start; its log:"
    tail -20 "$dir/server.log" >&2
    exit 1
}

stop() {
    local pid_file=$WORK/$1/pid pid
    [ -f "$pid_file" ] || return 0
    pid=$(cat "$pid_file")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$pid_file"
}

trap 'stop arbor; stop zookeeper' EXIT

# --- workloads ---------------------------------------------------------------

# run ROUND TARGET LABEL ARGS...: one arbor-bench run, its JSON line kept.
run() {
    local round=$1 target=$2 label=$3 line
    shift 3
    log "round $round $target $label"
    if [ "$target" = disk ]; then
        line=$("$BENCH" "$@" 2>>"$WORK/bench.log")
    else
        line=$("$BENCH" --target "$target" --server "127.0.0.1:$(port_of "$target")" "$@" 2>>"$WORK/bench.log")
    fi
    printf '{"round":%s,"label":"%s","result":%s}\n' "$round" "$label" "$line" >>"$RESULTS"
}

workloads() {
    local round=$1 target=$2 pid
    start_fresh "$target"
    # Warm-up, not recorded: the JVM's JIT (and both servers' caches) sees
    # reads, writes, creates and deletes before anything is measured.
    for warm in "mixed --secs 4" "create --secs 3" "delete --count 20000"; do
        # shellcheck disable=SC2086 # the workload and its flags, split on purpose
        "$BENCH" --target "$target" --server "127.0.0.1:$(port_of "$target")" $warm >/dev/null 2>>"$WORK/bench.log"
    done
    run "$round" "$target" create-64 create --concurrency 64 --conns 8 --count "$LOAD_COUNT"
    run "$round" "$target" set-64 set --concurrency 64 --conns 8 --count "$LOAD_COUNT"
    run "$round" "$target" get-64 get --concurrency 64 --conns 8 --count "$GET_COUNT"
    run "$round" "$target" mixed-64 mixed --concurrency 64 --conns 8 --count "$LOAD_COUNT"
    run "$round" "$target" delete-64 delete --concurrency 64 --conns 8 --count "$LOAD_COUNT"
    run "$round" "$target" get-1 get --concurrency 1 --conns 1 --count "$ONE_COUNT"
    run "$round" "$target" create-1 create --concurrency 1 --conns 1 --count "$ONE_COUNT"
    run "$round" "$target" lock lock --count "$LOCK_COUNT"
    run "$round" "$target" handoff-10 handoff --waiters 10
    run "$round" "$target" handoff-100 handoff --waiters 100
    run "$round" "$target" handoff-1000 handoff --waiters 1000
    run "$round" "$target" handoff-100-herd handoff --waiters 100 --herd
    run "$round" "$target" expiry expiry --session-timeout-ms 4000 --rounds "$EXPIRY_ROUNDS"
    # Memory on a fresh server: RSS growth for BIG znodes of 32 bytes.
    start_fresh "$target"
    pid=$(cat "$WORK/$target/pid")
    run "$round" "$target" memory memory --count "$BIG" --server-pid "$pid"
    # Recovery: a fresh server filled with BIG znodes, killed, restarted.
    start_fresh "$target"
    run "$round" "$target" recovery recovery --count "$BIG" --restart-cmd "$WORK/$target/restart.sh"
    stop "$target"
}

write_scripts
for round in $(seq 1 "$ROUNDS"); do
    run "$round" disk fsync fsync-probe --dir "$WORK" --count 2000
    if [ $((round % 2)) = 1 ]; then order="arbor zookeeper"; else order="zookeeper arbor"; fi
    for target in $order; do
        workloads "$round" "$target"
    done
    run "$round" disk fsync-after fsync-probe --dir "$WORK" --count 2000
done

# --- report ------------------------------------------------------------------

ARBOR_VERSION=$("$ARBORD" --version | awk '{print $2}')
COMMIT=$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo unknown)
CPU_MODEL=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)
MEM_GIB=$(free -g | awk '/^Mem:/ {print $2}')
FS_TYPE=$(df -T "$WORK" | awk 'NR == 2 {print $2}')
RUSTC=$(rustc --version)
JAVA=$(java -version 2>&1 | head -1)
export RESULTS OUT ROUNDS QUICK ZK_VERSION ARBOR_VERSION COMMIT CPU_MODEL MEM_GIB FS_TYPE RUSTC JAVA
python3 "$ROOT/bench/report.py"
log "wrote $OUT"
