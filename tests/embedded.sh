#!/usr/bin/env bash
# The demo models on a microcontroller, checked against the host (tests/embedded/).
#
# Builds the firmware for thumbv7em-none-eabihf (kernels-core with default-features = false),
# runs it on QEMU's mps2-an386 board (Cortex-M4F) with semihosting and -icount shift=0 (one
# virtual nanosecond per instruction, so instruction counts do not depend on the host), then
# runs the same workload on the host CPU backend and compares: the same greedy tokens, the same
# initial state bit for bit, logits and rollout within the published budgets. Prints the
# comparison, the instruction counts, and the flash and RAM the firmware uses.
#
# Usage: tests/embedded.sh        (needs qemu-system-arm; tests/ci.sh installs it)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

TARGET=thumbv7em-none-eabihf
OUT=target/embedded
mkdir -p "$OUT"

command -v qemu-system-arm >/dev/null || {
    echo "embedded.sh: qemu-system-arm not found (Debian: apt-get install qemu-system-arm)" >&2
    exit 1
}

FIRMWARE_ARGS=(-p kernels-embedded --no-default-features --features firmware --target "$TARGET" --bin firmware)
cargo clippy --release "${FIRMWARE_ARGS[@]}" -- -D warnings
cargo build --release "${FIRMWARE_ARGS[@]}"
ELF="target/$TARGET/release/firmware"

# Flash: what the image loads at 0x0 (vector table, code, read-only data, .data's initial
# values); static RAM: .data, .bss and .uninit at 0x20000000. readelf reads any ELF.
flash=0
static_ram=0
while read -r name type addr size flags; do
    [[ "$flags" == *A* ]] || continue
    addr=$((16#$addr)) size=$((16#$size))
    if [ "$name" = .data ]; then
        flash=$((flash + size)) static_ram=$((static_ram + size))
    elif [ "$addr" -ge $((0x20000000)) ]; then
        static_ram=$((static_ram + size))
    elif [ "$type" = PROGBITS ]; then
        flash=$((flash + size))
    fi
done < <(readelf -S -W "$ELF" | sed -n 's/^ *\[ *[0-9]*\] //p' | awk '$2 == "PROGBITS" || $2 == "NOBITS" { print $1, $2, $3, $5, $7 }')

echo "+ qemu-system-arm -M mps2-an386 -icount shift=0 -semihosting -kernel $ELF"
status=0
timeout 600 qemu-system-arm -M mps2-an386 -nographic -monitor none -serial null \
    -semihosting-config enable=on,target=native -icount shift=0 \
    -kernel "$ELF" > "$OUT/report.txt" || status=$?
if [ "$status" -ne 0 ]; then
    echo "embedded.sh: the firmware failed under QEMU (exit status $status); its output:" >&2
    tail -n 20 "$OUT/report.txt" | cut -c1-300 >&2
    exit 1
fi
head -n 1 "$OUT/report.txt"

cargo run -q -p kernels-embedded --bin embedded-compare -- "$OUT/report.txt"
echo "firmware image: $((flash / 1024)) KiB of flash (of the board's 4096), $static_ram bytes of static RAM (.data, .bss; the heap and the stack are above)"
