//! Sizes taken from flags, config fields and file headers, checked before anything of that size
//! is allocated: the bytes are computed with checked arithmetic, then compared with the memory
//! the machine has available and reserved (fallibly, and released at once) so that an
//! address-space limit (`ulimit -v`) refuses them here rather than aborting the process later.
//! Too large is an error naming the flag or field, its value and the bytes it would need.

use crate::{CliResult, fail};

/// `bytes` as a short human figure: `22.5 GB`, `512 MB`, `4.0 KB` (powers of 1000, as `df -H`).
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["KB", "MB", "GB", "TB", "PB", "EB"];
    if bytes < 1000 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64 / 1000.0;
    let mut unit = 0;
    while v >= 1000.0 && unit + 1 < UNITS.len() {
        v /= 1000.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// A field of `/proc/meminfo` in bytes (`None` where there is no such file or field).
fn meminfo(name: &str) -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with(name))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kb.checked_mul(1024)
}

/// Memory the process can still take: `MemAvailable` plus `SwapFree` of `/proc/meminfo`
/// (`None` where there is no such file).
pub fn available_bytes() -> Option<u64> {
    Some(meminfo("MemAvailable:")?.saturating_add(meminfo("SwapFree:").unwrap_or(0)))
}

/// Physical memory available without swapping: `MemAvailable` of `/proc/meminfo` (`None`
/// where there is no such file). What a buffer written whole at once (a KV cache) is sized by.
pub fn ram_available_bytes() -> Option<u64> {
    meminfo("MemAvailable:")
}

/// The product of `factors`, or `None` when it overflows a `u64`.
pub fn product(factors: &[u64]) -> Option<u64> {
    factors.iter().try_fold(1u64, |a, &b| a.checked_mul(b))
}

/// The sum of `terms`, or `None` when it overflows a `u64`.
pub fn sum(terms: &[Option<u64>]) -> Option<u64> {
    terms
        .iter()
        .try_fold(0u64, |a, &b| b.and_then(|b| a.checked_add(b)))
}

/// Errors unless `bytes` (`None`: more than a `u64` holds) fit in the memory available and in
/// the address space. `what` says what the user gave, e.g. `--batch 100000000` or
/// `config.json's max_position_embeddings = 1000000000000`, and `for_what` what the bytes are
/// for (`the training's parameters and activations`).
pub fn check_fits(what: &str, for_what: &str, bytes: Option<u64>) -> CliResult<()> {
    let Some(bytes) = bytes else {
        return Err(fail(format!(
            "{what}: {for_what} would need more than {} bytes (the size overflows); use a \
             smaller value",
            u64::MAX
        )));
    };
    if let Some(avail) = available_bytes()
        && bytes > avail
    {
        return Err(fail(format!(
            "{what}: {for_what} would need {} ({bytes} bytes) of memory, and {} are available; \
             use a smaller value",
            human_bytes(bytes),
            human_bytes(avail)
        )));
    }
    // An address-space limit (ulimit -v, a container's) refuses the reservation here; the pages
    // are never touched, so this costs nothing when it succeeds.
    let fits = usize::try_from(bytes)
        .ok()
        .is_some_and(|n| Vec::<u8>::new().try_reserve_exact(n).is_ok());
    if !fits {
        return Err(fail(format!(
            "{what}: {for_what} would need {} ({bytes} bytes) of memory, more than this process \
             may allocate; use a smaller value",
            human_bytes(bytes)
        )));
    }
    Ok(())
}

/// A KV cache sized to the memory there is ([`kv_fit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvFit {
    /// Positions the cache gets: the wanted ones, or fewer when they do not fit.
    pub positions: usize,
    /// Bytes of a cache of `positions`.
    pub bytes: u64,
    /// Bytes the wanted positions would need (`None`: more than a `u64` holds).
    pub wanted_bytes: Option<u64>,
    /// The memory figure it was judged against ([`ram_available_bytes`]; `None`: unknown).
    pub available: Option<u64>,
    /// Whether the process's address space (`ulimit -v`) took less than that figure.
    pub address_space: bool,
}

