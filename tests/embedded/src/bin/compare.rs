//! `embedded-compare REPORT`: reads the firmware's console output (a [`Report`]), runs the same
//! workload on the host CPU backend, prints each comparison and the firmware's costs, and exits
//! with 1 if any check fails. `embedded-compare --host` prints the host's own report instead.

use std::process::ExitCode;

use kernels_embedded::compare::compare;
use kernels_embedded::report::Report;
use kernels_embedded::workload::{self, ANSWER_LEN, NoClock, PROBLEMS, ROLLOUT_STEPS};

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("embedded-compare: {e}");
            ExitCode::from(2)
        }
    }
}

fn millions(n: u64) -> String {
    format!("{:.2} M", n as f64 / 1e6)
}

fn run() -> Result<bool, String> {
    let arg = std::env::args()
        .nth(1)
        .ok_or("usage: embedded-compare REPORT_FILE | --host")?;
    let host = workload::run(&mut NoClock).map_err(|e| format!("host workload: {e}"))?;
    if arg == "--host" {
        print!("{}", host.to_text(None));
        return Ok(true);
    }
    let text =
        std::fs::read_to_string(&arg).map_err(|e| format!("cannot read report {arg}: {e}"))?;
    let (target, memory) = Report::parse(&text).map_err(|e| format!("{arg}: {e}"))?;

    println!("| check | target vs host | |");
    println!("|---|---|---|");
    let checks = compare(&target, &host);
    for c in &checks {
        let mark = if c.pass { "ok" } else { "FAIL" };
        println!("| {} | {} | {mark} |", c.what, c.detail);
    }
    let c = &target.cost;
    let tokens = (PROBLEMS.len() * ANSWER_LEN) as u64;
    println!();
    println!("instructions on the target (QEMU -icount):");
    println!("  load the llama:          {}", millions(c.llama_load));
    println!(
        "  {} greedy answers:       {} ({} per generated token, prompt of 8 included)",
        PROBLEMS.len(),
        millions(c.answers),
        millions(c.answers / tokens.max(1))
    );
    println!(
        "  one answer by the KV cache: prefill of 8 tokens {}, then {} per decoded token",
        millions(c.prefill),
        millions(c.decode / (ANSWER_LEN as u64 - 1))
    );
    println!("  logits of the prompt:    {}", millions(c.logits));
    println!("  load the GRU member:     {}", millions(c.world_load));
    println!(
        "  {ROLLOUT_STEPS}-step rollout:         {} ({} per step)",
        millions(c.rollout),
        millions(c.rollout / ROLLOUT_STEPS as u64)
    );
    if let Some(m) = memory {
        println!(
            "memory on the target: heap peak {:.0} KiB, stack peak {:.1} KiB",
            m.heap_peak as f64 / 1024.0,
            m.stack_peak as f64 / 1024.0
        );
    }
    let failed = checks.iter().filter(|c| !c.pass).count();
    println!();
    if failed == 0 {
        println!("embedded-compare: all {} checks pass", checks.len());
    } else {
        println!("embedded-compare: {failed} of {} checks FAIL", checks.len());
    }
    Ok(failed == 0)
}
