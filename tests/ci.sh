#!/usr/bin/env bash
# Runs every check CI runs, on a fresh machine or a developer's: installs what is missing
# (rustup components and targets, the Mesa software Vulkan driver), then format, lints, all
# tests, the no_std builds and a benchmark compile check. Safe to run again and again: nothing
# is installed twice. Usage: tests/ci.sh   (from anywhere in the repository)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-always}"
# GPU tests run on Mesa lavapipe (software Vulkan) when no other adapter is present.
export WGPU_BACKEND="${WGPU_BACKEND:-vulkan}"
# Mesa warns on every adapter probe without it.
if [ -z "${XDG_RUNTIME_DIR:-}" ]; then
    export XDG_RUNTIME_DIR="${TMPDIR:-/tmp}/xdg-runtime-$(id -u)"
    mkdir -p "$XDG_RUNTIME_DIR" && chmod 700 "$XDG_RUNTIME_DIR"
fi

NO_STD_TARGETS=(thumbv7em-none-eabihf wasm32-unknown-unknown)

START=$(date +%s)
step() {
    local now
    now=$(date +%s)
    printf '\n==> [%4ss] %s\n' "$((now - START))" "$*"
}

run() {
    local t0 t1
    t0=$(date +%s)
    echo "+ $*"
    "$@"
    t1=$(date +%s)
    printf '    (%ss)\n' "$((t1 - t0))"
}

# --- installs, only when missing -------------------------------------------------------------

step "toolchain"
command -v cargo >/dev/null || {
    echo "cargo not found: install Rust from https://rustup.rs" >&2
    exit 1
}
cargo --version
rustc --version

if command -v rustup >/dev/null; then
    installed_components=$(rustup component list --installed)
    for c in rustfmt clippy; do
        if ! grep -q "^$c" <<<"$installed_components"; then
            run rustup component add "$c"
        fi
    done
    installed_targets=$(rustup target list --installed)
    for t in "${NO_STD_TARGETS[@]}"; do
        if ! grep -qx "$t" <<<"$installed_targets"; then
            run rustup target add "$t"
        fi
    done
else
    echo "rustup not found: assuming rustfmt, clippy and the targets ${NO_STD_TARGETS[*]} are installed"
fi

step "system packages"
apt_install() {
    # Installs Debian packages that are not installed yet; sudo only when not root.
    local missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if [ "${#missing[@]}" -eq 0 ]; then
        echo "already installed: $*"
        return
    fi
    local sudo=()
    [ "$(id -u)" -eq 0 ] || sudo=(sudo)
    run "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
    run "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
}
if command -v dpkg-query >/dev/null && command -v apt-get >/dev/null; then
    # Software Vulkan (lavapipe): the GPU tests run for real without a GPU. g++: the CUDA
    # kernels are compiled by the host C++ compiler in the cuda unit tests. Chromium and its
    # driver: the browser tests (WebGPU on SwiftShader); node/npm: the page's end-to-end driver.
    # qemu-system-arm: the demo models on an emulated Cortex-M4F (tests/embedded.sh).
    apt_install mesa-vulkan-drivers g++ chromium chromium-driver qemu-system-arm
    command -v npm >/dev/null || apt_install nodejs npm
else
    echo "not a Debian-like system: install a Vulkan driver (e.g. Mesa lavapipe) yourself for the GPU tests"
fi

step "web tools"
# wasm-bindgen's CLI must be exactly the version in Cargo.lock.
WASM_BINDGEN_VERSION=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/"/, "", $3); print $3 }' Cargo.lock)
if [ "$(wasm-bindgen --version 2>/dev/null | awk '{print $2}')" != "$WASM_BINDGEN_VERSION" ]; then
    run cargo install wasm-bindgen-cli --version "$WASM_BINDGEN_VERSION"
fi
if ! trunk --version 2>/dev/null | grep -q '^trunk 0\.21\.'; then
    run cargo install --locked trunk --version '~0.21'
fi
command -v wasm-pack >/dev/null || run cargo install wasm-pack

step "fuzz tools"
# The fuzz targets (tests/fuzz) build with nightly (libFuzzer, sanitizers) through cargo-fuzz.
if command -v rustup >/dev/null && ! rustup toolchain list | grep -q '^nightly'; then
    run rustup toolchain install nightly --profile minimal
