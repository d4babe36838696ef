#!/usr/bin/env bash
# Runs every cargo-fuzz target (tests/fuzz/fuzz_targets/) for SECONDS each (default 30), with
# debug assertions (integer overflow panics) and AddressSanitizer, starting from the committed
# corpus in tests/fuzz/corpus/<target> (read only: new inputs go to a scratch directory).
# Prints the executions each target reached; fails on the first crash, leaving the input in
# tests/fuzz/artifacts/<target>/ (replay it with `cargo +nightly fuzz run <target> <file>`).
# Needs the nightly toolchain and cargo-fuzz (tests/ci.sh installs both).
#
# Usage: tests/fuzz.sh [SECONDS] [TARGET...]
#   FUZZ_CORPUS_OUT=DIR keeps the inputs each run found in DIR/<target> (to merge into the
#   committed corpus with `cargo +nightly fuzz cmin`); by default they are thrown away.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/fuzz"

SECONDS_PER_TARGET="${1:-30}"
shift || true
if [ "$#" -gt 0 ]; then
    TARGETS=("$@")
else
    mapfile -t TARGETS < <(cargo +nightly fuzz list)
fi

FLAGS=(--debug-assertions)
echo "+ cargo +nightly fuzz build ${FLAGS[*]}"
cargo +nightly fuzz build "${FLAGS[@]}"

SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT
OUT="${FUZZ_CORPUS_OUT:-$SCRATCH}"
declare -a SUMMARY
for t in "${TARGETS[@]}"; do
    mkdir -p "$OUT/$t"
    log="$SCRATCH/$t.log"
    echo "+ fuzz $t for ${SECONDS_PER_TARGET}s"
    # -rss_limit_mb: an input that makes a reader allocate gigabytes is a finding, not a pass.
    if ! cargo +nightly fuzz run "${FLAGS[@]}" "$t" "$OUT/$t" "corpus/$t" -- \
        -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
        -print_final_stats=1 >"$log" 2>&1; then
        tail -n 60 "$log"
        echo "fuzz target $t FAILED: the input is in tests/fuzz/artifacts/$t/" >&2
        exit 1
    fi
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | awk '{print $2}')
    SUMMARY+=("$(printf '%-14s %12s execs  %6s edges' "$t" "${runs:-?}" "${cov:-?}")")
done
echo
echo "fuzz targets, ${SECONDS_PER_TARGET}s each:"
printf '  %s\n' "${SUMMARY[@]}"
