#!/usr/bin/env bash
# A 3-member Arbor ensemble on this machine, for trying it out:
#
#   ./scripts/ensemble.sh up       build (release) and start members 1-3
#   ./scripts/ensemble.sh status   which members run, who leads (arbor cluster status)
#   ./scripts/ensemble.sh kill N   kill -9 member N (to watch a failover)
#   ./scripts/ensemble.sh start N  start member N again
#   ./scripts/ensemble.sh down     stop every member (SIGTERM)
#
# Member N serves clients on 127.0.0.1:7N81 and peers on 127.0.0.1:7N91
# (N = 2, 3, 4, clear of a standalone server's 7181); data and logs go under
# $ARBOR_ENSEMBLE_DIR (default ./arbor-ensemble). Clients take every member:
#   arbor --server 127.0.0.1:7281,127.0.0.1:7381,127.0.0.1:7481 ls /
set -euo pipefail
cd "$(dirname "$0")/.."

DIR=${ARBOR_ENSEMBLE_DIR:-./arbor-ensemble}
IDS=(1 2 3)
client_addr() { echo "127.0.0.1:7$(($1 + 1))81"; }
peer_addr() { echo "127.0.0.1:7$(($1 + 1))91"; }
MEMBERS=()
for id in "${IDS[@]}"; do
    MEMBERS+=(--member "$id=$(client_addr "$id")/$(peer_addr "$id")")
done
SERVERS=$(for id in "${IDS[@]}"; do client_addr "$id"; done | paste -sd, -)

# Alive, and not a zombie waiting to be reaped (members outlive this script).
running() {
    [[ -f "$DIR/$1.pid" ]] || return 1
    local state
    state=$(ps -o stat= -p "$(cat "$DIR/$1.pid")" 2>/dev/null) || return 1
    [[ -n $state && $state != Z* ]]
}

start() {
    local id=$1
    if running "$id"; then
        echo "member $id already runs (pid $(cat "$DIR/$id.pid"))"
        return
    fi
    mkdir -p "$DIR/$id"
    nohup target/release/arbord --member-id "$id" "${MEMBERS[@]}" \
        --data-dir "$DIR/$id" >>"$DIR/$id.log" 2>&1 &
    echo $! >"$DIR/$id.pid"
    for _ in $(seq 100); do
        grep -q "arbord listening on $(client_addr "$id")" "$DIR/$id.log" && break
        running "$id" || { echo "member $id did not start; see $DIR/$id.log" >&2; exit 1; }
        sleep 0.1
    done
    echo "member $id: clients $(client_addr "$id"), peers $(peer_addr "$id"), pid $(cat "$DIR/$id.pid")"
}

case "${1:-}" in
up)
    cargo build --release -q -p arbor-server -p arbor-cli
    for id in "${IDS[@]}"; do start "$id"; done
    echo "clients: arbor --server $SERVERS ..."
    ;;
start)
    start "${2:?which member}"
    ;;
kill)
    id=${2:?which member}
    running "$id" && kill -9 "$(cat "$DIR/$id.pid")" && echo "member $id killed"
    ;;
down)
    for id in "${IDS[@]}"; do
        if running "$id"; then kill -TERM "$(cat "$DIR/$id.pid")"; fi
    done
    for id in "${IDS[@]}"; do
        while running "$id"; do sleep 0.1; done
        rm -f "$DIR/$id.pid"
    done
    echo "stopped"
    ;;
status)
    for id in "${IDS[@]}"; do
        if running "$id"; then
            leader=$( (grep -a "leader changed" "$DIR/$id.log" || true) | tail -1 |
                sed -n 's/.*leader=\([^ ]*\).*term=\([0-9]*\).*/leader \1, term \2/p')
            zxid=$( (target/release/arbor --server "$(client_addr "$id")" --timeout 2s version 2>/dev/null || true) |
                sed -n 's/.*last zxid //p')
            echo "member $id: up (pid $(cat "$DIR/$id.pid")), ${leader:-no leader yet}, last zxid ${zxid:-?}"
        else
            echo "member $id: down"
        fi
    done
    target/release/arbor --server "$SERVERS" --timeout 2s cluster status || true
    ;;
*)
    sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
