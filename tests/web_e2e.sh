#!/usr/bin/env bash
# End-to-end test of the web page: `trunk build --release`, serve dist/ on 127.0.0.1, then
# tests/web/e2e.cjs drives headless Chromium (playwright-core from npm, the system's
# /usr/bin/chromium): ?autorun=parity on WebGPU, the same with ?backend=cpu, the bench panel, and
# the GRU world-model section (?autorun=gru) and the transformer section (?autorun=llm) on
# WebGPU and on the CPU, and its chat mode on the CPU (chat-cpu), and the Train section
# (?autorun=train&steps=50: train-webgpu with its parity strip, train-cpu; train-controls:
# pause, resume, reset), the demo model quantized on load (?quantize=q4_k on WebGPU and the CPU,
# q8_0 on the CPU: llm-q4k-webgpu, llm-q4k-cpu, llm-q8-cpu) and a Q4_0 GGUF picked as a directory
# (gguf-webgpu, gguf-cpu).
# WEB_E2E_ONLY=llm-webgpu,llm-cpu runs selected checks; WEB_E2E_ONLY=train-cpu-90 measures the
# steps the wasm CPU takes to 90% held-out accuracy (minutes; never in the default run);
# WEB_E2E_ONLY=big-gguf WEB_E2E_MODEL_DIR=DIR loads a large model directory on WebGPU and prints
# its load time, tokens, WebGPU storage bytes and wasm memory (never in the default run; see
# web/README.md "A 0.5B model in the page"). WEB_E2E_ONLY=llm-peer WEB_E2E_MODEL_DIR=/tmp/llama-s15
# runs the transformers.js peer's protocol (../shared/peers/README.md, transformers-js) on the
# page's wasm CPU with the picked directory: its 32-token prompt, 128 decode steps and a 256-token
# prefill, WEB_E2E_WARMUP (2) warm-up runs then WEB_E2E_RUNS (3) timed, and prints the median and
# range of decode and prefill tokens/s (llm-peer-webgpu: the same on WebGPU; WEB_E2E_GREEDY_REF=
# /tmp/tjs/models/llama-s15/greedy_ref.json checks the tokens against transformers' greedy ones;
# never in the default run). With a directory holding a .gguf and no config.json, llm-peer runs the
# wllama peer's protocol instead (../shared/peers/README.md, wllama): a WEB_E2E_PREFILL (64)-token
# prompt, WEB_E2E_DECODE (32) greedy decode steps, WEB_E2E_WARMUP (1) then WEB_E2E_RUNS (3); prints
# the best, median and range; #threads says how many wasm threads ran.
# WEB_E2E_ISOLATED=1 serves the page cross-origin isolated (Cross-Origin-Opener-Policy:
# same-origin, Cross-Origin-Embedder-Policy: require-corp), so the loader takes the threaded build
# in DIST/threads/ (web/build-threads.sh), and WEB_E2E_THREADS=N asks it for N wasm threads
# (?threads=N; measurements: WEB_E2E_ONLY=llm-peer). The default run builds the threaded page too
# (WEB_E2E_THREADS_BUILD=0 skips it and its check) and then runs tests/web/threads.cjs: the page
# served isolated runs 2 wasm threads whose products take ranges on the workers, with the same
# greedy tokens and parity as the single-threaded build served plainly, which says it runs one
# thread because the page is not cross-origin isolated.
# WEB_E2E_SKIP_FIRST_LOAD=1 skips the first-load figures. WEB_E2E_DIST=DIR serves an already
# built page (`trunk build --release --dist DIR`) instead of building dist/ (for measurements).
# Screenshots go to target/web-e2e/. Needs trunk, wasm-bindgen, node/npm and chromium (tests/ci.sh
# installs them). Usage: tests/web_e2e.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

OUT=target/web-e2e
mkdir -p "$OUT"

