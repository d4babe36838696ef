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
#                                        a Rust toolchain), and DIR.tar.xz (~20 MB) to carry
#   KERNELS_PREBUILT=DIR tests/gpu-real.sh   run a bundle's binaries (no cargo needed); DIR may
#                                        be DIR.tar.xz (unpacked beside itself first)
#
# Environment: GPU_REAL_OUT (report folder, default target/gpu-real), GPU_REAL_TEST_TIMEOUT
# (seconds per test binary, default 120), GPU_REAL_MODEL (a llama
# directory to bench; default: written by make_llama.py, which needs torch and transformers),
# GPU_REAL_CUDA (1 or 0: force the cuda build on or off), GPU_REAL_PARTS (`tests`, `bench` or
# `tests,bench`, the default: which halves to run; the report of a part is appended), PEAK_GFLOPS (e.g. `wgpu=66900,cuda=66900`
# for the GFLOPS-over-peak column; a few NVIDIA data-center cards are known below).
# GPU_REAL_BUDGET (seconds for the whole run, default 470: one 8-minute lease call; every stage
# runs under `timeout` with what is left, capped at its own limit; the benches run first, then
# the tests with what is left), GPU_REAL_TESTS_BUDGET (seconds for all test binaries together,
# default 240; a binary not reached is reported NOT RUN), GPU_REAL_1B (0: skip the Llama-3.2-1B-shaped
# decode section), GPU_REAL_DRY=1 (the report logic on any adapter, lavapipe included: a tiny
# llama instead of the 1B shape, one run of each bench, no test binaries; GPU_REAL_GPU_NAME
# stands in for nvidia-smi's name in the bandwidth and peak tables).
#
# The 1B section writes a random f16 checkpoint at Llama-3.2-1B's sizes (16 layers, hidden 2048,
# GQA 32/8 heads, intermediate 8192, vocab 128256, tied embeddings; about 2.5 GB, written by
# python3 alone on the GPU machine, so the bundle stays small) and benches decode and prefill on
# wgpu and CUDA in f16, q8_0 and q4_k (`--quantize` at load), with the share of the memory roof:
# weight bytes per token x tok/s / the card's bandwidth (table below, by nvidia-smi's name).
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
    # The binaries are ~210 MB, over the 64 MiB a lease call carries; they share most of their
    # code (wgpu, naga, cudarc), which xz finds with a dictionary larger than one binary: ~20 MB.
    if have xz; then
        echo "gpu-real: compressing to $dir.tar.xz" >&2
        tar -C "$(dirname "$dir")" -cf - "$(basename "$dir")" |
            xz -T1 --lzma2=preset=9,dict=256MiB >"$dir.tar.xz" || return 1
        du -sh "$dir.tar.xz" >&2
    fi
}

if [ "${1:-}" = "--bundle" ]; then
    [ -n "${2:-}" ] || { echo "usage: tests/gpu-real.sh --bundle DIR" >&2; exit 2; }
    bundle "$2"
    exit $?
fi

OUT=${GPU_REAL_OUT:-$ROOT/target/gpu-real}
mkdir -p "$OUT"
BUNDLE=${KERNELS_PREBUILT:-}
# A compressed bundle (DIR.tar.xz): unpacked beside itself.
if [[ "$BUNDLE" == *.tar.xz ]]; then
    tar -C "$(dirname "$BUNDLE")" -xJf "$BUNDLE" || { echo "gpu-real: cannot unpack $BUNDLE" >&2; exit 1; }
    BUNDLE=${BUNDLE%.tar.xz}
fi
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
DRY=${GPU_REAL_DRY:-0}
BUDGET=${GPU_REAL_BUDGET:-470}
T0=$(date +%s)
# Seconds a stage may take: its own cap, or what is left of the budget (at least 1).
limit() {
    local cap=$1 left=$((BUDGET - ($(date +%s) - T0)))
    [ "$left" -lt "$cap" ] && cap=$left
    [ "$cap" -lt 1 ] && cap=1
    echo "$cap"
}
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

