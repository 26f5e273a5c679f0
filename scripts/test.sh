#!/usr/bin/env bash
# The one command that checks everything: formatting, lints, every test.
# Tests start real `arbord` processes on 127.0.0.1 ephemeral ports; nothing
# else needs to be running. The fault suite's tests (faults/: a short run of
# partitions, pauses and kill -9 against members in network namespaces, and
# an Apache ZooKeeper ensemble as a control) need root, iproute2 and Debian's
# zookeeper package, which .ci/run installs.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