# From npm, kept under target/: playwright-core (it downloads no browser), and binaryen, whose
# wasm-opt (version 132, as Trunk.toml pins; Debian's 108 corrupts current Rust wasm) trunk runs
# on the wasm.
PW_VERSION=1.65.1
BINARYEN_VERSION=132.0.0
installed() { grep -q "\"version\": \"$2\"" "$OUT/node_modules/$1/package.json" 2>/dev/null; }
if ! installed playwright-core "$PW_VERSION" || ! installed binaryen "$BINARYEN_VERSION"; then
    npm install --prefix "$OUT" --no-save --no-audit --no-fund --loglevel=error \
        "playwright-core@$PW_VERSION" "binaryen@$BINARYEN_VERSION"
fi
export PATH="$PWD/$OUT/node_modules/.bin:$PATH"
wasm-opt --version

DIST=${WEB_E2E_DIST:-dist}
THREADS_CHECK=0
if [ -z "${WEB_E2E_DIST:-}" ]; then
    trunk build --release --offline
    if [ "${WEB_E2E_THREADS_BUILD:-1}" != 0 ] && [ -z "${WEB_E2E_ONLY:-}" ]; then
        start=$(date +%s)
        # For the check, not for measurements (web/build-threads.sh by hand): no wasm-opt, and
        # opt-level 1 without LTO in a target directory of its own, to keep CI's extra time down.
        # Rust does not reassociate floats at any level: the products keep their bits.
        WEB_THREADS_WASM_OPT=0 WEB_THREADS_TARGET_DIR="$PWD/target/web-threads-check" \
            CARGO_PROFILE_RELEASE_OPT_LEVEL=1 CARGO_PROFILE_RELEASE_LTO=false \
            CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 web/build-threads.sh "$DIST"
        echo "threaded page build: $(($(date +%s) - start)) s"
        THREADS_CHECK=1
    fi
fi

# A static server; with ISOLATED=1 it sends the two headers that make the page cross-origin
# isolated.
serve() {
    ISOLATED=$2 python3 - "$1" "$DIST" <<'PY'
import functools, http.server, os, sys
class Handler(http.server.SimpleHTTPRequestHandler):
    def end_headers(self):
        if os.environ.get("ISOLATED") == "1":
            self.send_header("Cross-Origin-Opener-Policy", "same-origin")
            self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
        super().end_headers()
handler = functools.partial(Handler, directory=sys.argv[2])
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), handler).serve_forever()
PY
}
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
wait_for() {
    for _ in $(seq 50); do
        if python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$1/')" 2>/dev/null; then
            return
        fi
        sleep 0.2
    done
}
PORT=$(free_port)
serve "$PORT" "${WEB_E2E_ISOLATED:-0}" >"$OUT/server.log" 2>&1 &
SERVER=$!
ISO_SERVER=
trap 'kill "$SERVER" $ISO_SERVER 2>/dev/null || true' EXIT
wait_for "$PORT"

NODE_PATH="$PWD/$OUT/node_modules" node tests/web/e2e.cjs "http://127.0.0.1:$PORT" "$OUT"
if [ "$THREADS_CHECK" = 1 ]; then
    ISO_PORT=$(free_port)
    serve "$ISO_PORT" 1 >"$OUT/server-isolated.log" 2>&1 &
    ISO_SERVER=$!
    wait_for "$ISO_PORT"
    NODE_PATH="$PWD/$OUT/node_modules" node tests/web/threads.cjs "http://127.0.0.1:$PORT" \
        "http://127.0.0.1:$ISO_PORT" "$OUT"
fi
# First load, as figures (not asserted: timings): wasm and weights bytes, first paint, time to
# interactive and to ready, on localhost and at 20 Mbit/s.
[ -n "${WEB_E2E_SKIP_FIRST_LOAD:-}" ] && exit 0
NODE_PATH="$PWD/$OUT/node_modules" node tests/web/first_load.cjs "http://127.0.0.1:$PORT" 3
NODE_PATH="$PWD/$OUT/node_modules" node tests/web/first_load.cjs "http://127.0.0.1:$PORT" 3 20
