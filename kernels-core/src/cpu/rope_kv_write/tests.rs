// wasm-pack test runs these in the browser too.
use super::*;
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

use crate::cpu::run;
use crate::cpu::testutil::*;
use crate::gradcheck::{Options, check_op};
use crate::op::{Direction, Op, RopeScaling};

fn rand(seed: u64, shape: &[usize]) -> Owned<f64> {
    crate::cpu::testutil::rand(seed, shape, -1., 1.)
}

/// The heads `first..first + n` of `qkv [b, heads, s, d]` as a tensor.
fn heads(qkv: &Owned<f64>, first: usize, n: usize) -> Owned<f64> {
    let [b, h, s, d] = qkv.shape[..] else {
        panic!("rank 4")
    };
    let f = qkv.floats();
    let mut out = Vec::new();
    for bi in 0..b {
        let at = (bi * h + first) * s * d;
        out.extend_from_slice(&f[at..at + n * s * d]);
    }
    t(&[b, n, s, d], &out)
}

/// rope_kv_write is rope on q and k and kv_write of k and v, bit for bit, for each layout and
/// a scaled rope.
#[test]
fn rope_kv_write_is_rope_then_kv_write() {
    for (i, (rope, pos, hq, hkv, s, d, cap)) in [
        (Op::rope(10000.0, 3, false), 3, 4, 2, 1, 8, 5),
        (Op::rope(500000.0, 0, true), 0, 1, 1, 6, 6, 6),
        (
            Op::Rope {
                theta: 10000.0,
                offset: 2,
                interleaved: false,
                scaling: RopeScaling::Linear,
                factor: 4.0,
                low: 1.0,
                high: 4.0,
                original_context: 0,
            },
            2,
            3,
            1,
            3,
            10,
            9,
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let seed = 10 * i as u64;
        let b = 2;
        let kc = rand(seed, &[b, hkv, cap, d]);
        let vc = rand(seed + 1, &[b, hkv, cap, d]);
        let qkv = rand(seed + 2, &[b, hq + 2 * hkv, s, d]);
        let op = Op::rope_kv_write_from(&rope).unwrap();
        let y = run(&op, Direction::Forward, &[kc.view(), vc.view(), qkv.view()]).unwrap();
        let f = Direction::Forward;
        let q = run(&rope, f, &[heads(&qkv, 0, hq).view()]).unwrap();
        let k = run(&rope, f, &[heads(&qkv, hq, hkv).view()]).unwrap();
        let v = heads(&qkv, hq + hkv, hkv);
        let kw = Op::KvWrite { pos };
        let k_out = run(&kw, f, &[kc.view(), k[0].view()]).unwrap();
        let v_out = run(&kw, f, &[vc.view(), v.view()]).unwrap();
        assert_eq!(y[0].shape, [b, hkv, cap, d]);
        assert_eq!(y[2].shape, [b, hq, s, d]);
        assert_eq!(y[0].floats(), k_out[0].floats(), "case {i}: k_out");
        assert_eq!(y[1].floats(), v_out[0].floats(), "case {i}: v_out");
        assert_eq!(y[2].floats(), q[0].floats(), "case {i}: q");
        // In place on the caches gives the same.
        let dims = QkvDims::new(&Freqs::plain(1.0), pos, &kc.shape, &vc.shape, &qkv.shape).unwrap();
        let freqs = match rope {
            Op::Rope {
                theta,
                scaling,
                factor,
                low,
                high,
                original_context,
                ..
            } => Freqs {
                theta,
                scaling,
                factor,
                low,
                high,
                original_context,
            },
            _ => unreachable!(),
        };
        let interleaved = matches!(
            rope,
            Op::Rope {
                interleaved: true,
                ..
            }
        );
        let (mut kc2, mut vc2) = (kc.floats().to_vec(), vc.floats().to_vec());
        let q2 = write_into(&dims, &freqs, interleaved, &mut kc2, &mut vc2, qkv.floats()).unwrap();
        assert_eq!(kc2, y[0].floats());
        assert_eq!(vc2, y[1].floats());
        assert_eq!(q2, y[2].floats());
    }
}

#[test]
fn rope_kv_write_backward_matches_finite_differences() {
    for (op, kc, qkv) in [
        (
            Op::rope_kv_write(10000.0, 2, false),
            [2, 1, 4, 4],
            [2, 4, 2, 4],
        ),
        (
            Op::rope_kv_write(10000.0, 0, true),
            [1, 2, 3, 6],
            [1, 6, 3, 6],
        ),
    ] {
        let r = check_op(
            &op,
            &[rand(1, &kc), rand(2, &kc), rand(3, &qkv)],
            Options::default(),
        )
        .unwrap();
        assert!(r.pass(), "{op}: {r:?}");
    }
}

#[test]
fn rope_kv_write_rejects_what_does_not_fit() {
    let cache = rand(1, &[1, 2, 4, 4]);
    let fwd = |op: Op, k: &Owned<f64>, v: &Owned<f64>, qkv: &Owned<f64>| {
        run(&op, Direction::Forward, &[k.view(), v.view(), qkv.view()])
    };
    let ok = rand(2, &[1, 6, 2, 4]);
    assert!(fwd(Op::rope_kv_write(1e4, 2, false), &cache, &cache, &ok).is_ok());
    // Past the cache's end, at the largest position.
    let e = fwd(Op::rope_kv_write(1e4, 3, false), &cache, &cache, &ok).unwrap_err();
    assert!(matches!(e, Error::BadAttr { attr: "pos", .. }), "{e:?}");
    assert!(
        fwd(
            Op::rope_kv_write(1e4, usize::MAX, false),
            &cache,
            &cache,
            &ok
        )
        .is_err()
    );
    // No q head; another head_dim; another batch; caches that differ; odd head_dim.
    let e = fwd(
        Op::rope_kv_write(1e4, 0, false),
        &cache,
        &cache,
        &rand(3, &[1, 4, 1, 4]),
    );
    assert!(matches!(e, Err(Error::BadShape { .. })), "{e:?}");
    assert!(
        fwd(
            Op::rope_kv_write(1e4, 0, false),
            &cache,
            &cache,
            &rand(3, &[1, 6, 1, 2])
        )
        .is_err()
    );
    assert!(
        fwd(
            Op::rope_kv_write(1e4, 0, false),
            &cache,
            &cache,
            &rand(3, &[2, 6, 1, 4])
        )
        .is_err()
    );
    let other = rand(4, &[1, 2, 5, 4]);
    assert!(fwd(Op::rope_kv_write(1e4, 0, false), &cache, &other, &ok).is_err());
    let odd = rand(5, &[1, 1, 4, 3]);
    assert!(
        fwd(
            Op::rope_kv_write(1e4, 0, false),
            &odd,
            &odd,
            &rand(6, &[1, 3, 1, 3])
        )
        .is_err()
    );
    // A bad rotation attribute.
    assert!(fwd(Op::rope_kv_write(-1.0, 0, false), &cache, &cache, &ok).is_err());
}