impl KvFit {
    /// Whether fewer positions than wanted fit.
    pub fn capped(&self, wanted: usize) -> bool {
        self.positions < wanted
    }

    /// For notes: what the wanted positions would need, and what the cache gets.
    pub fn describe(&self, wanted: usize) -> String {
        let need = match self.wanted_bytes {
            Some(b) => format!("{} ({b} bytes)", human_bytes(b)),
            None => format!("more than {} bytes", u64::MAX),
        };
        let avail = match self.available {
            Some(a) => format!(
                "{} ({a} bytes) of RAM are available (a cache may take half)",
                human_bytes(a)
            ),
            None => "the memory available is unknown here".into(),
        };
        let avail = if self.address_space {
            format!("{avail}, less in this process's address space (ulimit -v)")
        } else {
            avail
        };
        format!(
            "a KV cache of {wanted} positions would need {need} of memory, and {avail}; the \
             cache holds {} positions ({} bytes)",
            self.positions, self.bytes
        )
    }
}

/// How many of `wanted` KV-cache positions, `per_position` bytes each, fit in memory: all
/// when their bytes fit in half of `available` (the cache is written whole when allocated, so
/// the other half stays for activations, the tokenizer and the rest of the machine) and
/// `reservable` says the address space takes them; else the most that fit in that share, halved until `reservable` takes them and
/// then halved once more (the run still needs address space beside the cache). `available`
/// `None` (no `/proc/meminfo`: not Linux) judges by `reservable` alone.
pub fn kv_fit(
    per_position: u64,
    wanted: usize,
    available: Option<u64>,
    reservable: &dyn Fn(u64) -> bool,
) -> KvFit {
    let per = per_position.max(1);
    let wanted_bytes = per.checked_mul(wanted as u64);
    let share = available.map_or(u64::MAX, |a| a / 2);
    let mut limit = wanted_bytes.unwrap_or(u64::MAX).min(share);
    let mut probed_down = false;
    while limit >= per && !reservable(limit) {
        limit /= 2;
        probed_down = true;
    }
    if probed_down {
        limit /= 2;
    }
    let positions = usize::try_from(limit / per)
        .unwrap_or(usize::MAX)
        .min(wanted);
    KvFit {
        positions,
        bytes: per.saturating_mul(positions as u64),
        wanted_bytes,
        available,
        address_space: probed_down,
    }
}

/// Whether this process can reserve `bytes` of address space (reserved and released at once,
/// the pages never touched).
pub fn reservable(bytes: u64) -> bool {
    usize::try_from(bytes)
        .ok()
        .is_some_and(|n| Vec::<u8>::new().try_reserve_exact(n).is_ok())
}

/// [`kv_fit`] for a llama model's KV cache (one sequence) on this machine.
pub fn kv_fit_model(
    config: &kernels_core::models::llama::LlamaConfig,
    wanted: usize,
) -> CliResult<KvFit> {
    let per = kernels_core::models::llama::kv_cache_bytes(config, 1, 1)?;
    Ok(kv_fit(per, wanted, ram_available_bytes(), &reservable))
}

/// Errors unless `value` is at least 1, naming the flag.
pub fn positive(flag: &str, value: usize) -> CliResult<()> {
    if value == 0 {
        return Err(fail(format!("{flag} 0: must be at least 1")));
    }
    Ok(())
}

/// `Ok` when `meta` (of `path`, links followed) is a regular file; else what it is, with the
/// path: a FIFO, a device or a socket would block a reader or never end, so model files,
/// shards, configs and tokenizers are refused by name before they are opened.
pub fn regular_file(path: &std::path::Path, meta: &std::fs::Metadata) -> Result<(), String> {
    let t = meta.file_type();
    if t.is_file() {
        return Ok(());
    }
    let what = if t.is_dir() {
        "a directory"
    } else {
        #[cfg(unix)]
        {
            use std::os::unix::fs::FileTypeExt;
            if t.is_fifo() {
                "a FIFO (named pipe)"
            } else if t.is_char_device() {
                "a character device"
            } else if t.is_block_device() {
                "a block device"
            } else if t.is_socket() {
                "a socket"
            } else {
                "not a regular file"
            }
        }
        #[cfg(not(unix))]
        {
            "not a regular file"
        }
    };
    Err(format!(
        "{}: is {what}, not a regular file; model files must be regular files",
        path.display()
    ))
}

