#!/usr/bin/env bash
# The real-GPU run. CI has no GPU; this is for any machine that has one (NVIDIA, AMD, Intel,
# Apple through wgpu; NVIDIA also through the `cuda` feature). In one command it builds, then
# runs on the GPU it finds, and writes one report (device name, every test's result, figures):
#
#   - the wgpu parity suite, the llama and GRU golden tests and the other GPU tests, on the
#     native driver (WGPU_BACKEND picks it; Vulkan by default on Linux);
#   - with the `cuda` feature (when nvidia-smi answers, or GPU_REAL_CUDA=1): the same tests with
#     the CUDA device added to every backend matrix, and the CUDA parity and stability tests;
#   - `kernels parity` on each GPU backend, `kernels bench --json` (matmul 128..4096, norms,
#     attention, llama rows) and `kernels bench llama` on a stories15M-shaped random llama, on
#     the CPU and each GPU backend.
#
# Usage (from the repository root):
#   tests/gpu-real.sh                    build with cargo and run here
#   tests/gpu-real.sh --bundle DIR       build only: the binaries, a manifest and the llama
#                                        checkpoint script into DIR (for a GPU machine without
#                                        a Rust toolchain)
#   KERNELS_PREBUILT=DIR tests/gpu-real.sh   run a bundle's binaries (no cargo needed)
#
# Environment: GPU_REAL_OUT (report folder, default target/gpu-real), GPU_REAL_TEST_TIMEOUT
# (seconds per test binary, default 300), GPU_REAL_MODEL (a llama
# directory to bench; default: written by make_llama.py, which needs torch and transformers),
# GPU_REAL_CUDA (1 or 0: force the cuda build on or off), GPU_REAL_PARTS (`tests`, `bench` or
# `tests,bench`, the default: which halves to run; the report of a part is appended), PEAK_GFLOPS (e.g. `wgpu=66900,cuda=66900`
# for the GFLOPS-over-peak column; a few NVIDIA data-center cards are known below).
# Exit status: 0 when every test passed, 1 otherwise; the report says which.

set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

have() { command -v "$1" >/dev/null 2>&1; }

want_cuda() {
    case "${GPU_REAL_CUDA:-auto}" in
        1) return 0 ;;
        0) return 1 ;;
        *) have nvidia-smi && nvidia-smi -L >/dev/null 2>&1 ;;
    esac
}

# The checkpoint script: in a bundle, else the peers' folder beside the checkout.
make_llama_script() {
    for f in "${KERNELS_PREBUILT:-/nonexistent}/make_llama.py" "$ROOT/../shared/peers/make_llama.py"; do
        [ -f "$f" ] && { echo "$f"; return 0; }
    done
    return 1
}