GPU_NAME=${GPU_REAL_GPU_NAME:-$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)}
# Memory bandwidth (GB/s) from the vendors' data sheets, for the share of the memory roof.
case "$GPU_NAME" in
    *H100*SXM* | *"H100 80GB HBM3"*) BW_GBPS=3350 ;;
    *H200*) BW_GBPS=4800 ;;
    *H100*PCIe*) BW_GBPS=2000 ;;
    *) BW_GBPS="" ;;
esac
if [ -n "$BW_GBPS" ]; then
    say "- memory bandwidth used for the roof ($GPU_NAME): $BW_GBPS GB/s"
else
    say "- memory bandwidth: unknown for '${GPU_NAME:-no nvidia-smi}' (no roof column)"
fi

if [ -z "${PEAK_GFLOPS:-}" ]; then
    # FP32 (non-tensor) peaks from the vendors' data sheets, for the GFLOPS-over-peak column.
    case "$GPU_NAME" in
        *H100*SXM* | *"H100 80GB HBM3"*) PEAK_GFLOPS="wgpu=66900,cuda=66900" ;;
        *H100*PCIe*) PEAK_GFLOPS="wgpu=51200,cuda=51200" ;;
        *H200*) PEAK_GFLOPS="wgpu=67000,cuda=67000" ;;
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
    timeout "$(limit "${CLI_LIMIT:-120}")" "$@" >"$OUT/$log" 2>"$OUT/$log.stderr"
    local rc=$? t=$(($(date +%s) - start))
    if [ $rc -eq 0 ]; then say "| $label | pass | ${t}s |"; else
        FAILED=1
        say "| $label | **FAIL** (exit $rc$([ $rc = 124 ] && echo ', timed out')): $(tail -1 "$OUT/$log.stderr") | ${t}s |"
    fi
}