/// Reads a model file (weights, shard, config, tokenizer) after checking it is a regular file
/// ([`regular_file`]), so a FIFO or a device named as one is an error instead of a hang.
pub fn read_regular(path: &std::path::Path) -> std::io::Result<Vec<u8>> {
    let meta = std::fs::metadata(path)?;
    regular_file(path, &meta).map_err(std::io::Error::other)?;
    std::fs::read(path)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn human_figures() {
        assert_eq!(human_bytes(999), "999 B");
        assert_eq!(human_bytes(22_500_000_000), "22.5 GB");
        assert_eq!(human_bytes(32_000_000_000_000), "32.0 TB");
    }

    #[test]
    fn overflow_and_huge_sizes_are_errors_naming_what() {
        let e = check_fits("--batch 7", "the batch", None).unwrap_err();
        assert!(e.to_string().contains("--batch 7"), "{e}");
        let e = check_fits("--layers 1000000000", "the weights", Some(u64::MAX / 2)).unwrap_err();
        assert!(e.to_string().contains("--layers 1000000000"), "{e}");
        assert!(e.to_string().contains(&(u64::MAX / 2).to_string()), "{e}");
        check_fits("--batch 1", "the batch", Some(1024)).unwrap();
        assert_eq!(product(&[u64::MAX, 2]), None);
        assert_eq!(sum(&[Some(1), None]), None);
        assert_eq!(sum(&[Some(1), Some(2)]), Some(3));
    }

    #[test]
    fn kv_caches_are_capped_by_the_memory_figure_and_the_address_space() {
        let any = |_: u64| true;
        // Fits: all wanted.
        let f = kv_fit(1000, 64, Some(1_000_000), &any);
        assert_eq!(
            (f.positions, f.bytes, f.wanted_bytes),
            (64, 64_000, Some(64_000))
        );
        assert!(!f.capped(64));
        // Half the memory available.
        let f = kv_fit(1000, 1_000_000, Some(4_000_000), &any);
        assert_eq!((f.positions, f.bytes), (2000, 2_000_000));
        assert!(f.capped(1_000_000));
        let d = f.describe(1_000_000);
        assert!(
            d.contains("1000000000 bytes") && d.contains("2000000 bytes"),
            "{d}"
        );
        // The bytes overflow: capped by memory all the same.
        let f = kv_fit(1 << 40, usize::MAX, Some(1 << 44), &any);
        assert_eq!((f.positions, f.wanted_bytes), (8, None));
        // An address-space limit of 1 MB: halved until reservable, then once more.
        let under = |b: u64| b <= 1_000_000;
        let f = kv_fit(1000, 1_000_000, Some(64_000_000), &under);
        assert!(f.bytes <= 500_000 && f.bytes >= 250_000, "{f:?}");
        assert!(f.describe(1_000_000).contains("ulimit -v"), "{f:?}");
        // No memory figure: the address space alone.
        let f = kv_fit(1000, 1_000_000, None, &under);
        assert!(f.positions > 0 && f.bytes <= 500_000, "{f:?}");
        // Nothing fits: no positions.
        assert_eq!(kv_fit(1000, 10, Some(100), &any).positions, 0);
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_is_refused_by_name_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("model.safetensors");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo failed");
        let e = read_regular(&fifo).unwrap_err().to_string();
        assert!(e.contains("FIFO") && e.contains("model.safetensors"), "{e}");
        let file = dir.path().join("config.json");
        std::fs::write(&file, b"{}").unwrap();
        assert_eq!(read_regular(&file).unwrap(), b"{}");
    }
}
