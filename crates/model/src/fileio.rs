//! How files are read and written: reads are bounded and take regular files
//! only; writes are atomic, never replace a file without being asked, and
//! never replace anything that is not a regular file.
//!
//! Why: a trace or workload path can name a device (`/dev/zero` never
//! ends), a FIFO (blocks forever) or a huge file, and an output path can
//! name `/dev/null` or a character device that a rename would turn into a
//! regular file. Temporary files carry the writer's process id, so the ones
//! a killed writer left behind are found and removed by the next write to
//! the same path.

use crate::error::{Error, Result};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// What a path names, in words, when it is not a regular file.
fn not_regular(meta: &std::fs::Metadata) -> Option<&'static str> {
    let t = meta.file_type();
    if t.is_file() {
        return None;
    }
    if t.is_dir() {
        return Some("a directory");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return Some("a FIFO");
        }
        if t.is_char_device() {
            return Some("a character device");
        }
        if t.is_block_device() {
            return Some("a block device");
        }
        if t.is_socket() {
            return Some("a socket");
        }
    }
    Some("not a regular file")
}

/// Reads the regular file at `path`, at most `limit` bytes.
///
/// Refused: a path that is not a regular file (checked before opening, so a
/// FIFO never blocks), and a file longer than `limit` (checked on the read
/// itself, so a file that grows or lies about its length is still bounded).
pub fn read_regular(path: &Path, limit: u64) -> Result<Vec<u8>> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    if let Some(kind) = not_regular(&meta) {
        return Err(Error::NotRegularFile {
            path: path.into(),
            kind,
        });
    }
    if meta.len() > limit {
        return Err(Error::TooLarge {
            path: path.into(),
            size: meta.len(),
            limit,
        });
    }
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    // Opened after the check: refuse a swap to a non-regular file too.
    let opened = file.metadata().map_err(|e| Error::io(path, e))?;
    if let Some(kind) = not_regular(&opened) {
        return Err(Error::NotRegularFile {
            path: path.into(),
            kind,
        });
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io(path, e))?;
    if bytes.len() as u64 > limit {
        return Err(Error::TooLarge {
            path: path.into(),
            size: bytes.len() as u64,
            limit,
        });
    }
    Ok(bytes)
}

/// The prefix of `name`'s temporary files: `.NAME.tmp-`.
fn temp_prefix(name: &str) -> String {
    format!(".{name}.tmp-")
}

/// Removes temporary files of `name` in `dir` whose writer is gone (Linux:
/// no `/proc/PID`). Failures are ignored: this is housekeeping.
fn remove_stale_temps(dir: &Path, name: &str) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let prefix = temp_prefix(name);
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let file_name = e.file_name();
        let Some(rest) = file_name.to_str().and_then(|n| n.strip_prefix(&prefix)) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Writes `bytes` to `path` atomically: a temporary file in the same
/// directory (`.NAME.tmp-PID-SEQ`), flushed to disk, then linked into place.
///
/// Without `overwrite` an existing file is never replaced (the link fails
/// if the name exists, so there is no check-then-write race). With it, only
/// a regular file is replaced: a device, FIFO, directory or socket at
/// `path` is refused. Temporary files a killed writer left for `path` are
/// removed first.
pub fn write_atomic(path: &Path, bytes: &[u8], overwrite: bool) -> Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) => {
            // A symbolic link is judged by what it points to.
            let target = if meta.file_type().is_symlink() {
                std::fs::metadata(path).ok()
            } else {
                Some(meta)
            };
            if let Some(kind) = target.as_ref().and_then(not_regular) {
                return Err(Error::NotRegularFile {
                    path: path.into(),
                    kind,
                });
            }
            if !overwrite {
                return Err(Error::WouldOverwrite { path: path.into() });
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io(path, e)),
    }
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    remove_stale_temps(&dir, &name);
    // Unique per process and per call, so concurrent writers (threads of one
    // process included) never share a temporary file; `create_new` never
    // follows or reuses whatever already has that name.
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let seq = NEXT.fetch_add(1, Ordering::Relaxed);
    let tmp = dir.join(format!(
        "{}{}-{seq}",
        temp_prefix(&name),
        std::process::id()
    ));
    let mut created = false;
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| Error::io(&tmp, e))?;
        created = true;
        f.write_all(bytes).map_err(|e| Error::io(&tmp, e))?;
        f.sync_all().map_err(|e| Error::io(&tmp, e))?;
        if overwrite {
            std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e))
        } else {
            match std::fs::hard_link(&tmp, path) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    Err(Error::WouldOverwrite { path: path.into() })
                }
                Err(e) => Err(Error::io(path, e)),
            }
        }
    })();
    // The temporary name is gone after a rename; after a link (or a failure)
    // remove it, but never a file this call did not create.
    if created {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("gemm-audit-fileio-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn reads_are_bounded_and_regular_only() {
        let d = scratch("read");
        let f = d.join("x");
        std::fs::write(&f, b"hello").unwrap();
        assert_eq!(read_regular(&f, 5).unwrap(), b"hello");
        assert!(matches!(
            read_regular(&f, 4),
            Err(Error::TooLarge {
                size: 5,
                limit: 4,
                ..
            })
        ));
        assert!(matches!(
            read_regular(&d, 10),
            Err(Error::NotRegularFile {
                kind: "a directory",
                ..
            })
        ));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let d = scratch("fifo");
        let fifo = d.join("pipe");
        let ok = std::process::Command::new("mkfifo").arg(&fifo).status();
        if !ok.is_ok_and(|s| s.success()) {
            eprintln!("mkfifo unavailable; skipping");
            return;
        }
        assert!(matches!(
            read_regular(&fifo, 10),
            Err(Error::NotRegularFile { kind: "a FIFO", .. })
        ));
        assert!(matches!(
            write_atomic(&fifo, b"x", true),
            Err(Error::NotRegularFile { kind: "a FIFO", .. })
        ));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn stale_temp_files_of_dead_writers_are_removed() {
        let d = scratch("stale");
        let out = d.join("out.gat");
        // A pid that is not running (beyond Linux's pid_max of 2^22).
        let stale = d.join(".out.gat.tmp-4194999-0");
        let mine = d.join(format!(".out.gat.tmp-{}-999", std::process::id()));
        let other = d.join(".other.gat.tmp-4194999-0");
        for p in [&stale, &mine, &other] {
            std::fs::write(p, b"partial").unwrap();
        }
        write_atomic(&out, b"done", false).unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"done");
        if Path::new("/proc/self").exists() {
            assert!(!stale.exists(), "a dead writer's temp file was left");
        }
        assert!(mine.exists(), "a live writer's temp file was removed");
        assert!(other.exists(), "another path's temp file was removed");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
