//! The web page's logic. The page itself (wasm-bindgen, WebGPU, panels) lands with its issue;
//! what is here is the part that does not need a browser: the op table it will render.

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
