//! Run one op on your own data, on every backend this machine has, and check each result
//! against the CPU reference kernel within the op's published error budget. (The README's
//! "Use it as a library" shows this file's code; a test keeps the two equal.)
//!
//! `cargo run -p native-cli --example check_op`

use std::rc::Rc;

use kernels_core::numerics::compare;
use kernels_core::op::{Direction, Op, OpKind};
use kernels_core::{Backend, CpuBackend, Tensor};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Your data: a NaN must come out where the reference puts it.
    let x = Tensor::from_f32(&[2, 4], vec![1.0, 2.0, 3.0, 4.0, -1e4, 0.0, 1e4, f32::NAN])?;
    let op = Op::default_for(OpKind::Softmax)?;
    // The specification: the plain-loop reference kernel, and the op's budget at this size.
    let want = CpuBackend::reference().run(&op, Direction::Forward, &[&x])?[0].to_f32_vec()?;
    let (atol, rtol) = op.spec().budget.at(op.reduced_len(&[x.shape()]));

    let mut backends: Vec<Rc<dyn Backend>> = vec![Rc::new(CpuBackend::new())];
    match kernels_gpu::WgpuBackend::new() {
        Ok(gpu) => backends.push(Rc::new(gpu)),
        Err(e) => println!("no wgpu adapter ({e}): the CPU only"),
    }
    for backend in backends {
        let out = backend.run(&op, Direction::Forward, &[&backend.upload(&x)?])?;
        backend.flush()?;
        let got = pollster::block_on(backend.download(&out[0]))?.to_f32_vec()?;
        let c = compare(&got, &want, atol, rtol);
        println!(
            "{}: max abs error {:.1e}, pass {}",
            backend.name(),
            c.max_abs_err,
            c.pass
        );
        if !c.pass {
            return Err(format!("{} differs from the reference: {got:?}", backend.name()).into());
        }
    }
    Ok(())
}
