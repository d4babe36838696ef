//! Files written whole or not at all (`kernels op --out`, `kernels gru run`, world-model weights,
//! `kernels train`'s checkpoints, the demo's plot), without harming what the path points at.
//!
//! What `path` is decides how it is written:
//! - nothing yet, or a regular file: a temporary file beside it, with the existing file's
//!   permissions (0644 for a new one), renamed over it only once complete; on failure the
//!   temporary file is removed and `path` is untouched;
//! - a symbolic link: its target is written the same way (the link stays a link); a link whose
//!   target does not exist is refused;
//! - a character device (`/dev/null`, a terminal) or a FIFO: written through, never replaced;
//! - a directory, a block device or a socket: refused, naming the path and what it is.

use std::fs::{self, Permissions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// What a path holds, as far as writing to it goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Missing,
    Regular,
    /// A character device or a FIFO: written through.
    Stream,
    Refused(&'static str),
}

fn kind_of(meta: &fs::Metadata) -> Kind {
    let t = meta.file_type();
    if t.is_file() {
        return Kind::Regular;
    }
    if t.is_dir() {
        return Kind::Refused("a directory");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_char_device() || t.is_fifo() {
            return Kind::Stream;
        }
        if t.is_block_device() {
            return Kind::Refused("a block device");
        }
        if t.is_socket() {
            return Kind::Refused("a socket");
        }
    }
    Kind::Refused("not a regular file")
}

fn refused(path: &Path, why: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("refusing to write {}: {why}", path.display()))
}

/// The path to write and what it holds: a symbolic link resolves to its (existing) target.
fn resolve(path: &Path) -> io::Result<(PathBuf, Kind)> {
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok((path.to_path_buf(), Kind::Missing)),
        Err(e) => Err(e),
        Ok(m) if m.file_type().is_symlink() => {
            let target = fs::canonicalize(path).map_err(|e| {
                refused(
                    path,
                    format!("it is a symbolic link whose target cannot be resolved ({e})"),
                )
            })?;
            let meta = fs::metadata(&target)?;
            Ok((target, kind_of(&meta)))
        }
        Ok(m) => Ok((path.to_path_buf(), kind_of(&m))),
    }
}

/// Writes `bytes` to `path` as the module documentation says.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomically_verified(path, bytes, &|_| Ok(()))
}

/// [`write_atomically`], calling `verify` with the temporary file's path once its bytes are on
/// disk (written and synced) and before it is renamed into place: an error from `verify`
/// removes the temporary file and leaves `path` as it was. A device or FIFO, written through,
/// cannot be read back: `verify` is not called for one.
pub fn write_atomically_verified(
    path: &Path,
    bytes: &[u8],
    verify: &dyn Fn(&Path) -> io::Result<()>,
) -> io::Result<()> {
    let (target, kind) = resolve(path)?;
    match kind {
        Kind::Refused(what) => Err(refused(path, format!("it is {what}"))),
        Kind::Stream => {
            let mut f = fs::OpenOptions::new().write(true).open(&target)?;
            f.write_all(bytes)?;
            f.flush()
        }
        Kind::Missing | Kind::Regular => {
            let perms = match kind {
                Kind::Regular => Some(fs::metadata(&target)?.permissions()),
                _ => None,
            };
            replace(&target, bytes, perms, verify)
        }
    }
}

/// A temporary file beside `target` with `perms` (0644 when None), checked by `verify`, then
/// renamed over it.
fn replace(
    target: &Path,
    bytes: &[u8],
    perms: Option<Permissions>,
    verify: &dyn Fn(&Path) -> io::Result<()>,
) -> io::Result<()> {
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let file_name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = tempfile::Builder::new()
        .prefix(&format!(".{file_name}."))
        .suffix(".tmp")
        .tempfile_in(dir)?;
    // Permissions first, so the content never sits in a file more open than the target.
    if let Some(p) = perms.or_else(new_file_permissions) {
        tmp.as_file().set_permissions(p)?;
    }
    let mut tmp = tmp;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    // On an error the temporary file is dropped, which removes it.
    verify(tmp.path())?;
    tmp.persist(target).map_err(|e| e.error)?;
    Ok(())
}

