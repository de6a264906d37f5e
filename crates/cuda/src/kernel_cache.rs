//! The persistent compiled-kernel cache: a node compiles each NVRTC module
//! once per (source, options, architecture, NVRTC version), and later
//! processes load the cubin from disk instead of recompiling it (NVRTC
//! takes about a minute for the wgmma module; the figures are in
//! `docs/performance.md`).
//!
//! Nothing in the cache is trusted blindly. An entry is one file named by
//! its key (the digest of everything that decides the compiler's output)
//! holding a header with the same key, the cubin's length and its SHA-256.
//! An entry whose magic, version, key, length or checksum does not match is
//! rejected with the reason, recompiled and replaced; a cache that cannot
//! be read or written costs a compile, never a failure. Entries are written
//! like goldens ([`gemm_audit_model::util::write_atomic`]: a temporary
//! file in the same directory, synced, renamed), so a reader sees a whole
//! entry or none, and concurrent writers of one key each leave a whole
//! file. The module's artifact digest is the SHA-256 of the cubin whichever
//! way it came, so a route recorded from a compiled module replays on a
//! cached one, and a planted cubin (a valid entry written by someone else)
//! is a different artifact that the guard and the golden refuse.
//!
//! Where: `GEMM_AUDIT_KERNEL_CACHE` (a directory, or `off`), else
//! `$XDG_CACHE_HOME/gemm-audit/kernels`, else `~/.cache/gemm-audit/kernels`.
//!
//! Before the directory, the cubins shipped with the crate
//! ([`crate::shipped`]) are looked up by the same key: a fresh node of a
//! shipped architecture and NVRTC version compiles nothing.

use crate::shipped::{self, NotShipped, ShippedCubin};
use gemm_audit_model::digest::{Digest, DigestWriter, FieldValue};
use gemm_audit_model::util::{read_regular, write_atomic};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The environment variable naming the cache directory (or `off`).
pub const KERNEL_CACHE_ENV: &str = "GEMM_AUDIT_KERNEL_CACHE";

/// An entry's magic bytes.
const MAGIC: [u8; 8] = *b"GAKCUBIN";
/// The entry layout's version; part of the key, so a new layout never
/// reads an old entry (2: the key holds NVRTC's release and build).
const VERSION: u16 = 2;
/// Magic, version, reserved, key, cubin length, cubin SHA-256.
pub(crate) const HEADER_LEN: usize = 8 + 2 + 2 + 32 + 8 + 32;
/// Largest cubin an entry may hold (the wgmma module's is a few MiB).
const MAX_CUBIN_BYTES: u64 = 256 << 20;

/// What decides NVRTC's output for one module.
#[derive(Debug, Clone, Copy)]
pub struct CacheKey<'a> {
    /// The module's source text.
    pub source: &'a str,
    /// The NVRTC options, in order.
    pub options: &'a [String],
    /// The target architecture (`sm_90a`).
    pub target: &'a str,
    /// NVRTC's version as it reports it (`13.0`).
    pub nvrtc_version: &'a str,
    /// NVRTC's release and build (`13.0.88 (CL-36424714)`): patch
    /// releases of one version compile different cubins.
    pub nvrtc_build: &'a str,
}

impl<'a> CacheKey<'a> {
    /// The key of compiling `source` with `options` by the NVRTC of
    /// `nvrtc_version` and `nvrtc_build`, its target read from the
    /// options' `--gpu-architecture=` (empty where none names one): how a
    /// node keys what it compiles, and so how shipped cubins must be keyed.
    pub fn of_compile(
        source: &'a str,
        options: &'a [String],
        nvrtc_version: &'a str,
        nvrtc_build: &'a str,
    ) -> CacheKey<'a> {
        let target = options
            .iter()
            .find_map(|o| o.strip_prefix("--gpu-architecture="))
            .unwrap_or("");
        CacheKey {
            source,
            options,
            target,
            nvrtc_version,
            nvrtc_build,
        }
    }

    /// The key's digest: the entry's file name and its header's key.
    pub fn digest(&self) -> Digest {
        let mut w = DigestWriter::new("gemm-audit/kernel-cache/v1");
        w.field("layout_version", FieldValue::U32(u32::from(VERSION)));
        w.field(
            "source",
            FieldValue::Digest(&Digest::sha256(self.source.as_bytes())),
        );
        w.field("options", FieldValue::StrList(self.options));
        w.field("target", FieldValue::Str(self.target));
        w.field("nvrtc_version", FieldValue::Str(self.nvrtc_version));
        w.field("nvrtc_build", FieldValue::Str(self.nvrtc_build));
        w.finish()
    }
}

