#!/usr/bin/env bash
# Runs every fuzz target (fuzz/, cargo-fuzz on nightly) for SECONDS each
# (default 60), one after another: the machine's cores are better spent on
# one fuzzer at a time than on several sharing them.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#
# First it writes the seed corpus (real traffic and files from a real
# server, made by server/tests/fuzz_smoke.rs) into fuzz/corpus/<target>/;
# what a run adds to the corpus stays there for the next one. A crash,
# leak, timeout or out-of-memory input is kept in fuzz/artifacts/<target>/;
# replay one, in fuzz/, with
#   cargo +nightly fuzz run -s none --target-dir target/none <target> <file>
# Each run's libFuzzer output is in fuzz/logs/<target>.log, and a summary
# line per target is printed at the end. Exits non-zero if any target failed.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${1:-60}"
shift || true
all_targets=(frames client_message server_message handshake txnlog snapshot certificate zk_request zk_reply)
if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    targets=("${all_targets[@]}")
fi

# Limits for each run: memory (an input that makes a decoder allocate past
# this is a finding, not noise) and time per input. A single allocation
# over 64 MiB aborts whatever the sanitizer (fuzz/src/lib.rs).
rss_limit_mb=2048
timeout_seconds=10

# No sanitizer by default: the code under test is safe Rust, and
# AddressSanitizer (which finds memory errors only in unsafe code, here
# that of dependencies) cut the exec rate 4-12x. Panics, overflow (cargo
# fuzz builds with debug assertions), timeouts, RSS and the allocation cap
# are caught without it. FUZZ_SANITIZER=address runs under ASan.
sanitizer="${FUZZ_SANITIZER:-none}"

if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi

ARBOR_FUZZ_CORPUS="$PWD/fuzz/corpus" \
    cargo test -p arbor-server --locked --test fuzz_smoke -- --ignored write_seed_corpus

mkdir -p fuzz/logs
summary=()
failed=0
for target in "${targets[@]}"; do
    log="fuzz/logs/$target.log"
    echo "== $target: ${seconds}s (log: $log)"
    status=0
    (cd fuzz && cargo +nightly fuzz run --sanitizer "$sanitizer" \
        --target-dir "target/$sanitizer" "$target" -- \
        -max_total_time="$seconds" -rss_limit_mb="$rss_limit_mb" \
        -timeout="$timeout_seconds" -print_final_stats=1) >"$log" 2>&1 || status=$?
    # libFuzzer's last status line and final stats, e.g.
    # "#1234 DONE cov: 900 ft: 3000 corp: 400/80Kb ..." and "stat::...: N".
    done_line=$(grep -E '^#[0-9]+' "$log" | tail -n 1 || true)
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
    rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -n 1)
    if [ "$status" -ne 0 ]; then
        failed=1
        result="FAILED (exit $status; see $log and fuzz/artifacts/$target/)"
    else
        result="ok"
    fi
    summary+=("$target ($sanitizer): ${seconds}s, ${execs:-?} execs, ${rate:-?}/s, peak ${rss:-?} MB; ${done_line:-no status}; $result")
done

echo
echo "== summary"
printf '%s\n' "${summary[@]}"
exit "$failed"
