//! Decode's products on the emulated device through `matvec_stream` (f32 weights since CUDA's
//! `f32_matvec`; f32, f16 and bf16 rows read 16 bytes a lane when their length is a multiple of
//! 8, Q8_0, Q4_0 and Q4_K in units of a block, every other dtype and shape element by element;
//! teams of 4 to 256 threads summed by warp shuffles and, past a warp, in shared memory),
//! against the CPU reference: seeded inputs, one to eight rows, odd and tiny `k`, the gated
//! form, and NaN and infinities in the activations and the weights.

use kernels_core::op::Direction;
use kernels_core::parity::Case;
use kernels_core::{Backend, DType, Op, Rng, Tensor};

use super::CudaBackend;
use super::emulator::EmulatedDevice;
use super::emulator::tests::Shared;
use super::kernels::host;
use crate::parity::{check_all, failures};

fn weight(rng: &mut Rng, dtype: DType, n: usize, k: usize, hostile: bool) -> Tensor {
    let mut v: Vec<f32> = (0..n * k).map(|_| rng.normal() * 0.1).collect();
    if hostile && v.len() > 3 {
        v[1] = f32::INFINITY;
        let at = v.len() - 2;
        v[at] = f32::NAN;
    }
    match dtype {
        DType::F32 => Tensor::from_f32(&[n, k], v).unwrap(),
        // No Q6_K quantizer: random quants and sub-block scales under a small f16 scale (a
        // non-finite one where hostile).
        DType::Q6_K => {
            let mut bytes: Vec<u8> = (0..n * k / 256 * 210)
                .map(|_| rng.next_u64() as u8)
                .collect();
            for (b, block) in bytes.chunks_mut(210).enumerate() {
                // f16 bits: infinity, NaN, or 2^-14 times 1..2 (weights up to about 0.5).
                let d: u16 = match (hostile, b) {
                    (true, 0) => 0x7c00,
                    (true, 1) => 0x7e00,
                    _ => 0x0400 | (rng.next_u64() & 0x3ff) as u16,
                };
                block[208..].copy_from_slice(&d.to_le_bytes());
            }
            Tensor::from_raw(&[n, k], dtype, bytes).unwrap()
        }
        d => Tensor::from_raw(&[n, k], d, kernels_core::quant::quantize(d, &v).unwrap()).unwrap(),
    }
}

#[test]
fn cuda_matvec_matches_the_reference_for_every_weight_dtype() {
    if host::compiler().is_none() {
        return;
    }
    let dev = EmulatedDevice::new(64).unwrap_or_else(|e| panic!("{e}"));
    let dev: &'static EmulatedDevice = Box::leak(Box::new(dev));
    let be = CudaBackend::with_engine(Box::new(Shared(dev)));
    let mut rng = Rng::new(0x3A7E);
    let mut cases = Vec::new();
    let halves = [
        (1, 1, 1, false),
        (1, 7, 33, false),
        (3, 5, 130, false),
        (8, 9, 64, false),
        (2, 6, 257, true),
        (5, 4, 96, true),
        // Rows of a multiple of 8 (16-byte loads), several units a lane; teams of 32 and 128
        // threads (four warps summed in shared memory).
        (2, 3, 1024, false),
        (1, 3, 4096, true),
        (1, 2, 8, false),
    ];
    // Blocks of 32: one block (a team of 4 lanes), a few, many a lane, NaN and infinity.
    let blocks32 = [
        (1, 3, 32, false),
        (3, 5, 96, true),
        (8, 2, 256, false),
        (2, 4, 2048, false),
    ];
    // Blocks of 256.
    let blocks256 = [(1, 3, 256, false), (3, 2, 512, true), (2, 5, 2048, false)];
    // f32 and every weight dtype, with shapes of its block size.
    for dtype in std::iter::once(DType::F32).chain(DType::WEIGHT) {
        let shapes: &[(usize, usize, usize, bool)] = match dtype.block_elems() {
            1 => &halves,
            32 => &blocks32,
            _ => &blocks256,
        };
        for &(rows, n, k, hostile) in shapes {
            let mut x: Vec<f32> = (0..rows * k).map(|_| rng.normal()).collect();
            if hostile {
                x[0] = f32::NAN;
                let at = x.len() - 1;
                x[at] = f32::NEG_INFINITY;
            }
            let x = Tensor::from_f32(&[rows, k], x).unwrap();
            let w = weight(&mut rng, dtype, n, k, hostile);
            let matmul = Op::Matmul {
                trans_a: false,
                trans_b: true,
            };
            cases.push(Case {
                op: matmul,
                inputs: vec![x.clone(), w],
                large: false,
            });
            // The gated form over [gate; up]: 2n rows of the weight.
            let w2 = weight(&mut rng, dtype, 2 * n, k, hostile);
            cases.push(Case {
                op: Op::MatmulSwiglu,
                inputs: vec![x, w2],
                large: false,
            });
        }
    }
    let rows = check_all(&cases, &be);
    let ran = rows
        .iter()
        .filter(|r| r.dir == Direction::Forward && r.error.is_none())
        .count();
    assert!(
        ran >= cases.len(),
        "{ran} of {} forward cases ran",
        cases.len()
    );
    let bad = failures(&rows);
    assert!(
        bad.is_empty(),
        "{} failures:\n{}",
        bad.len(),
        bad.join("\n")
    );
    // Forward products took matvec, not an SGEMM with one row.
    let launched = dev.launched();
    assert!(
        launched.contains(&("quant", "matvec_stream")),
        "{launched:?}"
    );
    // An f32 decode product alone: a matvec launch, no GEMM.
    let x = be
        .upload(&Tensor::from_f32(&[2, 40], vec![0.5; 80]).unwrap())
        .unwrap();
    let w = be
        .upload(&weight(&mut rng, DType::F32, 3, 40, false))
        .unwrap();
    let c0 = be.counters();
    let op = Op::Matmul {
        trans_a: false,
        trans_b: true,
    };
    be.run(&op, Direction::Forward, &[&x, &w]).unwrap();
    let c1 = be.counters();
    assert_eq!((c1.gemms - c0.gemms, c1.launches - c0.launches), (0, 1));
}