/// Why an entry was not used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejected {
    /// The file could not be read (not a regular file, too large, I/O).
    Unreadable(String),
    /// Shorter than its header, or than the length its header says.
    Truncated {
        /// Bytes in the file.
        len: usize,
        /// Bytes the header asks for.
        needed: usize,
    },
    /// Not a cache entry, or one of another layout.
    BadHeader,
    /// An entry of another key (renamed or copied over).
    OtherKey,
    /// Longer than its header says.
    TrailingBytes,
    /// The cubin's SHA-256 is not the header's.
    Checksum,
}

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejected::Unreadable(why) => write!(f, "unreadable: {why}"),
            Rejected::Truncated { len, needed } => {
                write!(f, "truncated: {len} bytes, the entry needs {needed}")
            }
            Rejected::BadHeader => f.write_str("not a kernel-cache entry of this layout"),
            Rejected::OtherKey => f.write_str("the entry is another key's"),
            Rejected::TrailingBytes => f.write_str("bytes after the cubin"),
            Rejected::Checksum => f.write_str("the cubin's SHA-256 does not match its header"),
        }
    }
}

/// Why an entry could not be stored (the compile's cubin is used anyway).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The cubin is over the cache's limit.
    #[error("{bytes} bytes is over the cache's {limit}-byte limit")]
    TooLarge {
        /// The cubin's size.
        bytes: u64,
        /// The largest cubin an entry may hold.
        limit: u64,
    },
    /// The directory or the entry could not be written.
    #[error("{0}")]
    Write(String),
}

/// What a lookup found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// A whole, matching entry: its cubin.
    Hit(Vec<u8>),
    /// No entry, or the cache is off.
    Miss,
    /// An entry that was not used, and why.
    Rejected(Rejected),
}

/// How a module's cubin was obtained, for the run's volatile metadata and
/// for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A cubin shipped with the crate, admitted by its key.
    Shipped,
    /// Loaded from the cache.
    Hit,
    /// Compiled: no entry (or the cache is off), then stored (or why not).
    Compiled {
        /// Why no shipped cubin was admitted.
        not_shipped: NotShipped,
        /// Why the cache had nothing usable: `None` for a plain miss.
        rejected: Option<Rejected>,
        /// Why the entry could not be stored; `None` when stored or off.
        store_failed: Option<StoreError>,
    },
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Shipped => f.write_str("shipped"),
            Outcome::Hit => f.write_str("cached"),
            Outcome::Compiled {
                not_shipped,
                rejected,
                store_failed,
            } => {
                write!(f, "compiled ({not_shipped})")?;
                if let Some(r) = rejected {
                    write!(f, " (cache entry rejected: {r})")?;
                }
                if let Some(s) = store_failed {
                    write!(f, " (not stored: {s})")?;
                }
                Ok(())
            }
        }
    }
}

/// The cache directory, or none (off), and the shipped cubins looked up
/// before it, or none (off).
#[derive(Debug, Clone)]
pub struct KernelCache {
    dir: Option<PathBuf>,
    shipped: Option<&'static [ShippedCubin]>,
}