# --bundle DIR: release binaries (stripped), a manifest `name<TAB>package dir<TAB>binary`, the
# checkout's path (test fixtures are found through the path compiled in) and the script.
bundle() {
    local dir=$1 features=() pkgs=(-p kernels-gpu -p kernels-tests)
    mkdir -p "$dir/bin"
    dir=$(cd "$dir" && pwd)
    if want_cuda; then features=(--features kernels-gpu/cuda,kernels-tests/cuda); fi
    echo "gpu-real: building (cuda: $([ ${#features[@]} -gt 0 ] && echo yes || echo no))" >&2
    cargo build --release -p native-cli ${features:+--features native-cli/cuda} || return 1
    cargo test --release "${pkgs[@]}" "${features[@]}" --no-run --message-format=json \
        >"$dir/cargo.json" || return 1
    cp target/release/kernels "$dir/bin/kernels"
    python3 - "$dir" <<'PY' || return 1
import json, os, shutil, sys
d = sys.argv[1]
rows = []
for line in open(os.path.join(d, "cargo.json")):
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable") or not m["profile"]["test"]:
        continue
    pkg = m["package_id"].split("#")[0].rsplit("/", 1)[-1].split("@")[0]
    kind = m["target"]["kind"][0]
    name = f'{pkg}-{m["target"]["name"] if kind != "lib" else "lib"}'.replace("_", "-")
    pkg_dir = os.path.dirname(m["manifest_path"])
    shutil.copy(m["executable"], os.path.join(d, "bin", name))
    rows.append(f"{name}\t{pkg_dir}\tbin/{name}")
open(os.path.join(d, "manifest.tsv"), "w").write("\n".join(sorted(rows)) + "\n")
PY
    rm -f "$dir/cargo.json"
    if have strip; then strip "$dir"/bin/* 2>/dev/null || true; fi
    echo "$ROOT" >"$dir/root"
    # The commit the binaries were built from (a copied checkout's .git can be stale).
    local dirty=""
    [ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null)" ] && dirty=" plus uncommitted changes"
    echo "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$dirty" >"$dir/commit"
    local s
    if s=$(make_llama_script); then cp "$s" "$dir/make_llama.py"; fi
    du -sh "$dir" >&2
}

if [ "${1:-}" = "--bundle" ]; then
    [ -n "${2:-}" ] || { echo "usage: tests/gpu-real.sh --bundle DIR" >&2; exit 2; }
    bundle "$2"
    exit $?
fi

OUT=${GPU_REAL_OUT:-$ROOT/target/gpu-real}
mkdir -p "$OUT"
BUNDLE=${KERNELS_PREBUILT:-}
if [ -z "$BUNDLE" ]; then
    BUNDLE=$OUT/bundle
    bundle "$BUNDLE" || { echo "gpu-real: build failed" >&2; exit 1; }
fi
BUNDLE=$(cd "$BUNDLE" && pwd)
KERNELS=$BUNDLE/bin/kernels
# Test binaries find their fixtures under the path they were built in.
BUILT_AT=$(cat "$BUNDLE/root")
if [ ! -e "$BUILT_AT" ]; then
    mkdir -p "$(dirname "$BUILT_AT")" && ln -s "$ROOT" "$BUILT_AT" ||
        echo "gpu-real: cannot link $BUILT_AT -> $ROOT; fixture-reading tests will fail" >&2
fi

export WGPU_BACKEND=${WGPU_BACKEND:-vulkan}
REPORT=$OUT/report.md
FAILED=0
PARTS=${GPU_REAL_PARTS:-tests,bench}
part() { [[ ",$PARTS," == *",$1,"* ]]; }
: >"$REPORT"
say() { echo "$*" | tee -a "$REPORT"; }

say "# kernels: real-GPU report"
say ""
say "- date: $(date -u +%Y-%m-%dT%H:%MZ)"
say "- commit the binaries were built from: $(cat "$BUNDLE/commit" 2>/dev/null || echo unknown)"
if have nvidia-smi; then
    say "- nvidia-smi: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"
fi
say "- CPU: $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
"$KERNELS" info >"$OUT/info.txt" 2>&1
say "- wgpu adapters (WGPU_BACKEND=$WGPU_BACKEND):"
grep -E '^\s*\[[0-9]+\]' "$OUT/info.txt" | sed 's/^/  /' | tee -a "$REPORT"
say "- $(grep -m1 '^cuda' "$OUT/info.txt" || echo 'cuda: not in this build')"
say ""

GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
if [ -z "${PEAK_GFLOPS:-}" ]; then
    # FP32 (non-tensor) peaks from the vendors' data sheets, for the GFLOPS-over-peak column.
    case "$GPU_NAME" in
        *H100*SXM* | *"H100 80GB HBM3"*) PEAK_GFLOPS="wgpu=66900,cuda=66900" ;;
        *H100*PCIe*) PEAK_GFLOPS="wgpu=51200,cuda=51200" ;;
        *H200*) PEAK_GFLOPS="wgpu=66900,cuda=66900" ;;
        *A100*) PEAK_GFLOPS="wgpu=19500,cuda=19500" ;;
        *) PEAK_GFLOPS="" ;;
    esac
fi
[ -n "$PEAK_GFLOPS" ] && say "- FP32 peak used for the peak column: $PEAK_GFLOPS"

HAS_CUDA=0
grep -q '^cuda: *available' "$OUT/info.txt" && HAS_CUDA=1
BACKENDS=cpu,wgpu
[ "$HAS_CUDA" = 1 ] && BACKENDS=cpu,wgpu,cuda

run_cli() { # label, log, command...
    local label=$1 log=$2
    shift 2
    local start=$(date +%s)
    "$@" >"$OUT/$log" 2>"$OUT/$log.stderr"
    local rc=$? t=$(($(date +%s) - start))
    if [ $rc -eq 0 ]; then say "| $label | pass | ${t}s |"; else
        FAILED=1
        say "| $label | **FAIL** (exit $rc): $(tail -1 "$OUT/$log.stderr") | ${t}s |"
    fi
}

if part tests; then
say ""
say "## Tests"
say ""
say "| test | result | time |"
say "| --- | --- | --- |"
# Each binary under a time limit (exit 124: it hung). One that fails is run again with one test
# at a time, and the row says so: on an H100 (2026-11-24), three binaries whose tests each
# create devices hung or crashed once with the default parallel tests, and passed one at a time.
run_test_bin() { # pkg_dir, bin, log, extra arguments...
    local dir=$1 bin=$2 log=$3
    shift 3
    (cd "$dir" 2>/dev/null || cd "$ROOT"; timeout "${GPU_REAL_TEST_TIMEOUT:-300}" "$BUNDLE/$bin" "$@") >"$log" 2>&1
}
while IFS=$'\t' read -r name pkg_dir bin; do
    [ -n "$name" ] || continue
    start=$(date +%s)
    run_test_bin "$pkg_dir" "$bin" "$OUT/$name.log"
    rc=$?
    t=$(($(date +%s) - start))
    summary=$(grep -E '^test result:' "$OUT/$name.log" | tail -1 | sed 's/test result: //')
    skipped=$(grep -ci 'skipped' "$OUT/$name.log")
    if [ $rc -eq 0 ]; then
        say "| $name | pass: $summary${skipped:+ ($skipped skip lines)} | ${t}s |"
    else
        FAILED=1
        run_test_bin "$pkg_dir" "$bin" "$OUT/$name.serial.log" --test-threads=1
        serial=$?
        again=$(grep -E '^test result:' "$OUT/$name.serial.log" | tail -1 | sed 's/test result: //')
        say "| $name | **FAIL** (exit $rc$([ $rc = 124 ] && echo ', timed out')): $summary; one test at a time: exit $serial, $again | ${t}s |"
    fi
done <"$BUNDLE/manifest.tsv"
for b in ${BACKENDS//,/ }; do
    [ "$b" = cpu ] && continue
    run_cli "kernels parity --backend $b" "parity-$b.json" "$KERNELS" parity --backend "$b" --json
done
fi

if part bench; then

say ""
say "## kernels bench (medians; matmul up to 4096)"
say ""
run_cli "kernels bench --backend $BACKENDS" bench.json "$KERNELS" bench --backend "$BACKENDS" \
    --matmul-max 4096 --json ${PEAK_GFLOPS:+--peak-gflops "$PEAK_GFLOPS"}
python3 - "$OUT/bench.json" <<'PY' | tee -a "$REPORT"
import json, sys
try:
    rows = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"(no bench rows: {e})"); sys.exit(0)
print("\n| bench | backend | size | median ms | GFLOPS | of peak | GB/s | tok/s | dispatches | error |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
f = lambda v, p=2: "-" if v is None else f"{v:.{p}f}"
for r in rows:
    peak = None if r["backend"].startswith("cpu") else r.get("peak_fraction")
    print(f'| {r["bench"]} | {r["backend"].split(" (")[0]} | {r["size"]} | {f(r["median_ms"], 3)} | {f(r["gflops"], 1)} | '
          f'{"-" if peak is None else f"{100*peak:.1f}%"} | {f(r["gbps"], 1)} | {f(r.get("tokens_per_s"), 1)} | '
          f'{"-" if r["dispatches"] is None else r["dispatches"]} | {r["error"] or ""} |')
PY

say ""
say "## kernels bench llama (stories15M shape, peers' protocol)"
say ""
MODEL=${GPU_REAL_MODEL:-$OUT/llama-s15}
if [ ! -f "$MODEL/model.safetensors" ]; then
    if s=$(make_llama_script); then
        python3 "$s" "$MODEL" >"$OUT/make_llama.log" 2>&1 || say "make_llama.py failed: $(tail -1 "$OUT/make_llama.log")"
    else
        say "no llama checkpoint: set GPU_REAL_MODEL or provide ../shared/peers/make_llama.py"
    fi
fi
if [ -f "$MODEL/model.safetensors" ]; then
    : >"$OUT/bench-llama.jsonl"
    bench_llama() { # label, backend, env and extra arguments...
        local label=$1 b=$2
        shift 2
        local threads=()
        [ "$b" = cpu ] && threads=(--threads 1)
        if env "$@" "$KERNELS" bench llama --model "$MODEL" --backend "$b" "${threads[@]}" --json \
            $BENCH_ARGS >"$OUT/bench-llama-one.json" 2>"$OUT/bench-llama-$label.stderr"; then
            python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); r["label"]=sys.argv[2]; print(json.dumps(r))' \
                "$OUT/bench-llama-one.json" "$label" >>"$OUT/bench-llama.jsonl"
        else
            FAILED=1
            say "bench llama $label: **FAIL**: $(tail -1 "$OUT/bench-llama-$label.stderr")"
        fi
    }
    for b in ${BACKENDS//,/ }; do
        BENCH_ARGS="" bench_llama "$b" "$b" KERNELS_CUDA_HALF=0
    done
    if [ "$HAS_CUDA" = 1 ]; then
        # Prefill with a q8_0 weight: decoded to f32 for SGEMM, or multiplied in f16 on tensor
        # cores (half products).
        BENCH_ARGS="--quantize q8_0" bench_llama "cuda q8_0" cuda KERNELS_CUDA_HALF=0
        BENCH_ARGS="--quantize q8_0" bench_llama "cuda q8_0, half products" cuda KERNELS_CUDA_HALF=1
    fi
    python3 - "$OUT/bench-llama.jsonl" <<'PY' | tee -a "$REPORT"
import json, sys
print("| run | backend | threads | params | decode tok/s | prefill tok/s | dispatches/token | submits/token | bytes down/token |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
f = lambda v: "-" if v is None else (f"{v:.1f}" if isinstance(v, float) else str(v))
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(f'| {r["label"]} | {r["backend"]} | {f(r["threads"])} | {r["params"]} | {f(r["decode_tok_s"])} | {f(r["prefill_tok_s"])} | '
          f'{f(r["dispatches_per_token"])} | {f(r["submits_per_token"])} | {f(r["bytes_down_per_token"])} |')
PY
fi

fi

say ""
say "Result: $([ $FAILED = 0 ] && echo 'every test passed' || echo 'FAILURES above')."
echo "gpu-real: report in $REPORT" >&2
exit $FAILED