/// Writes a directory of `files` (name, bytes) whole: into a fresh directory beside `dir`, then
/// swapped in by renames (the old `dir`, if any, is moved aside and removed), so `dir` holds
/// exactly these files, never a mix of an old and a new set. A `dir` that exists and is not a
/// directory is refused; a symbolic link to a directory is followed (the link stays).
pub fn write_dir_atomically(dir: &Path, files: &[(&str, &[u8])]) -> io::Result<()> {
    let target = match fs::symlink_metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => dir.to_path_buf(),
        Err(e) => return Err(e),
        Ok(m) if m.file_type().is_symlink() => fs::canonicalize(dir).map_err(|e| {
            refused(
                dir,
                format!("it is a symbolic link whose target cannot be resolved ({e})"),
            )
        })?,
        Ok(_) => dir.to_path_buf(),
    };
    let exists = match fs::metadata(&target) {
        Ok(m) if m.is_dir() => true,
        Ok(m) => {
            return Err(refused(
                dir,
                format!("it is {}, not a directory", describe(&m)),
            ));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => false,
        Err(e) => return Err(e),
    };
    let parent = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    fs::create_dir_all(&parent)?;
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let fresh = tempfile::Builder::new()
        .prefix(&format!(".{name}.new."))
        .tempdir_in(&parent)?;
    for (file, bytes) in files {
        let mut f = fs::File::create(fresh.path().join(file))?;
        if let Some(p) = new_file_permissions() {
            f.set_permissions(p)?;
        }
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(fresh.path(), Permissions::from_mode(0o755))?;
    }
    let fresh = fresh.keep();
    if !exists {
        return fs::rename(&fresh, &target).inspect_err(|_| {
            let _ = fs::remove_dir_all(&fresh);
        });
    }
    // An empty directory to move the old one onto (rename replaces an empty directory).
    let old = tempfile::Builder::new()
        .prefix(&format!(".{name}.old."))
        .tempdir_in(&parent)?
        .keep();
    if let Err(e) = fs::rename(&target, &old) {
        let _ = fs::remove_dir_all(&fresh);
        let _ = fs::remove_dir(&old);
        return Err(e);
    }
    if let Err(e) = fs::rename(&fresh, &target) {
        // Put the old one back; the new files go.
        let _ = fs::rename(&old, &target);
        let _ = fs::remove_dir_all(&fresh);
        return Err(e);
    }
    fs::remove_dir_all(&old)
}

/// What a non-directory path is, in words.
fn describe(meta: &fs::Metadata) -> &'static str {
    match kind_of(meta) {
        Kind::Regular => "a regular file",
        Kind::Stream => "a character device or a FIFO",
        Kind::Refused(what) => what,
        Kind::Missing => "missing",
    }
}

