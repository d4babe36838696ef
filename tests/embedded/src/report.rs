//! The firmware's report: plain text lines, floats as the hex of their bits (nothing is lost in
//! printing), between a `begin` and an `end` line so that anything else on the console is
//! ignored.
//!
//! ```text
//! begin kernels-embedded 1
//! answer 123 456 9 7 5 0 12          a, b, then the greedy token ids
//! logits 8 13 3f8ccccd ...            shape, then the values
//! state 64 ...                        the rollout's initial state
//! rollout 10 64 ...                   member 0's predictions, step by step
//! cost llama_load answers prefill decode logits world_load rollout   instructions of each part
//! memory heap_peak stack_peak         bytes
//! end
//! ```

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt::{self, Write};

/// First line of a report.
pub const BEGIN: &str = "begin kernels-embedded 1";
/// Last line of a report.
pub const END: &str = "end";

/// One greedy answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub a: u32,
    pub b: u32,
    pub tokens: Vec<u32>,
}

/// Instructions (or whatever the clock counts) spent in each part of the workload.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cost {
    pub llama_load: u64,
    pub answers: u64,
    /// The first forward of one answer through the KV cache: the 8-token prompt.
    pub prefill: u64,
    /// The other forwards of that answer: [`ANSWER_LEN`](crate::workload::ANSWER_LEN) - 1
    /// single-token decode steps.
    pub decode: u64,
    pub logits: u64,
    pub world_load: u64,
    pub rollout: u64,
}

/// Peak memory of the firmware, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Memory {
    pub heap_peak: u64,
    pub stack_peak: u64,
}

/// What the workload computed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    pub answers: Vec<Answer>,
    /// `[positions, vocab]`.
    pub logits: Vec<f32>,
    pub logits_shape: Vec<usize>,
    /// `[features]`.
    pub state: Vec<f32>,
    /// `[steps, features]`.
    pub rollout: Vec<f32>,
    pub rollout_shape: Vec<usize>,
    pub cost: Cost,
}

fn floats(out: &mut dyn Write, key: &str, shape: &[usize], v: &[f32]) -> fmt::Result {
    out.write_str(key)?;
    for d in shape {
        write!(out, " {d}")?;
    }
    for x in v {
        write!(out, " {:08x}", x.to_bits())?;
    }
    out.write_char('\n')
}

impl Report {
    /// Writes the report, `memory` included when known.
    pub fn write(&self, out: &mut dyn Write, memory: Option<Memory>) -> fmt::Result {
        writeln!(out, "{BEGIN}")?;
        for a in &self.answers {
            write!(out, "answer {} {}", a.a, a.b)?;
            for t in &a.tokens {
                write!(out, " {t}")?;
            }
            out.write_char('\n')?;
        }
        floats(out, "logits", &self.logits_shape, &self.logits)?;
        floats(out, "state", &[self.state.len()], &self.state)?;
        floats(out, "rollout", &self.rollout_shape, &self.rollout)?;
        let c = &self.cost;
        writeln!(
            out,
            "cost {} {} {} {} {} {} {}",
            c.llama_load, c.answers, c.prefill, c.decode, c.logits, c.world_load, c.rollout
        )?;
        if let Some(m) = memory {
            writeln!(out, "memory {} {}", m.heap_peak, m.stack_peak)?;
        }
        writeln!(out, "{END}")
    }

    /// The report as a string.
    pub fn to_text(&self, memory: Option<Memory>) -> String {
        let mut s = String::new();
        // Writing into a String cannot fail.
        let _ = self.write(&mut s, memory);
        s
    }

    /// Reads a report out of console text (lines outside `begin` .. `end` are ignored).
    pub fn parse(text: &str) -> Result<(Report, Option<Memory>), String> {
        let mut lines = text.lines().map(str::trim_end);
        if !lines.by_ref().any(|l| l == BEGIN) {
            return Err(format!("no `{BEGIN}` line: the firmware did not report"));
        }
        let mut r = Report::default();
        let mut memory = None;
        let mut ended = false;
        let mut seen = Vec::new();
        for (n, line) in lines.enumerate() {
            if line == END {
                ended = true;
                break;
            }
            let mut words = line.split_ascii_whitespace();
            let key = words.next().unwrap_or("");
            let bad = |why: &str| format!("report line {}: `{key}`: {why}", n + 2);
            let mut int = |what: &str| -> Result<u64, String> {
                words
                    .next()
                    .ok_or_else(|| bad(&format!("{what} is missing")))?
                    .parse::<u64>()
                    .map_err(|e| bad(&format!("{what}: {e}")))
            };
            match key {
                "answer" => {
                    let a = int("a")? as u32;
                    let b = int("b")? as u32;
                    let tokens = words
                        .map(|w| w.parse::<u32>().map_err(|e| bad(&format!("token: {e}"))))
                        .collect::<Result<Vec<_>, _>>()?;
                    r.answers.push(Answer { a, b, tokens });
                }
                "logits" | "rollout" | "state" => {
                    let rank = if key == "state" { 1 } else { 2 };
                    let shape = (0..rank)
                        .map(|_| int("dimension").map(|d| d as usize))
                        .collect::<Result<Vec<_>, _>>()?;
                    let values = words
                        .map(|w| {
                            u32::from_str_radix(w, 16)
                                .map(f32::from_bits)
                                .map_err(|e| bad(&format!("value `{w}`: {e}")))
                        })
                        .collect::<Result<Vec<_>, _>>()?;
                    let want: usize = shape.iter().product();
                    if values.len() != want {
                        return Err(bad(&format!(
                            "{} values for shape {shape:?} ({want})",
                            values.len()
                        )));
                    }
                    match key {
                        "logits" => (r.logits, r.logits_shape) = (values, shape),
                        "rollout" => (r.rollout, r.rollout_shape) = (values, shape),
                        _ => r.state = values,
                    }
                }
                "cost" => {
                    r.cost = Cost {
                        llama_load: int("llama_load")?,
                        answers: int("answers")?,
                        prefill: int("prefill")?,
                        decode: int("decode")?,
                        logits: int("logits")?,
                        world_load: int("world_load")?,
                        rollout: int("rollout")?,
                    }
                }
                "memory" => {
                    memory = Some(Memory {
                        heap_peak: int("heap_peak")?,
                        stack_peak: int("stack_peak")?,
                    })
                }
                _ => return Err(bad("unknown line")),
            }
            seen.push(key.to_string());
        }
        if !ended {
            return Err(format!("no `{END}` line: the report is cut short"));
        }
        for key in ["answer", "logits", "state", "rollout", "cost"] {
            if !seen.iter().any(|k| k == key) {
                return Err(format!("the report has no `{key}` line"));
            }
        }
        Ok((r, memory))
    }
}
