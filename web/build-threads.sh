#!/usr/bin/env bash
# The threaded page build: the same crate as `trunk build --release`, built with nightly Rust for
# wasm32 with shared memory (`-C target-feature=+atomics,+bulk-memory`, std rebuilt with
# `-Z build-std=panic_abort,std`) and the `threads` feature, so kernels-core's thread pool runs
# on web workers over the page's wasm memory (web/src/threads.rs). It goes into DIST/threads/
# (kernels-web.js, kernels-web_bg.wasm, wasm-bindgen's snippets/, worker.js) beside the default
# build, which trunk built into DIST; the page's loader (Trunk.toml, pattern_script) takes it
# where the page is cross-origin isolated.
#
# Usage: web/build-threads.sh [DIST]   (default dist; run `trunk build --release` first)
# Installs nightly's rust-src and wasm32 target when missing (idempotent). Needs wasm-bindgen (the
# version in Cargo.lock) and binaryen 132's wasm-opt on PATH (tests/web_e2e.sh provides both).
# Its own target directory (target/web-threads, or WEB_THREADS_TARGET_DIR): the flags differ from
# the default build's.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
DIST=${1:-dist}
OUT="$DIST/threads"

if ! rustup toolchain list | grep -q '^nightly'; then
    rustup toolchain install nightly --profile minimal
fi
rustup +nightly component list --installed | grep -q '^rust-src' ||
    rustup component add rust-src --toolchain nightly
rustup +nightly target list --installed | grep -q '^wasm32-unknown-unknown$' ||
    rustup target add wasm32-unknown-unknown --toolchain nightly

# RUSTFLAGS replaces .cargo/config.toml's wasm32 flags, so +simd128 is repeated here. The memory
# may grow to 4 GiB (the linker's default maximum for shared memory is 1 GiB; a 0.5B model's
# weights and the page's buffers pass that).
export RUSTFLAGS="-C target-feature=+atomics,+bulk-memory,+mutable-globals,+simd128 -C link-arg=--max-memory=4294967296"
export CARGO_TARGET_DIR="${WEB_THREADS_TARGET_DIR:-$PWD/target/web-threads}"
# The final link makes the memory shared and imported (the workers instantiate the module on the
# page's memory) and exports the thread-local storage symbols wasm-bindgen's thread support
# calls: current nightly no longer adds these for +atomics by itself. Given to the page crate
# only (cargo rustc), so its dependencies are not rebuilt when they change.
cargo +nightly rustc --release --lib -p kernels-web --features threads \
    --target wasm32-unknown-unknown -Z build-std=panic_abort,std -- \
    -C link-arg=--shared-memory -C link-arg=--import-memory \
    -C link-arg=--export=__wasm_init_tls -C link-arg=--export=__tls_size \
    -C link-arg=--export=__tls_align -C link-arg=--export=__tls_base

rm -rf "$OUT"
mkdir -p "$OUT"
wasm-bindgen --target web --out-dir "$OUT" --out-name kernels-web --no-typescript \
    "$CARGO_TARGET_DIR/wasm32-unknown-unknown/release/kernels_web.wasm"
# WEB_THREADS_WASM_OPT=0 skips wasm-opt (minutes here; the page runs the same without it).
[ "${WEB_THREADS_WASM_OPT:-1}" = 0 ] || wasm-opt -Oz --enable-threads --enable-bulk-memory --enable-mutable-globals --enable-simd \
    --enable-sign-ext --enable-nontrapping-float-to-int --enable-reference-types \
    --enable-multivalue "$OUT/kernels-web_bg.wasm" -o "$OUT/kernels-web_bg.wasm"
cp web/worker.js "$OUT/worker.js"
ls -l "$OUT"
