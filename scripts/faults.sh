#!/usr/bin/env bash
# The long run of the real-process fault suite (faults/): Arbor's ensemble
# under partitions, pauses and kill -9, every promise checked, beside the
# controls that show the checks mean something. Runs as root (network
# namespaces). About 3 minutes a seed.
#
#   scripts/faults.sh            # 20 seeds against Arbor, the controls, a summary
#   scripts/faults.sh 5          # 5 seeds
#   ZK_SEEDS=0 scripts/faults.sh # skip Apache ZooKeeper
#   ARBORD=/path/to/arbord scripts/faults.sh   # another build (one before a fix, say)
#
# Writes every run's records (history, schedule, events, report) under
# target/faults/, and the summaries to target/faults/summary-*.txt.
set -euo pipefail
cd "$(dirname "$0")/.."

SEEDS=${1:-20}
ZK_SEEDS=${ZK_SEEDS:-5}
FAULTS_FOR=${FAULTS_FOR:-120}
OUT=target/faults
ARBORD=${ARBORD:-target/release/arbord}

cargo build --release --locked -p arbor-server -p arbor-faults
if [ "$ZK_SEEDS" -gt 0 ] && [ ! -f /usr/share/java/zookeeper.jar ]; then
    echo "installing Debian's zookeeper package (the control)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq zookeeper >/dev/null
fi
mkdir -p "$OUT"
suite() { ./target/release/arbor-faults --dir "$OUT" "$@"; }

status=0
echo "== Arbor: $SEEDS seeds ($ARBORD)"
suite --arbord "$ARBORD" --seeds "$SEEDS" --faults-for "$FAULTS_FOR" | tee "$OUT/summary-arbor.txt" || status=1

echo "== Controls: planted faults the checks must catch"
for plant in early-expiry orphan-lock-node stale-read dropped-child; do
    suite --arbord "$ARBORD" --seeds 1 --faults-for 30 --plant "$plant" \
        | tee "$OUT/summary-plant-$plant.txt" || status=1
done

if [ "$ZK_SEEDS" -gt 0 ]; then
    for timing in shipped tuned; do
        echo "== Control: Apache ZooKeeper ($timing timing), $ZK_SEEDS seeds"
        suite --target zookeeper --zk-timing "$timing" --seeds "$ZK_SEEDS" --faults-for "$FAULTS_FOR" \
            | tee "$OUT/summary-zookeeper-$timing.txt" || status=1
    done
fi
exit $status
