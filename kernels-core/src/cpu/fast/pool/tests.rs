use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use core::ops::Range;
use core::sync::atomic::{AtomicUsize, Ordering};

use super::*;

/// A value that depends on the index only, so any split must give the same bits.
fn value(i: usize) -> f32 {
    let x = i as f32 * 0.37 + 1.0;
    (x.sqrt() * 1.0001).mul_add(x, -0.5) / (x + 3.0)
}

fn fill(threads: usize, len: usize, grain: usize) -> Vec<f32> {
    let mut out = vec![0.0f32; len];
    for_slices_on(threads, &mut out, 1, grain, &|r, part| {
        for (i, o) in r.zip(part) {
            *o = value(i);
        }
        Ok(())
    })
    .expect("fill");
    out
}

#[test]
fn ranges_cover_the_length_in_whole_grains() {
    for threads in [1, 2, 3, 8] {
        for len in [0, 1, 5, 16, 17, 100, 1000, 4099] {
            for grain in [1, 3, 16, 24] {
                let rs: Vec<Range<usize>> = ranges(threads, len, grain).collect();
                let mut at = 0;
                for r in &rs {
                    assert_eq!(r.start, at, "t={threads} len={len} grain={grain}");
                    assert!(r.end > r.start && r.start % grain == 0);
                    at = r.end;
                }
                assert_eq!(at, len);
                assert!(rs.len() <= (threads * CHUNKS_PER_THREAD).max(1));
                if threads == 1 {
                    assert!(rs.len() <= 1);
                }
            }
        }
    }
}

#[test]
fn ranges_share_the_grains_evenly_where_a_cut_allows() {
    // (threads, grains, the busiest thread's grains at best).
    for (threads, grains, even) in [
        (2, 14, 7),
        (2, 12, 6),
        (2, 76, 38),
        (3, 14, 5),
        (2, 2, 1),
        (4, 9, 3),
    ] {
        let rs: Vec<Range<usize>> = ranges(threads, grains * 64, 64).collect();
        let mut load = vec![0; threads];
        for (i, r) in rs.iter().enumerate() {
            load[i % threads] += r.len() / 64;
        }
        let most = load.iter().copied().max().unwrap_or(0);
        assert_eq!(most, even, "threads {threads}, grains {grains}: {rs:?}");
        assert!(rs.len() <= threads * CHUNKS_PER_THREAD);
    }
}

#[test]
fn any_thread_count_gives_the_bits_of_one() {
    for len in [1, 2, 31, 64, 1000, 100_003] {
        let one = fill(1, len, 1);
        for threads in [2, 3, 4, 7] {
            for grain in [1, 8, 64] {
                let got = fill(threads, len, grain);
                assert!(
                    got.iter()
                        .zip(&one)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "len={len} threads={threads} grain={grain}"
                );
            }
        }
    }
}