impl PartialEq for KernelCache {
    fn eq(&self, other: &KernelCache) -> bool {
        self.dir == other.dir
            && match (self.shipped, other.shipped) {
                (Some(a), Some(b)) => std::ptr::eq(a, b),
                (a, b) => a.is_none() && b.is_none(),
            }
    }
}

impl Eq for KernelCache {}

impl KernelCache {
    /// The cache at `dir`, without shipped cubins.
    pub fn at(dir: impl Into<PathBuf>) -> KernelCache {
        KernelCache {
            dir: Some(dir.into()),
            shipped: None,
        }
    }

    /// No cache and no shipped cubins: every module is compiled.
    pub fn off() -> KernelCache {
        KernelCache {
            dir: None,
            shipped: None,
        }
    }

    /// The same cache, looking up `shipped` first.
    pub fn with_shipped(self, shipped: &'static [ShippedCubin]) -> KernelCache {
        KernelCache {
            shipped: Some(shipped),
            ..self
        }
    }

    /// What `getenv` says: the directory is [`KERNEL_CACHE_ENV`] (`off`
    /// or empty disables), else `XDG_CACHE_HOME`, else `HOME`'s `.cache`;
    /// off when none is set. The crate's shipped cubins are looked up
    /// first unless [`shipped::SHIPPED_KERNELS_ENV`] is `off`.
    pub fn from_env(getenv: impl Fn(&str) -> Option<String>) -> KernelCache {
        let dir = Self::dir_from_env(&getenv);
        if shipped::enabled(&getenv) {
            dir.with_shipped(shipped::SHIPPED)
        } else {
            dir
        }
    }

    /// The directory part of [`KernelCache::from_env`].
    fn dir_from_env(getenv: &impl Fn(&str) -> Option<String>) -> KernelCache {
        match getenv(KERNEL_CACHE_ENV) {
            Some(v) if v.is_empty() || v.eq_ignore_ascii_case("off") => return KernelCache::off(),
            Some(v) => return KernelCache::at(v),
            None => {}
        }
        let base = getenv("XDG_CACHE_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| {
                getenv("HOME")
                    .filter(|v| !v.is_empty())
                    .map(|h| Path::new(&h).join(".cache"))
            });
        match base {
            Some(b) => KernelCache::at(b.join("gemm-audit").join("kernels")),
            None => KernelCache::off(),
        }
    }

    /// The directory, when on.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// The entry file of `key`.
    fn path(&self, key: &Digest) -> Option<PathBuf> {
        self.dir
            .as_ref()
            .map(|d| d.join(format!("{}.cubin", key.to_hex())))
    }

    /// The cubin stored for `key`, if a whole matching entry is there.
    pub fn load(&self, key: &Digest) -> Lookup {
        let Some(path) = self.path(key) else {
            return Lookup::Miss;
        };
        if !path.exists() {
            return Lookup::Miss;
        }
        match read_regular(&path, HEADER_LEN as u64 + MAX_CUBIN_BYTES) {
            Ok(bytes) => match decode(key, &bytes) {
                Ok(cubin) => Lookup::Hit(cubin),
                Err(r) => Lookup::Rejected(r),
            },
            Err(e) => Lookup::Rejected(Rejected::Unreadable(e.to_string())),
        }
    }

    /// Stores `cubin` for `key`, replacing whatever entry was there.
    pub fn store(&self, key: &Digest, cubin: &[u8]) -> Result<(), StoreError> {
        let Some(path) = self.path(key) else {
            return Ok(());
        };
        if cubin.len() as u64 > MAX_CUBIN_BYTES {
            return Err(StoreError::TooLarge {
                bytes: cubin.len() as u64,
                limit: MAX_CUBIN_BYTES,
            });
        }
        let dir = path.parent().expect("an entry path has a directory");
        std::fs::create_dir_all(dir)
            .map_err(|e| StoreError::Write(format!("{}: {e}", dir.display())))?;
        write_atomic(&path, &encode(key, cubin), true).map_err(|e| StoreError::Write(e.to_string()))
    }

    /// The cubin of `key`: the shipped one admitted by its key, else the
    /// cache's when a whole matching entry is there, else `compile`'s
    /// (told why nothing shipped was admitted), stored for the next
    /// process. A compile error is returned as is; a cache problem only
    /// shows in the outcome.
    pub fn get_or_compile<E>(
        &self,
        key: &CacheKey<'_>,
        compile: impl FnOnce(&NotShipped) -> Result<Vec<u8>, E>,
    ) -> Result<(Vec<u8>, Outcome), E> {
        let digest = key.digest();
        let not_shipped = match self.shipped {
            None => NotShipped::Off,
            Some(list) => match shipped::admit_digest(list, key, &digest) {
                Ok(cubin) => return Ok((cubin, Outcome::Shipped)),
                Err(why) => why,
            },
        };
        let rejected = match self.load(&digest) {
            Lookup::Hit(cubin) => return Ok((cubin, Outcome::Hit)),
            Lookup::Miss => None,
            Lookup::Rejected(r) => Some(r),
        };
        let cubin = compile(&not_shipped)?;
        let store_failed = self.store(&digest, &cubin).err();
        Ok((
            cubin,
            Outcome::Compiled {
                not_shipped,
                rejected,
                store_failed,
            },
        ))
    }
}

