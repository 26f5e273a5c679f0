#!/usr/bin/env bash
# The one command that checks everything: formatting, lints, every test.
# Tests start real `arbord` processes on 127.0.0.1 ephemeral ports; nothing
# else needs to be running.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