#[test]
fn every_range_runs_once() {
    for threads in [2, 3, 5] {
        for len in [2, 9, 1000] {
            let hits: Vec<AtomicUsize> = (0..len).map(|_| AtomicUsize::new(0)).collect();
            for_ranges_on(threads, len, 1, &|r| {
                for i in r {
                    hits[i].fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            })
            .expect("ranges");
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
        }
    }
}

#[test]
fn many_tiny_products_in_a_row() {
    let mut out = vec![0u64; 37];
    for round in 0..20_000u64 {
        for_slices_on(2, &mut out, 1, 1, &|r, part| {
            for (i, o) in r.zip(part) {
                *o = round * 100 + i as u64;
            }
            Ok(())
        })
        .expect("tiny product");
        assert!(
            out.iter()
                .enumerate()
                .all(|(i, &o)| o == round * 100 + i as u64)
        );
    }
}

#[test]
fn short_last_unit() {
    // 10 values in units of 4: ranges of units 0..3, the last slice 2 values long.
    let mut out = vec![0usize; 10];
    for_slices_on(3, &mut out, 4, 1, &|r, part| {
        assert_eq!(part.len(), (r.end * 4).min(10) - r.start * 4);
        for (k, o) in part.iter_mut().enumerate() {
            *o = r.start * 4 + k;
        }
        Ok(())
    })
    .expect("slices");
    assert_eq!(out, (0..10).collect::<Vec<_>>());
    assert!(for_slices_on(2, &mut out, 0, 1, &|_, _| Ok(())).is_err());
}

#[test]
fn the_lowest_failing_range_is_reported_after_all_ran() {
    for threads in [1, 2, 4] {
        let ran = AtomicUsize::new(0);
        let r = for_ranges_on(threads, 64, 1, &|r| {
            ran.fetch_add(r.len(), Ordering::Relaxed);
            if r.contains(&40) || r.contains(&50) {
                return Err(Error::bad_shape(
                    "test",
                    "x",
                    &[r.start],
                    String::from("bad"),
                ));
            }
            Ok(())
        });
        let e = alloc::format!("{:?}", r.expect_err("an error"));
        let first = ranges(threads, 64, 1)
            .find(|r| r.contains(&40))
            .expect("range of 40");
        assert!(
            e.contains(&alloc::format!("[{}]", first.start)),
            "{e} (threads {threads})"
        );
        assert_eq!(ran.load(Ordering::Relaxed), 64);
    }
}

#[cfg(not(target_arch = "wasm32"))]
#[test]
fn a_panic_reaches_the_caller_and_the_pool_survives() {
    for _ in 0..20 {
        let r = std::panic::catch_unwind(|| {
            for_ranges_on(2, 100, 1, &|r| {
                if r.contains(&99) {
                    panic!("range panic (expected by the test)");
                }
                Ok(())
            })
        });
        assert!(r.is_err());
    }
    assert_eq!(fill(2, 1000, 1), fill(1, 1000, 1));
}

#[cfg(not(target_arch = "wasm32"))]
#[test]
fn concurrent_and_nested_callers_finish() {
    use std::sync::mpsc;
    use std::time::Duration;
    let (tx, rx) = mpsc::channel();
    for caller in 0..3usize {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let mut ok = true;
            for round in 0..300usize {
                let mut out = vec![0usize; 50];
                // Every range makes a product of its own: nested calls run inline.
                let r = for_slices_on(2, &mut out, 1, 1, &|r, part| {
                    for (i, o) in r.zip(part) {
                        let inner = AtomicUsize::new(0);
                        for_ranges_on(2, i + 1, 1, &|q| {
                            inner.fetch_add(q.len(), Ordering::Relaxed);
                            Ok(())
                        })?;
                        *o = inner.load(Ordering::Relaxed) + caller + round;
                    }
                    Ok(())
                });
                ok &= r.is_ok()
                    && out
                        .iter()
                        .enumerate()
                        .all(|(i, &o)| o == i + 1 + caller + round);
            }
            let _ = tx.send(ok);
        });
    }
    drop(tx);
    for _ in 0..3 {
        let ok = rx
            .recv_timeout(Duration::from_secs(120))
            .expect("a caller did not finish: deadlock");
        assert!(ok);
    }
}

#[test]
fn rows_of_three_outputs_reach_their_ranges_and_sizes_are_checked() {
    for (rows, grain) in [(1, 1), (7, 1), (64, 3), (1000, 16)] {
        let (mut a, mut b, mut c) = (
            vec![0u32; rows * 3],
            vec![0.0f32; rows],
            vec![0i8; rows * 2],
        );
        for_rows3(
            rows,
            grain,
            (&mut a, &mut b, &mut c),
            (3, 1, 2),
            &|r, a, b, c| {
                assert_eq!(
                    (a.len(), b.len(), c.len()),
                    (3 * r.len(), r.len(), 2 * r.len())
                );
                for (i, row) in r.enumerate() {
                    a[3 * i..3 * i + 3].fill(row as u32);
                    b[i] = value(row);
                    c[2 * i..2 * i + 2].fill((row % 100) as i8);
                }
                Ok(())
            },
        )
        .expect("rows");
        for row in 0..rows {
            assert!(a[3 * row..3 * row + 3].iter().all(|&v| v == row as u32));
            assert_eq!(b[row].to_bits(), value(row).to_bits());
            assert!(
                c[2 * row..2 * row + 2]
                    .iter()
                    .all(|&v| v == (row % 100) as i8)
            );
        }
    }
    let (mut a, mut b, mut c) = (vec![0u8; 6], vec![0u8; 2], vec![0u8; 3]);
    let none = &|_: Range<usize>, _: &mut [u8], _: &mut [u8], _: &mut [u8]| Ok(());
    assert!(for_rows3(2, 1, (&mut a, &mut b, &mut c), (3, 1, 2), none).is_err());
    assert!(for_rows3(2, 1, (&mut a, &mut b, &mut c[..2]), (3, 1, 1), none).is_ok());
}
