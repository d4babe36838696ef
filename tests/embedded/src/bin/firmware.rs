//! The firmware: runs [`kernels_embedded::workload`] on the Cortex-M4F of QEMU's `mps2-an386`
//! board and prints its [`Report`](kernels_embedded::report::Report) over semihosting, then
//! exits QEMU (status 0 on success).
//!
//! - The heap is the board's 16 MB of PSRAM (`memory.x`), behind a counting allocator that
//!   records the peak.
//! - Instructions are counted with the board's dual timer under `qemu-system-arm -icount
//!   shift=0`, where the virtual clock advances one nanosecond per instruction: the firmware
//!   first calibrates timer ticks against a loop of a known instruction count, so the figures
//!   depend neither on the board's clock frequency nor on the host's speed.
//! - The stack is painted before the workload and scanned after it for its peak.

#![no_std]
#![no_main]

extern crate alloc;

use core::alloc::{GlobalAlloc, Layout};
use core::fmt::{self, Write};
use core::sync::atomic::{AtomicUsize, Ordering};

use cortex_m_rt::entry;
use cortex_m_semihosting::{debug, hio};
use embedded_alloc::LlffHeap;

use kernels_embedded::report::Memory;
use kernels_embedded::workload::{self, Clock};

/// The global allocator: a linked-list heap that records its peak use.
struct PeakHeap {
    heap: LlffHeap,
    used: AtomicUsize,
    peak: AtomicUsize,
}

// SAFETY: every call forwards to `LlffHeap` (a correct allocator); the counters are only
// bookkeeping.
unsafe impl GlobalAlloc for PeakHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is forwarded unchanged.
        let p = unsafe { self.heap.alloc(layout) };
        if !p.is_null() {
            let now = self.used.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            self.peak.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is forwarded unchanged.
        unsafe { self.heap.dealloc(ptr, layout) };
        self.used.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static HEAP: PeakHeap = PeakHeap {
    heap: LlffHeap::empty(),
    used: AtomicUsize::new(0),
    peak: AtomicUsize::new(0),
};

unsafe extern "C" {
    /// From memory.x: the PSRAM handed to the heap.
    static _heap_start: u8;
    static _heap_size: u8;
    /// From cortex-m-rt's link.x: the end of .bss and the top of the stack.
    static __ebss: u8;
    static _stack_start: u8;
}

/// The board's CMSDK APB dual timer (timer 1), a 32-bit down-counter on the 25 MHz system
/// clock: `Timer1Load`, `Timer1Value`, `Timer1Control`.
const DUALTIMER: usize = 0x4000_2000;
const TIMER1_LOAD: *mut u32 = DUALTIMER as *mut u32;
const TIMER1_VALUE: *const u32 = (DUALTIMER + 0x04) as *const u32;
const TIMER1_CONTROL: *mut u32 = (DUALTIMER + 0x08) as *mut u32;
/// Enabled, free-running (wraps to 0xffff_ffff), 32-bit, no prescaler, no interrupt.
const TIMER_ENABLE_32BIT_FREE: u32 = 0x80 | 0x02;

/// Starts timer 1 counting down from its maximum.
fn start_timer() {
    // SAFETY: the dual timer's registers on mps2-an386; nothing else uses the timer.
    unsafe {
        core::ptr::write_volatile(TIMER1_CONTROL, 0);
        core::ptr::write_volatile(TIMER1_LOAD, u32::MAX);
        core::ptr::write_volatile(TIMER1_CONTROL, TIMER_ENABLE_32BIT_FREE);
    }
}

/// Timer 1's count (down-counting).
fn timer() -> u32 {
    // SAFETY: a read of the dual timer's value register.
    unsafe { core::ptr::read_volatile(TIMER1_VALUE) }
}

/// Instructions, from timer ticks times the calibrated instructions per tick. Ticks are summed
/// at every read, so the 32-bit counter may wrap between reads at most once (2^32 ticks, 172 s
/// of the board's time: far more than any part of the workload).
struct Instructions {
    last: u32,
    ticks: u64,
    /// Instructions per tick, times 1024.
    per_tick_x1024: u64,
}

impl Clock for Instructions {
    fn now(&mut self) -> u64 {
        let t = timer();
        self.ticks += u64::from(self.last.wrapping_sub(t));
        self.last = t;
        self.ticks * self.per_tick_x1024 / 1024
    }
}

/// Runs `iterations` of a two-instruction loop (`subs`, `bne`).
fn spin(iterations: u32) {
    // SAFETY: a register countdown; touches no memory.
    unsafe {
        core::arch::asm!(
            "1:",
            "subs {0}, {0}, #1",
            "bne 1b",
            inout(reg) iterations => _,
            options(nomem, nostack),
        );
    }
}

/// Semihosting stdout as a `fmt::Write`.
struct Console(hio::HostStream);

impl Write for Console {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0.write_all(s.as_bytes()).map_err(|_| fmt::Error)
    }
}

