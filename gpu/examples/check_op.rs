//! Run one op on your own data, on every backend this machine has, and check each result
//! against the CPU reference kernel within the op's published error budget.
//!
//! `cargo run -p kernels-gpu --example check_op`

use std::rc::Rc;

use kernels_core::numerics::compare;
use kernels_core::op::{Direction, Op, OpKind};
use kernels_core::{Backend, CpuBackend, Tensor};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Your data: three rows of logits, one with a NaN (it must come out where the reference
    // puts it) and one with values far apart.
    #[rustfmt::skip]
    let x = Tensor::from_f32(&[3, 4], vec![
        1.0, 2.0, 3.0, 4.0,
        -1e4, 0.0, 1e4, 5.0,
        0.5, f32::NAN, 0.5, 0.5,
    ])?;
    let op = Op::default_for(OpKind::Softmax)?;

    // The specification: the plain-loop reference kernel.
    let want = CpuBackend::reference().run(&op, Direction::Forward, &[&x])?[0].to_f32_vec()?;
    // The op's budget at this reduced length: |got - want| <= atol + rtol * |want|.
    let (atol, rtol) = op.spec().budget.at(op.reduced_len(&[x.shape()]));

    let mut backends: Vec<Rc<dyn Backend>> = vec![Rc::new(CpuBackend::new())];
    match kernels_gpu::WgpuBackend::new() {
        Ok(gpu) => backends.push(Rc::new(gpu)),
        Err(e) => println!("no wgpu adapter ({e}): checking the CPU only"),
    }
    for backend in backends {
        let out = backend.run(&op, Direction::Forward, &[&backend.upload(&x)?])?;
        backend.flush()?;
        let got = pollster::block_on(backend.download(&out[0]))?.to_f32_vec()?;
        let c = compare(&got, &want, atol, rtol);
        println!(
            "{}: max abs error {:.1e}, max rel error {:.1e} (budget {atol:.0e} + {rtol:.0e} |ref|): {}",
            backend.name(),
            c.max_abs_err,
            c.max_rel_err,
            if c.pass { "pass" } else { "FAIL" }
        );
        if !c.pass {
            return Err(format!("{} differs from the reference: {got:?}", backend.name()).into());
        }
    }
    Ok(())
}