[ "$DRY" = 1 ] && PARTS=bench
tests_part() {
TESTS_END=$(($(date +%s) + ${GPU_REAL_TESTS_BUDGET:-240}))
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
    local cap=$((TESTS_END - $(date +%s)))
    [ "$cap" -gt "${GPU_REAL_TEST_TIMEOUT:-120}" ] && cap=${GPU_REAL_TEST_TIMEOUT:-120}
    [ "$cap" -lt 5 ] && { echo "no time left in the tests' budget" >"$log"; return 125; }
    (cd "$dir" 2>/dev/null || cd "$ROOT"; timeout "$(limit "$cap")" "$BUNDLE/$bin" "$@") >"$log" 2>&1
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
    elif [ $rc -eq 125 ]; then
        FAILED=1
        say "| $name | **NOT RUN**: the tests' budget (GPU_REAL_TESTS_BUDGET) was spent | - |"
    else
        FAILED=1
        serial=skipped
        if [ $rc != 124 ]; then
            run_test_bin "$pkg_dir" "$bin" "$OUT/$name.serial.log" --test-threads=1
            serial=$?
        fi
        again=$(grep -E '^test result:' "$OUT/$name.serial.log" | tail -1 | sed 's/test result: //')
        say "| $name | **FAIL** (exit $rc$([ $rc = 124 ] && echo ', timed out')): $summary; one test at a time: exit $serial, $again | ${t}s |"
    fi
done <"$BUNDLE/manifest.tsv"
for b in ${BACKENDS//,/ }; do
    [ "$b" = cpu ] && continue
    CLI_LIMIT=90 run_cli "kernels parity --backend $b" "parity-$b.json" "$KERNELS" parity --backend "$b" --json
done
}

bench_part() {

say ""
say "## kernels bench (medians; matmul up to 4096)"
say ""
MATMUL_MAX=4096
BENCH_BACKENDS=$BACKENDS
[ "$DRY" = 1 ] && MATMUL_MAX=256 && BENCH_BACKENDS=wgpu
CLI_LIMIT=60 run_cli "kernels bench --backend $BENCH_BACKENDS" bench.json "$KERNELS" bench --backend "$BENCH_BACKENDS" \
    --matmul-max "$MATMUL_MAX" --json ${PEAK_GFLOPS:+--peak-gflops "$PEAK_GFLOPS"}
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

python3 - "$OUT/bench.json" "$MATMUL_MAX" <<'PY' | tee -a "$REPORT"
import json, sys
size = sys.argv[2]
try:
    rows = json.load(open(sys.argv[1]))
except Exception:
    rows = []
hit = [r for r in rows if r["bench"] == "matmul" and r["backend"].startswith("wgpu") and size in str(r["size"])]
for r in hit:
    p = r.get("peak_fraction")
    print(f'\nWGSL matmul at {r["size"]}: {r["gflops"]:.0f} GFLOPS, '
          + (f"{100 * p:.1f}% of FP32 peak (target 50%)" if p is not None else "no FP32 peak known for this card"))
if not hit:
    print(f"\nWGSL matmul at {size}: no row")
PY

# Llama-3.2-1B's sizes, random weights: decode tok/s against the memory roof, prefill tok/s,
# the host's cost per dispatch and per token, on wgpu and CUDA, in f16, q8_0 and q4_k.
if [ "${GPU_REAL_1B:-1}" = 1 ]; then
say ""
if [ "$DRY" = 1 ]; then
    say "## llama decode (DRY RUN: a tiny random llama, not the 1B shape)"
    SHAPE="4 64 4 2 128 256"
else
    say "## llama decode at Llama-3.2-1B's sizes (random weights; 16 layers, hidden 2048, GQA 32/8, intermediate 8192, vocab 128256)"
    SHAPE="16 2048 32 8 8192 128256"
fi
say ""
M1B=$OUT/llama-1b-shape
[ "$DRY" = 1 ] && M1B=$OUT/llama-dry
if [ ! -f "$M1B/model.safetensors" ]; then
    # shellcheck disable=SC2086
    timeout "$(limit 90)" python3 - "$M1B" $SHAPE <<'PY' >"$OUT/make-1b.log" 2>&1 || say "writing the checkpoint failed: $(tail -1 "$OUT/make-1b.log")"
import json, os, random, struct, sys
d = sys.argv[1]
layers, h, heads, kv, inter, vocab = map(int, sys.argv[2:8])
hd = h // heads
os.makedirs(d, exist_ok=True)
shapes = [("model.embed_tokens.weight", [vocab, h])]
for l in range(layers):
    p = f"model.layers.{l}."
    shapes += [(p + "input_layernorm.weight", [h]),
               (p + "self_attn.q_proj.weight", [heads * hd, h]),
               (p + "self_attn.k_proj.weight", [kv * hd, h]),
               (p + "self_attn.v_proj.weight", [kv * hd, h]),
               (p + "self_attn.o_proj.weight", [h, heads * hd]),
               (p + "post_attention_layernorm.weight", [h]),
               (p + "mlp.gate_proj.weight", [inter, h]),
               (p + "mlp.up_proj.weight", [inter, h]),
               (p + "mlp.down_proj.weight", [h, inter])]
shapes.append(("model.norm.weight", [h]))
header, off = {}, 0
for name, shape in shapes:
    n = 2
    for x in shape:
        n *= x
    header[name] = {"dtype": "F16", "shape": shape, "data_offsets": [off, off + n]}
    off += n
hj = json.dumps(header).encode()
hj += b" " * (-len(hj) % 8)
# Random f16 of magnitude 2^-8..2^-5 with random signs: the high byte keeps its sign and top
# mantissa bits, its exponent is mapped into 8..10.
rnd = random.Random(29)
chunk = bytearray(rnd.getrandbits(8) for _ in range(1 << 16)) * 64
table = bytes(((b >> 7) << 7) | ((8 + ((b >> 2) & 31) % 3) << 2) | (b & 3) for b in range(256))
chunk[1::2] = bytes(chunk[1::2]).translate(table)
one = struct.pack("<e", 1.0)
with open(os.path.join(d, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(hj)) + hj)
    for name, shape in shapes:
        n = header[name]["data_offsets"][1] - header[name]["data_offsets"][0]
        if len(shape) == 1:
            f.write(one * (n // 2))
            continue
        while n > 0:
            k = min(n, len(chunk))
            f.write(chunk[:k])
            n -= k
json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": h,
           "intermediate_size": inter, "num_hidden_layers": layers, "num_attention_heads": heads,
           "num_key_value_heads": kv, "head_dim": hd, "vocab_size": vocab, "rms_norm_eps": 1e-5,
           "rope_theta": 500000.0, "max_position_embeddings": 2048, "tie_word_embeddings": True,
           "torch_dtype": "float16", "bos_token_id": 1, "eos_token_id": 2},
          open(os.path.join(d, "config.json"), "w"))
print(f"{d}: {off / 1e9:.2f} GB of f16 weights")
PY
fi
: >"$OUT/bench-1b.jsonl"
if [ -f "$M1B/model.safetensors" ]; then
    ARGS_1B=(--prompt-len 16 --new-tokens 32 --prefill-len 64 --runs 1)
    [ "$DRY" = 1 ] && ARGS_1B=(--prompt-len 4 --new-tokens 4 --prefill-len 8 --runs 1)
    RUNS_1B=()
    for b in ${BACKENDS//,/ }; do
        [ "$b" = cpu ] && [ "$DRY" != 1 ] && continue
        for q in f16 q8_0 q4_k; do RUNS_1B+=("$b $q $b KERNELS_CUDA_GRAPHS=1"); done
    done
    # The host's cost per token without CUDA graphs and with graphs updated each token (no
    # replay), beside the runs that replay the decode step.
    [ "$HAS_CUDA" = 1 ] && RUNS_1B+=("cuda-no-graphs f16 cuda KERNELS_CUDA_GRAPHS=0")
    [ "$HAS_CUDA" = 1 ] && RUNS_1B+=("cuda-graphs-updated f16 cuda KERNELS_CUDA_REPLAY=0")
    for run in "${RUNS_1B[@]}"; do
        read -r label q b genv <<<"$run"
        qa=()
        [ "$q" != f16 ] && qa=(--quantize "$q")
        start=$(date +%s)
        if timeout "$(limit 50)" env KERNELS_CUDA_HALF=0 "$genv" "$KERNELS" bench llama --model "$M1B" --backend "$b" \
            "${ARGS_1B[@]}" "${qa[@]}" --json >"$OUT/bench-1b-one.json" 2>"$OUT/bench-1b-$label-$q.stderr"; then
            python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); r["label"]=sys.argv[2]; r["dtype"]=sys.argv[3]; r["wall_s"]=int(sys.argv[4]); print(json.dumps(r))' \
                "$OUT/bench-1b-one.json" "$label" "$q" "$(($(date +%s) - start))" >>"$OUT/bench-1b.jsonl"
        else
            rc=$?
            FAILED=1
            say "bench llama $label $q: **FAIL** (exit $rc$([ $rc = 124 ] && echo ', timed out')): $(tail -1 "$OUT/bench-1b-$label-$q.stderr")"
        fi
    done
fi
python3 - "$OUT/bench-1b.jsonl" "${BW_GBPS:-}" <<'PY' | tee -a "$REPORT"
import json, sys
bw = float(sys.argv[2]) * 1e9 if sys.argv[2] else None
f = lambda v, p=1: "-" if v is None else f"{v:.{p}f}"
print("| run | weights | decode tok/s | weight MB/token | % of memory roof | prefill tok/s | host µs/dispatch | host µs/token | dispatches/token | wall s |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for line in open(sys.argv[1]):
    r = json.loads(line)
    tok, wb = r.get("decode_tok_s"), r.get("weight_bytes_per_token")
    roof = None if (bw is None or tok is None or wb is None) else 100.0 * wb * tok / bw
    roof_s = "- (bandwidth unknown)" if bw is None else ("-" if roof is None else f"{roof:.2f}%")
    print(f'| {r["label"]} | {r["dtype"]} | {f(tok)} | {f(None if wb is None else wb / 1e6)} | '
          f'{roof_s} | {f(r.get("prefill_tok_s"))} | '
          f'{f(r.get("host_us_per_dispatch"), 2)} | {f(r.get("host_us_per_token"))} | {f(r.get("dispatches_per_token"))} | {r["wall_s"]} |')
print("\nTargets (issue 29): wgpu decode >= 50% of the roof at f16 and q8_0; CUDA decode >= 80%.")
PY
fi

# Seed 002's world-model latency at batch 32 beside its targets.
say ""
say "## GRU world model, batch 32 (kernels gru bench)"
say ""
rm -f "$OUT"/gru-*.json
GRU_RUNS=7
[ "$DRY" = 1 ] && GRU_RUNS=1
for b in ${BACKENDS//,/ }; do
    [ "$b" = cpu ] && continue
    if timeout "$(limit 40)" "$KERNELS" gru bench --backend "$b" --batch 32 --steps 10 --rank 32 --runs "$GRU_RUNS" --json \
        >"$OUT/gru-$b.out" 2>"$OUT/gru-$b.stderr"; then
        mv "$OUT/gru-$b.out" "$OUT/gru-$b.json"
    else
        say "gru bench --backend $b: failed (exit $?): $(tail -1 "$OUT/gru-$b.stderr")"
    fi
done
python3 - "$OUT"/gru-*.json <<'PY' | tee -a "$REPORT"
import json, sys
targets = {"encode": 0.25, "rollout": 5.0, "svd": 3.0, "corrections": 0.04, "total": 8.29}
def target(stage):
    for k, v in targets.items():
        if k in stage.lower():
            return v
    return None
rows = []
for path in sys.argv[1:]:
    try:
        rows += json.load(open(path)).get("rows", [])
    except Exception as e:
        print(f"({path}: {e})\n")
print("| stage | backend | median ms | target ms (seed 002) | met |")
print("| --- | --- | --- | --- | --- |")
for r in rows:
    t, ms = target(r["stage"]), r.get("median_ms")
    met = "-" if t is None or ms is None else ("yes" if ms <= t else "no")
    print(f'| {r["stage"]} | {r["backend"].split(" (")[0]} | {"-" if ms is None else f"{ms:.3f}"} | {"-" if t is None else t} | {met} |')
if not rows:
    print("| (no rows) | | | | |")
PY

say ""
say "## kernels bench llama (stories15M shape, peers' protocol)"
say ""
MODEL=${GPU_REAL_MODEL:-$OUT/llama-s15}
if [ ! -f "$MODEL/model.safetensors" ]; then
    if s=$(make_llama_script); then
        timeout "$(limit 60)" python3 "$s" "$MODEL" >"$OUT/make_llama.log" 2>&1 || say "make_llama.py failed: $(tail -1 "$OUT/make_llama.log")"
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
        if timeout "$(limit 60)" env "$@" "$KERNELS" bench llama --model "$MODEL" --backend "$b" "${threads[@]}" --json \
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
}

# The figures first, then the tests with what is left of the budget.
part bench && bench_part
part tests && tests_part

say ""
say "Result: $([ $FAILED = 0 ] && echo 'every test passed' || echo 'FAILURES above')."
echo "gpu-real: report in $REPORT" >&2
exit $FAILED
