#!/usr/bin/env bash
# A second load generator for ZooKeeper (its own Java client; see
# bench/zk_java_load/ZkLoad.java), to check arbor-bench's ZooKeeper figures.
# Start a ZooKeeper server first (bench/compare.sh's start script will do:
# target/bench-compare/zookeeper/start.sh), then:
#
#   bench/zk_java_load.sh 127.0.0.1:2581 get 64 8 300000
#
# Needs Debian's zookeeper package (the client jars) and a JDK.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=$ROOT/target/zk-java-load
CP=/usr/share/java/zookeeper.jar:/usr/share/java/zookeeper-jute.jar:/usr/share/java/slf4j-api.jar:/usr/share/java/slf4j-nop.jar
for jar in ${CP//:/ }; do
    [ -f "$jar" ] || { echo "zk_java_load.sh: $jar is missing (apt-get install zookeeper)" >&2; exit 1; }
done
mkdir -p "$OUT"
if [ ! -f "$OUT/ZkLoad.class" ] || [ "$ROOT/bench/zk_java_load/ZkLoad.java" -nt "$OUT/ZkLoad.class" ]; then
    javac -d "$OUT" -cp "$CP" "$ROOT/bench/zk_java_load/ZkLoad.java"
fi
exec java -Xmx1000m -cp "$OUT:$CP" ZkLoad "$@"