/// Permissions of a new result file: an ordinary 0644 file on Unix (the temporary file starts
/// at 0600); elsewhere the temporary file's own.
fn new_file_permissions() -> Option<Permissions> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        Some(Permissions::from_mode(0o644))
    }
    #[cfg(not(unix))]
    {
        None
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_is_replaced_whole() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("model");
        write_dir_atomically(&dir, &[("a", b"1"), ("b", b"2")]).unwrap();
        fs::write(dir.join("stale"), b"old").unwrap();
        write_dir_atomically(&dir, &[("a", b"3")]).unwrap();
        let mut names: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["a"]);
        assert_eq!(fs::read(dir.join("a")).unwrap(), b"3");
        // Nothing left beside it.
        assert_eq!(fs::read_dir(root.path()).unwrap().count(), 1);
        let file = root.path().join("file");
        fs::write(&file, b"x").unwrap();
        let e = write_dir_atomically(&file, &[("a", b"1")]).unwrap_err();
        assert!(e.to_string().contains("not a directory"), "{e}");
        assert_eq!(fs::read(&file).unwrap(), b"x");
    }

    #[test]
    fn atomic_write_replaces_only_when_complete() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.safetensors");
        write_atomically(&p, b"first").unwrap();
        write_atomically(&p, b"second").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"second");
        // A missing directory fails without creating anything.
        let q = dir.path().join("nope").join("out.safetensors");
        assert!(write_atomically(&q, b"x").is_err());
        assert!(!q.exists());
        // No temporary files left behind.
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
        // A directory is refused, named.
        let e = write_atomically(dir.path(), b"x").unwrap_err().to_string();
        assert!(e.contains("a directory"), "{e}");
    }

    #[test]
    fn a_file_that_fails_its_read_back_is_not_put_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("model.gguf");
        // The check sees the bytes on disk, under the temporary name, not yet the target.
        let seen = std::cell::RefCell::new(None);
        write_atomically_verified(&p, b"on disk", &|tmp| {
            assert_ne!(tmp, p.as_path());
            assert!(!p.exists());
            *seen.borrow_mut() = Some(fs::read(tmp)?);
            Ok(())
        })
        .unwrap();
        assert_eq!(seen.into_inner().unwrap(), b"on disk");
        assert_eq!(fs::read(&p).unwrap(), b"on disk");
        // A failed check: the old file stays, the temporary one is gone.
        let e = write_atomically_verified(&p, b"replacement", &|tmp| {
            assert_eq!(fs::read(tmp)?, b"replacement");
            Err(io::Error::other("reads back wrong"))
        })
        .unwrap_err();
        assert!(e.to_string().contains("reads back wrong"), "{e}");
        assert_eq!(fs::read(&p).unwrap(), b"on disk");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
        // And a new file is never created.
        let q = dir.path().join("new.gguf");
        assert!(write_atomically_verified(&q, b"x", &|_| Err(io::Error::other("no"))).is_err());
        assert!(!q.exists());
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[cfg(unix)]
    #[test]
    fn a_replaced_file_keeps_its_mode_and_a_new_one_is_0644() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("secret.safetensors");
        fs::write(&p, b"old").unwrap();
        fs::set_permissions(&p, Permissions::from_mode(0o600)).unwrap();
        write_atomically(&p, b"new").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"new");
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let q = dir.path().join("fresh");
        write_atomically(&q, b"x").unwrap();
        assert_eq!(
            fs::metadata(&q).unwrap().permissions().mode() & 0o777,
            0o644
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_symlink_has_its_target_written_and_stays_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("real.bin");
        fs::write(&target, b"old").unwrap();
        let link = dir.path().join("link.bin");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        write_atomically(&link, b"new").unwrap();
        assert!(
            fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(fs::read(&target).unwrap(), b"new");
        // A dangling link is refused and left as it was.
        let dangling = dir.path().join("dangling");
        std::os::unix::fs::symlink(dir.path().join("missing"), &dangling).unwrap();
        let e = write_atomically(&dangling, b"x").unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        assert!(
            fs::symlink_metadata(&dangling)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert!(!dir.path().join("missing").exists());
    }

    #[cfg(unix)]
    #[test]
    fn devices_and_fifos_are_written_through_not_replaced() {
        use std::os::unix::fs::FileTypeExt;
        write_atomically(Path::new("/dev/null"), b"discarded").unwrap();
        assert!(
            fs::symlink_metadata("/dev/null")
                .unwrap()
                .file_type()
                .is_char_device()
        );
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if !made.is_ok_and(|s| s.success()) {
            eprintln!("skipped the FIFO case: mkfifo is not available");
            return;
        }
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || fs::read(fifo).unwrap())
        };
        write_atomically(&fifo, b"through the pipe").unwrap();
        assert_eq!(reader.join().unwrap(), b"through the pipe");
        assert!(fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
    }
}
