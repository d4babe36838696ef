//! `kernels op`'s attribute parsing (`Op::from_attr_args`, which `kernels op --attr` calls):
//! any op and any argument strings; never a panic, and an accepted op prints back to arguments
//! that parse to the same op.
#![no_main]

use arbitrary::Arbitrary;
use kernels_core::{Op, OpKind};
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
struct Input {
    kind: u8,
    args: Vec<String>,
}

fuzz_target!(|input: Input| {
    let kind = OpKind::ALL[input.kind as usize % OpKind::ALL.len()];
    let Ok(op) = Op::from_attr_args(kind, &input.args) else {
        return;
    };
    let printed: Vec<String> = op.attrs().iter().map(|(k, v)| format!("{k}={v}")).collect();
    let again = Op::from_attr_args(kind, &printed).expect("printed attributes parse");
    assert_eq!(format!("{op:?}"), format!("{again:?}"), "{printed:?}");
});