/// NVRTC's release and build from the header of PTX it generated
/// (`// Compiler Build ID: CL-36424714` and `// Cuda compilation tools,
/// release 13.0, V13.0.88`): `13.0.88 (CL-36424714)`. NVRTC reports only
/// its major and minor version through its API, and patch releases of one
/// version compile different cubins.
pub fn nvrtc_build_of(ptx: &str) -> Option<String> {
    let mut release = None;
    let mut build = None;
    for line in ptx.lines().take_while(|l| l.starts_with("//")) {
        if let Some(id) = line.strip_prefix("// Compiler Build ID: ") {
            build = Some(id.trim());
        } else if let Some(rest) = line.strip_prefix("// Cuda compilation tools, release ") {
            release = rest
                .rsplit(", V")
                .next()
                .filter(|_| rest.contains(", V"))
                .map(str::trim);
        }
    }
    Some(format!("{} ({})", release?, build?))
}

/// Where a process says that it is about to compile (set once, by the
/// command line: a compile takes a minute or more on a fresh node).
static COMPILE_NOTICE: OnceLock<fn(&str)> = OnceLock::new();

/// Sets what is told before a module is compiled (the first call wins).
pub fn set_compile_notice(notice: fn(&str)) {
    let _ = COMPILE_NOTICE.set(notice);
}

/// Tells the compile notice, if one is set.
pub fn notify_compile(message: &str) {
    if let Some(notice) = COMPILE_NOTICE.get() {
        notice(message);
    }
}

/// The key an entry's header holds, if it has a whole header of this
/// layout.
pub(crate) fn entry_key(bytes: &[u8]) -> Option<Digest> {
    if bytes.len() < HEADER_LEN || bytes[..8] != MAGIC || bytes[8..10] != VERSION.to_le_bytes() {
        return None;
    }
    Some(Digest(bytes[12..44].try_into().ok()?))
}

/// The entry bytes of `cubin` under `key` (header and cubin): what the
/// cache stores, and what a shipped cubin is.
pub fn encode(key: &Digest, cubin: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + cubin.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&key.0);
    out.extend_from_slice(&(cubin.len() as u64).to_le_bytes());
    out.extend_from_slice(&Digest::sha256(cubin).0);
    out.extend_from_slice(cubin);
    out
}