fi
command -v cargo-fuzz >/dev/null || run cargo install cargo-fuzz --locked
cargo +nightly --version
cargo fuzz --version
wasm-bindgen --version
trunk --version
wasm-pack --version

# --- checks ----------------------------------------------------------------------------------

step "format"
run cargo fmt --all --check

step "lints"
run cargo clippy --workspace --all-targets -- -D warnings

# The CUDA backend builds and lints without the CUDA toolkit or a driver (cudarc loads them at
# run time). Its unit tests compile the .cu files with g++, run every kernel on an emulated
# device (each family built into a shared library, the grids run on the CPU) against the CPU
# reference, and check selection and fallback; the device tests (gpu/tests/cuda.rs) say they are
# skipped: CI has no NVIDIA GPU. Under CI=true a missing wgpu adapter or C++ compiler fails the
# tests (the rule lives in kernels_gpu::testing); a missing CUDA device never does.
step "cuda feature: lints and tests (no NVIDIA GPU here)"
run cargo clippy --workspace --all-targets --features kernels-gpu/cuda -- -D warnings
run cargo clippy --workspace --all-targets --features kernels-gpu/cuda-emulator -- -D warnings
run cargo test -p kernels-gpu --features cuda --lib -- cuda select
run cargo test -p kernels-gpu --features cuda --test cuda -- --nocapture
# The llama golden and world-model tests over the whole backend matrix (kernels_gpu::testing),
# the emulated CUDA device included: the model code runs through the CUDA launchers and kernels.
# Each test prints the backends it ran on ("GPU backends: ..." and "ok on ..."). About 25 s
# once built: every golden case runs on the emulator, the quantized GGUF llamas included.
run cargo test -p kernels-tests --features cuda-emulator --test llama_golden --test world --test gguf -- --nocapture

step "tests (WGPU_BACKEND=$WGPU_BACKEND)"
run cargo test --workspace --no-fail-fast

# The programs a library user starts from (README "Use it as a library"), each run to the end.
step "examples"
run cargo run -p native-cli --example check_op
run cargo run -p native-cli --example train_mlp
run cargo run -p native-cli --example world_rollout
run cargo run -p native-cli --example generate
run cargo run -p kernels-core --example decode_by_position

step "docs"
run env RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --lib -p kernels-core -p kernels-gpu -p kernels-chat -p native-cli -p kernels-embedded

step "no_std builds of kernels-core"
for t in "${NO_STD_TARGETS[@]}"; do
    run cargo build -p kernels-core --no-default-features --target "$t"
    run cargo clippy -p kernels-core --no-default-features --target "$t" -- -D warnings
done

# The same kernels on a microcontroller: the firmware (tests/embedded/) runs the demo llama and a
# GRU member on QEMU's mps2-an386 (Cortex-M4F) and is compared with the host CPU backend.
step "no_std on a Cortex-M4F under QEMU (tests/embedded.sh)"
run tests/embedded.sh

step "wasm32 lints of the browser crates"
run cargo clippy -p kernels-gpu -p kernels-web -p kernels-chat --target wasm32-unknown-unknown --lib --tests -- -D warnings

# Headless Chromium with WebGPU on SwiftShader: the flags are in <crate>/webdriver.json.
export CHROMEDRIVER="${CHROMEDRIVER:-/usr/bin/chromedriver}"
export WASM_BINDGEN_TEST_TIMEOUT="${WASM_BINDGEN_TEST_TIMEOUT:-1800}"
step "browser tests: kernels-core's tests on wasm32 (wasm-pack, headless Chromium)"
run env WASM_BINDGEN_USE_BROWSER=1 wasm-pack test --headless --chrome kernels-core

step "browser tests: the gpu crate's parity suite on WebGPU (wasm-pack, headless Chromium)"
run wasm-pack test --headless --chrome gpu

step "browser tests: the page end to end (trunk build, headless Chromium)"
run tests/web_e2e.sh

# Each cargo-fuzz target (readers of safetensors, GGUF, config.json, tokenizer.json, `kernels op`'s
# attributes, random op calls on the CPU backend) for 30 s from the committed corpus; a crash
# fails the run and leaves its input in tests/fuzz/artifacts/. About 4 minutes once built.
step "fuzz targets (30 s each)"
run tests/fuzz.sh 30

# Type-checks the benches (dev profile) rather than a release `cargo bench --no-run` (7 minutes).
step "benchmarks compile"
run cargo check --benches -p kernels-core -p kernels-gpu

step "all checks passed"
