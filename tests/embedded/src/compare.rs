//! Target against host: every check names what it compared and how close the two were.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use kernels_core::numerics::{self, Budget};

use crate::report::Report;
use crate::workload::{prompt, text};
use crate::{LOGITS_BUDGET, ROLLOUT_BUDGET};

/// One comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    pub what: String,
    pub pass: bool,
    /// How close, in words: the errors found and the budget.
    pub detail: String,
}

/// Largest errors and bit-equal count of a float comparison.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Closeness {
    pub max_abs: f64,
    pub max_rel: f64,
    pub bit_equal: usize,
    pub len: usize,
    pub pass: bool,
}

/// Compares `target` with `host` under `budget` (NaN and infinity positions must agree).
pub fn closeness(target: &[f32], host: &[f32], budget: Budget) -> Closeness {
    let (atol, rtol) = budget.at(1);
    let c = numerics::compare(target, host, atol, rtol);
    Closeness {
        max_abs: c.max_abs_err,
        max_rel: c.max_rel_err,
        bit_equal: target
            .iter()
            .zip(host)
            .filter(|(a, b)| a.to_bits() == b.to_bits())
            .count(),
        len: host.len(),
        pass: c.pass && target.len() == host.len(),
    }
}

fn float_check(
    what: &str,
    target: (&[f32], &[usize]),
    host: (&[f32], &[usize]),
    budget: Budget,
) -> Check {
    if target.1 != host.1 {
        return Check {
            what: what.into(),
            pass: false,
            detail: format!(
                "shape {:?} on the target, {:?} on the host",
                target.1, host.1
            ),
        };
    }
    let c = closeness(target.0, host.0, budget);
    let rule = if budget.is_exact() {
        String::from("bit for bit")
    } else {
        let (atol, rtol) = budget.at(1);
        format!("abs diff <= {atol:e} + {rtol:e} * abs(host)")
    };
    Check {
        what: what.into(),
        pass: c.pass,
        detail: format!(
            "{} of {} values bit-equal; max abs diff {:.2e}, max rel diff {:.2e} (budget: {rule})",
            c.bit_equal, c.len, c.max_abs, c.max_rel
        ),
    }
}

/// Every check of `target` against `host`.
pub fn compare(target: &Report, host: &Report) -> Vec<Check> {
    let mut checks = Vec::new();
    if target.answers.len() != host.answers.len() {
        checks.push(Check {
            what: "greedy answers".into(),
            pass: false,
            detail: format!(
                "{} answers on the target, {} on the host",
                target.answers.len(),
                host.answers.len()
            ),
        });
    }
    for (t, h) in target.answers.iter().zip(&host.answers) {
        let same = t == h;
        let correct = crate::workload::read_answer(&text(&h.tokens)) == Some(h.a + h.b);
        checks.push(Check {
            what: format!("greedy {}", prompt(h.a, h.b)),
            pass: same,
            detail: if same {
                format!(
                    "{} on both ({})",
                    text(&h.tokens),
                    if correct { "correct" } else { "wrong sum" }
                )
            } else {
                format!(
                    "target {}{} , host {}{}",
                    prompt(t.a, t.b),
                    text(&t.tokens),
                    prompt(h.a, h.b),
                    text(&h.tokens)
                )
            },
        });
    }
    checks.push(float_check(
        "logits of every position",
        (&target.logits, &target.logits_shape),
        (&host.logits, &host.logits_shape),
        LOGITS_BUDGET,
    ));
    checks.push(float_check(
        "rollout initial state (f64 simulator)",
        (&target.state, &[target.state.len()]),
        (&host.state, &[host.state.len()]),
        Budget::EXACT,
    ));
    checks.push(float_check(
        "world-model rollout",
        (&target.rollout, &target.rollout_shape),
        (&host.rollout, &host.rollout_shape),
        ROLLOUT_BUDGET,
    ));
    checks
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::report::{Answer, Cost, Report};
    use alloc::vec;

    fn report() -> Report {
        Report {
            answers: vec![Answer {
                a: 123,
                b: 456,
                tokens: vec![9, 7, 5, 0, 12],
            }],
            logits: vec![1.0, -2.5, 3.25, f32::NAN],
            logits_shape: vec![2, 2],
            state: vec![0.5, 0.25],
            rollout: vec![0.1, 0.2, 0.3],
            rollout_shape: vec![3, 1],
            cost: Cost::default(),
        }
    }

    #[test]
    fn identical_reports_pass_and_any_difference_fails() {
        let host = report();
        assert!(compare(&host, &host).iter().all(|c| c.pass));

        let mut t = report();
        t.answers[0].tokens[1] = 8;
        let failed: Vec<_> = compare(&t, &host).into_iter().filter(|c| !c.pass).collect();
        assert_eq!(failed.len(), 1, "{failed:?}");
        assert!(failed[0].what.contains("123+456="));

        let mut t = report();
        t.logits[2] += 1e-3;
        assert!(!compare(&t, &host)[1].pass);
        let mut t = report();
        t.logits[2] += 1e-4; // within 2e-4 + 2e-4 * 3.25
        assert!(compare(&t, &host)[1].pass);
        let mut t = report();
        t.logits[3] = 0.0; // NaN must meet NaN
        assert!(!compare(&t, &host)[1].pass);

        let mut t = report();
        t.state[0] = f32::from_bits(t.state[0].to_bits() + 1); // one ulp: the state is exact
        assert!(!compare(&t, &host)[2].pass);

        let mut t = report();
        t.rollout[1] *= 1.001;
        assert!(!compare(&t, &host)[3].pass);
        let mut t = report();
        t.rollout_shape = vec![1, 3];
        assert!(!compare(&t, &host)[3].pass);
    }

    #[test]
    fn reports_round_trip_through_text_and_bad_text_is_refused() {
        let r = report();
        let mem = crate::report::Memory {
            heap_peak: 10,
            stack_peak: 20,
        };
        let text = alloc::format!("QEMU noise\n{}trailing\n", r.to_text(Some(mem)));
        let (back, m) = Report::parse(&text).unwrap();
        assert_eq!(m, Some(mem));
        assert!(compare(&back, &r).iter().all(|c| c.pass));
        assert_eq!(back.logits[3].to_bits(), r.logits[3].to_bits());

        assert!(Report::parse("nothing here").is_err());
        let cut = r.to_text(None).replace("end\n", "");
        assert!(Report::parse(&cut).unwrap_err().contains("cut short"));
        let short = r.to_text(None).replace(" 3f800000", "");
        assert!(
            Report::parse(&short)
                .unwrap_err()
                .contains("values for shape")
        );
        let no_state: String = r
            .to_text(None)
            .lines()
            .filter(|l| !l.starts_with("state"))
            .flat_map(|l| [l, "\n"])
            .collect();
        assert!(Report::parse(&no_state).unwrap_err().contains("`state`"));
    }
}
