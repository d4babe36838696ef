//! The web page: backend picker, parity panel, benchmark panel, and the sections the demos fill.
//!
//! [`report`] is what the page shows, as plain data (parity lines of the CPU and WebGPU against
//! the reference, summaries, the JSON export, the benchmark chart): it builds and is tested
//! natively. `page` (wasm32 only) is the browser glue: DOM, `navigator.gpu`, the event loop.
//! [`world`] is the GRU world-model section, split the same way (its glue in `world::dom`),
//! [`llm`] the transformer section (its glue in `llm::dom`) and [`train`] the Train section
//! (its glue in `train::dom`; the weights download through [`zip`]). What `page` and the
//! sections' glue share (the backend state, DOM helpers, error reporting) is `app` (wasm32
//! only): `page` uses the sections, the sections use `app`, and neither `app` nor a section uses
//! `page`. The Train section hands its model to the transformer section (`llm::dom`).
//!
//! Automation hooks (stable): `#backend` holds `webgpu` or `cpu`; each parity row is
//! `tr[data-op][data-dir][data-pass]`; `#parity-summary` carries `data-passed` and
//! `data-failed`; the body gets `data-state="done"` when an autorun finishes (the GRU section's,
//! the transformer section's and the Train section's hooks are listed in `world::dom`,
//! `llm::dom` and `train::dom`). `?autorun=parity` (or `bench`, `gru`, `llm`, or `all`) runs
//! panels on load (`llm` with `?prompt=...` when given; `?quantize=q4_k` (or `q8_0`, `q4_0`,
//! `stored`) sets the transformer section's weights choice before its demo model loads);
//! `?autorun=train&steps=N` trains in the
//! Train section (not part of `all`; `&batch=`, `&lr=`, `&eval_every=`, `&eval_problems=`,
//! `&parity_steps=` set its inputs, `&start=small` trains the small model, `&start=finetune`
//! starts from the transformer section's model, `&until=0.9` stops at that held-out
//! accuracy): `#train[data-state][data-step][data-loss]`, `#train-parity[data-max-diff]`.
//! `?backend=cpu` forces the CPU backend. `?threads=N` sets the wasm CPU backend's threads in
//! the threaded build ([`threads`]); `#threads[data-threads][data-build][data-isolated]` says
//! how many run and why.

pub mod llm;
pub mod report;
pub mod train;
pub mod world;
pub mod zip;

#[cfg(target_arch = "wasm32")]
mod app;
#[cfg(target_arch = "wasm32")]
mod assets;
#[cfg(target_arch = "wasm32")]
mod page;
#[cfg(target_arch = "wasm32")]
pub mod threads;

use kernels_core::op::OpKind;

/// One line per op: name, inputs, outputs, whether it has a backward.
pub fn op_table() -> Vec<String> {
    OpKind::ALL
        .iter()
        .map(|k| {
            let s = k.spec();
            let inputs: Vec<&str> = s.inputs.iter().map(|i| i.name).collect();
            format!(
                "{} ({}) -> ({}){}",
                k.name(),
                inputs.join(", "),
                s.outputs.join(", "),
                if s.differentiable() {
                    ", differentiable"
                } else {
                    ""
                }
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn table_lists_every_op() {
        let t = super::op_table();
        assert_eq!(t.len(), kernels_core::op::OpKind::ALL.len());
        assert!(t[0].starts_with("matmul (a, b) -> (out)"));
    }
}
