#!/usr/bin/env bash
# End-to-end test of the web page: `trunk build --release`, serve dist/ on 127.0.0.1, then
# tests/web/e2e.cjs drives headless Chromium (playwright-core from npm, the system's
# /usr/bin/chromium): ?autorun=parity on WebGPU, the same with ?backend=cpu, the bench panel, and
# the GRU world-model section (?autorun=gru) and the transformer section (?autorun=llm) on
# WebGPU and on the CPU, and its chat mode on the CPU (chat-cpu). WEB_E2E_ONLY=llm-webgpu,llm-cpu
# runs selected checks.
# Screenshots go to target/web-e2e/. Needs trunk, wasm-bindgen, node/npm and chromium (tests/ci.sh
# installs them). Usage: tests/web_e2e.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

OUT=target/web-e2e
mkdir -p "$OUT"

trunk build --release

# playwright-core only (it downloads no browser), kept under target/.
PW_VERSION=1.65.1
if ! [ -f "$OUT/node_modules/playwright-core/package.json" ] ||
    ! grep -q "\"version\": \"$PW_VERSION\"" "$OUT/node_modules/playwright-core/package.json"; then
    npm install --prefix "$OUT" --no-save --no-audit --no-fund --loglevel=error "playwright-core@$PW_VERSION"
fi

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
python3 -m http.server "$PORT" --bind 127.0.0.1 --directory dist >"$OUT/server.log" 2>&1 &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null || true' EXIT
for _ in $(seq 50); do
    if python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$PORT/')" 2>/dev/null; then
        break
    fi
    sleep 0.2
done

NODE_PATH="$PWD/$OUT/node_modules" node tests/web/e2e.cjs "http://127.0.0.1:$PORT" "$OUT"