const PAINT: u32 = 0x5afe_c0de;

/// Paints the free stack below the current frame; returns the painted range.
fn paint_stack() -> (usize, usize) {
    let bottom = (&raw const __ebss as usize + 7) & !7;
    let sp = cortex_m::register::msp::read() as usize;
    let top = (sp - 256) & !3;
    let mut p = bottom;
    while p < top {
        // SAFETY: between the end of .bss and 256 bytes below the live stack pointer: memory
        // that nothing uses yet.
        unsafe { core::ptr::write_volatile(p as *mut u32, PAINT) };
        p += 4;
    }
    (bottom, top)
}

/// The deepest the stack reached since [`paint_stack`].
fn stack_peak((bottom, top): (usize, usize)) -> usize {
    let mut p = bottom;
    // SAFETY: reads of the painted range, which is RAM.
    while p < top && unsafe { core::ptr::read_volatile(p as *const u32) } == PAINT {
        p += 4;
    }
    &raw const _stack_start as usize - p
}

#[entry]
fn main() -> ! {
    let painted = paint_stack();
    let heap_start = &raw const _heap_start as usize;
    let heap_size = &raw const _heap_size as usize;
    // SAFETY: called once, before any allocation, on PSRAM that nothing else uses.
    unsafe { HEAP.heap.init(heap_start, heap_size) };

    let Ok(stdout) = hio::hstdout() else {
        exit(debug::EXIT_FAILURE);
    };
    let mut console = Console(stdout);

    start_timer();
    const CALIBRATION: u32 = 5_000_000;
    let t0 = timer();
    spin(CALIBRATION);
    let elapsed = u64::from(t0.wrapping_sub(timer())).max(1);
    let per_tick_x1024 = 2 * u64::from(CALIBRATION) * 1024 / elapsed;
    let _ = writeln!(
        console,
        "firmware: mps2-an386 Cortex-M4F; calibration: {} instructions in {elapsed} timer ticks ({:.2} per tick)",
        2 * CALIBRATION,
        per_tick_x1024 as f64 / 1024.0
    );
    let mut clock = Instructions {
        last: timer(),
        ticks: 0,
        per_tick_x1024,
    };

    match workload::run(&mut clock) {
        Ok(report) => {
            let memory = Memory {
                heap_peak: HEAP.peak.load(Ordering::Relaxed) as u64,
                stack_peak: stack_peak(painted) as u64,
            };
            if report.write(&mut console, Some(memory)).is_err() {
                exit(debug::EXIT_FAILURE);
            }
            exit(debug::EXIT_SUCCESS)
        }
        Err(e) => {
            let _ = writeln!(console, "firmware: the workload failed: {e}");
            exit(debug::EXIT_FAILURE)
        }
    }
}

/// Ends the emulation with `status` (semihosting `SYS_EXIT`); waits for interrupts forever on
/// a debugger that does not stop.
fn exit(status: debug::ExitStatus) -> ! {
    debug::exit(status);
    loop {
        cortex_m::asm::wfi();
    }
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    if let Ok(stdout) = hio::hstdout() {
        let _ = writeln!(Console(stdout), "firmware: panic: {info}");
    }
    exit(debug::EXIT_FAILURE)
}