/// The cubin of an entry, if it is `key`'s and whole.
pub(crate) fn decode(key: &Digest, bytes: &[u8]) -> Result<Vec<u8>, Rejected> {
    if bytes.len() < HEADER_LEN {
        return Err(Rejected::Truncated {
            len: bytes.len(),
            needed: HEADER_LEN,
        });
    }
    let (header, cubin) = bytes.split_at(HEADER_LEN);
    if header[..8] != MAGIC || header[8..10] != VERSION.to_le_bytes() || header[10..12] != [0, 0] {
        return Err(Rejected::BadHeader);
    }
    if header[12..44] != key.0 {
        return Err(Rejected::OtherKey);
    }
    let len = u64::from_le_bytes(header[44..52].try_into().expect("8 bytes"));
    let needed = (HEADER_LEN as u64).saturating_add(len);
    if (bytes.len() as u64) < needed {
        return Err(Rejected::Truncated {
            len: bytes.len(),
            needed: needed.min(usize::MAX as u64) as usize,
        });
    }
    if (bytes.len() as u64) > needed {
        return Err(Rejected::TrailingBytes);
    }
    if Digest::sha256(cubin).0[..] != header[52..84] {
        return Err(Rejected::Checksum);
    }
    Ok(cubin.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "gemm-audit-kernel-cache-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn options() -> Vec<String> {
        vec!["--gpu-architecture=sm_90a".into(), "-std=c++17".into()]
    }

    fn key<'a>(options: &'a [String], source: &'a str) -> CacheKey<'a> {
        CacheKey {
            source,
            options,
            target: "sm_90a",
            nvrtc_version: "13.0",
            nvrtc_build: "13.0.88 (CL-1)",
        }
    }

    /// A fake cubin: what a compile returns, distinct per call if asked.
    fn cubin(tag: u8) -> Vec<u8> {
        (0..4096u32).map(|i| (i as u8) ^ tag).collect()
    }

    #[test]
    fn every_part_of_the_key_changes_it() {
        let o = options();
        let base = key(&o, "kernel A").digest();
        assert_ne!(key(&o, "kernel B").digest(), base);
        let other = vec!["--gpu-architecture=sm_90a".to_string()];
        assert_ne!(key(&other, "kernel A").digest(), base);
        assert_ne!(
            CacheKey {
                target: "sm_90",
                ..key(&o, "kernel A")
            }
            .digest(),
            base
        );
        assert_ne!(
            CacheKey {
                nvrtc_version: "13.1",
                ..key(&o, "kernel A")
            }
            .digest(),
            base
        );
        assert_ne!(
            CacheKey {
                nvrtc_build: "13.0.48 (CL-2)",
                ..key(&o, "kernel A")
            }
            .digest(),
            base
        );
    }

    /// The second process loads what the first compiled, byte for byte
    /// (so the module's artifact digest is the same), without compiling.
    #[test]
    fn a_second_lookup_loads_the_first_compile() {
        let dir = scratch("hit");
        let cache = KernelCache::at(&dir);
        let o = options();
        let k = key(&o, "kernel");
        let compiles = Cell::new(0);
        let compile = |_: &NotShipped| -> Result<Vec<u8>, String> {
            compiles.set(compiles.get() + 1);
            Ok(cubin(1))
        };
        let (first, how) = cache.get_or_compile(&k, compile).unwrap();
        assert_eq!(
            how,
            Outcome::Compiled {
                not_shipped: NotShipped::Off,
                rejected: None,
                store_failed: None
            }
        );
        let (second, how) = cache.get_or_compile(&k, compile).unwrap();
        assert_eq!(how, Outcome::Hit);
        assert_eq!(compiles.get(), 1);
        assert_eq!(Digest::sha256(&first), Digest::sha256(&second));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A flipped byte anywhere, a truncation, bytes appended, an entry of
    /// another key copied over, or a file of another kind: rejected with
    /// the reason, recompiled, and replaced by a good entry.
    #[test]
    fn a_bad_entry_is_rejected_recompiled_and_replaced() {
        let dir = scratch("bad");
        let cache = KernelCache::at(&dir);
        let o = options();
        let k = key(&o, "kernel");
        let path = cache.path(&k.digest()).unwrap();
        let other = key(&o, "another kernel");
        let good = encode(&k.digest(), &cubin(1));
        let mut flipped_cubin = good.clone();
        *flipped_cubin.last_mut().unwrap() ^= 1;
        let mut flipped_magic = good.clone();
        flipped_magic[0] ^= 1;
        let mut appended = good.clone();
        appended.push(0);
        let cases: Vec<(Vec<u8>, Rejected)> = vec![
            (flipped_cubin, Rejected::Checksum),
            (flipped_magic, Rejected::BadHeader),
            (
                good[..good.len() - 1].to_vec(),
                Rejected::Truncated {
                    len: good.len() - 1,
                    needed: good.len(),
                },
            ),
            (
                good[..10].to_vec(),
                Rejected::Truncated {
                    len: 10,
                    needed: HEADER_LEN,
                },
            ),
            (appended, Rejected::TrailingBytes),
            (encode(&other.digest(), &cubin(1)), Rejected::OtherKey),
        ];
        for (bytes, why) in cases {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &bytes).unwrap();
            assert_eq!(cache.load(&k.digest()), Lookup::Rejected(why.clone()));
            let (got, how) = cache
                .get_or_compile(&k, |_| -> Result<_, String> { Ok(cubin(2)) })
                .unwrap();
            assert_eq!(got, cubin(2), "{why}: the rejected entry's cubin was used");
            assert_eq!(
                how,
                Outcome::Compiled {
                    not_shipped: NotShipped::Off,
                    rejected: Some(why.clone()),
                    store_failed: None
                }
            );
            assert_eq!(cache.load(&k.digest()), Lookup::Hit(cubin(2)), "{why}");
        }
        // A directory where the entry should be: unreadable, recompiled,
        // and the store's failure is reported, not fatal.
        std::fs::remove_file(&path).unwrap();
        std::fs::create_dir(&path).unwrap();
        let (got, how) = cache
            .get_or_compile(&k, |_| -> Result<_, String> { Ok(cubin(3)) })
            .unwrap();
        assert_eq!(got, cubin(3));
        match how {
            Outcome::Compiled {
                rejected: Some(Rejected::Unreadable(why)),
                store_failed: Some(_),
                ..
            } => assert!(why.contains("a directory"), "{why}"),
            other => panic!("{other:?}"),
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Writers of one key racing (threads here; processes use the same
    /// atomic rename), with readers: every read is a miss or a whole
    /// entry, never a partial one, and what is left is a whole entry.
    #[test]
    fn concurrent_writers_and_readers_see_whole_entries() {
        let dir = scratch("race");
        let cache = KernelCache::at(&dir);
        let o = options();
        let k = key(&o, "kernel").digest();
        let big: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 251) as u8).collect();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..8 {
                        cache.store(&k, &big).unwrap();
                    }
                });
                s.spawn(|| {
                    for _ in 0..64 {
                        match cache.load(&k) {
                            Lookup::Hit(c) => assert_eq!(c, big),
                            Lookup::Miss => {}
                            Lookup::Rejected(r) => panic!("a reader saw a partial entry: {r}"),
                        }
                    }
                });
            }
        });
        assert_eq!(cache.load(&k), Lookup::Hit(big));
        let leftovers: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().contains(".tmp-"))
            .collect();
        assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_compile_error_is_returned_and_nothing_is_stored() {
        let dir = scratch("error");
        let cache = KernelCache::at(&dir);
        let o = options();
        let k = key(&o, "kernel");
        let e = cache
            .get_or_compile(&k, |_| -> Result<Vec<u8>, String> {
                Err("nvrtc: syntax".into())
            })
            .unwrap_err();
        assert_eq!(e, "nvrtc: syntax");
        assert_eq!(cache.load(&k.digest()), Lookup::Miss);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_location_follows_the_environment() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let shipped = |c: KernelCache| c.with_shipped(shipped::SHIPPED);
        assert_eq!(
            KernelCache::from_env(env(&[(KERNEL_CACHE_ENV, "/c"), ("HOME", "/h")])),
            shipped(KernelCache::at("/c"))
        );
        assert_eq!(
            KernelCache::from_env(env(&[(KERNEL_CACHE_ENV, "off"), ("HOME", "/h")])),
            shipped(KernelCache::off())
        );
        assert_eq!(
            KernelCache::from_env(env(&[("XDG_CACHE_HOME", "/x"), ("HOME", "/h")])),
            shipped(KernelCache::at("/x/gemm-audit/kernels"))
        );
        assert_eq!(
            KernelCache::from_env(env(&[("HOME", "/h")])),
            shipped(KernelCache::at("/h/.cache/gemm-audit/kernels"))
        );
        assert_eq!(KernelCache::from_env(env(&[])), shipped(KernelCache::off()));
        assert_eq!(
            KernelCache::from_env(env(&[
                (shipped::SHIPPED_KERNELS_ENV, "off"),
                ("HOME", "/h")
            ])),
            KernelCache::at("/h/.cache/gemm-audit/kernels")
        );
        // Off: nothing is looked up or stored.
        let off = KernelCache::off();
        assert_eq!(off.load(&Digest::ZERO), Lookup::Miss);
        assert_eq!(off.store(&Digest::ZERO, b"x"), Ok(()));
    }

    /// A shipped cubin of the key is used before the directory, without
    /// compiling or writing anything; a key nothing shipped holds is
    /// compiled and told why.
    #[test]
    fn a_shipped_cubin_comes_before_the_directory() {
        let dir = scratch("shipped");
        let o = options();
        let k = key(&o, "kernel");
        let entry: &'static [u8] = Vec::leak(encode(&k.digest(), &cubin(5)));
        let list: &'static [ShippedCubin] = Vec::leak(vec![ShippedCubin {
            module: "kernel.cu",
            target: "sm_90a",
            nvrtc_version: "13.0",
            nvrtc_build: "13.0.88 (CL-1)",
            entry,
        }]);
        let cache = KernelCache::at(&dir).with_shipped(list);
        std::fs::create_dir_all(&dir).unwrap();
        cache.store(&k.digest(), &cubin(6)).unwrap();
        let (got, how) = cache
            .get_or_compile(&k, |_| -> Result<Vec<u8>, String> { panic!("compiled") })
            .unwrap();
        assert_eq!((got, how), (cubin(5), Outcome::Shipped));
        let other = CacheKey {
            nvrtc_build: "13.0.48 (CL-2)",
            ..k
        };
        let told = std::cell::RefCell::new(None);
        let (got, how) = cache
            .get_or_compile(&other, |why| -> Result<Vec<u8>, String> {
                *told.borrow_mut() = Some(why.to_string());
                Ok(cubin(7))
            })
            .unwrap();
        assert_eq!(got, cubin(7));
        let why = "no cubin is shipped for sm_90a with NVRTC 13.0.48 (CL-2) (shipped: NVRTC 13.0.88 (CL-1) for sm_90a)";
        assert_eq!(told.into_inner().as_deref(), Some(why));
        assert_eq!(how.to_string(), format!("compiled ({why})"));
        assert_eq!(cache.load(&other.digest()), Lookup::Hit(cubin(7)));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_nvrtc_build_is_read_from_its_ptx_header() {
        let ptx = "//\n// Generated by NVIDIA NVVM Compiler\n//\n// Compiler Build ID: CL-36424714\n\
                   // Cuda compilation tools, release 13.0, V13.0.88\n// Based on NVVM 7.0.1\n//\n\n.version 9.0\n";
        assert_eq!(
            nvrtc_build_of(ptx).as_deref(),
            Some("13.0.88 (CL-36424714)")
        );
        assert_eq!(
            nvrtc_build_of(".version 9.0\n// Compiler Build ID: CL-1\n"),
            None
        );
        assert_eq!(
            nvrtc_build_of("// Compiler Build ID: CL-1\n// Cuda compilation tools, release 13.0\n"),
            None
        );
    }
}
