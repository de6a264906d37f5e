//! The trace file format: round trips, a byte-exact pin, and every way a
//! file can be damaged or crafted (truncation, bit flips, bad headers,
//! payload attacks behind a valid checksum, limits), plus atomic writes and
//! the JSON rendering. See `docs/trace-format.md`.

use crate::common::*;
use gemm_audit::trace::codec::{
    self, FORMAT_VERSION, HEADER_LEN, Limits, MAGIC, MAX_FILE_BYTES, TRAILER_LEN,
};
use gemm_audit::{Digest, Error, FormatError, OutputFingerprint, RecordedGemmTrace, testkit};

// ---------------------------------------------------------------- helpers

fn decode(bytes: &[u8]) -> Result<RecordedGemmTrace, FormatError> {
    RecordedGemmTrace::from_bytes(bytes)
}

fn file_of(n: u64) -> Vec<u8> {
    testkit::sample_trace(n)
        .to_bytes()
        .expect("sample trace encodes")
}

/// `t`'s file image sealed as a writer without limit checks would: how a
/// hostile file is made (the library's own writer refuses what its reader
/// would refuse).
fn sealed(t: &RecordedGemmTrace) -> Vec<u8> {
    codec::seal(&codec::encode_payload(t).expect("encodes"))
}

fn payload_of(file: &[u8]) -> Vec<u8> {
    file[HEADER_LEN..file.len() - TRAILER_LEN].to_vec()
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().unwrap())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The only offset at which `needle` occurs in `hay`.
fn find_unique(hay: &[u8], needle: &[u8]) -> usize {
    let hits: Vec<usize> = hay
        .windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(
        hits.len(),
        1,
        "expected exactly one occurrence of {}",
        hex(needle)
    );
    hits[0]
}

/// `payload` with `payload[at..at + len]` replaced by `with`.
fn splice(payload: &[u8], at: usize, len: usize, with: &[u8]) -> Vec<u8> {
    let mut out = payload[..at].to_vec();
    out.extend_from_slice(with);
    out.extend_from_slice(&payload[at + len..]);
    out
}

/// Decodes a payload behind a freshly computed, valid checksum.
fn decode_resealed(payload: &[u8]) -> Result<RecordedGemmTrace, FormatError> {
    decode(&codec::seal(payload))
}

fn assert_message(e: &FormatError) {
    assert!(!e.to_string().trim().is_empty(), "empty message for {e:?}");
}

fn vendor_trace() -> RecordedGemmTrace {
    let routes = vec![
        testkit::sample_vendor_route(0),
        testkit::sample_route(1),
        testkit::sample_vendor_route(20),
    ];
    let fingerprints = (0..routes.len() as u64)
        .map(|i| OutputFingerprint::of(i, format!("output {i}").as_bytes()))
        .collect();
    let mut volatile = gemm_audit::identity::VolatileMetadata::new();
    volatile.insert(
        "gpu.uuid".into(),
        "GPU-00000000-0000-0000-0000-000000000000".into(),
    );
    volatile.insert("host".into(), "h\u{e9}te \u{1f680}".into());
    RecordedGemmTrace::new(
        "vendor-mix",
        Digest::sha256(b"vendor-mix workload"),
        testkit::context(),
        routes,
        fingerprints,
        volatile,
    )
    .expect("vendor trace builds")
}

// ------------------------------------------------------------- round trips

#[test]
fn round_trip_sample_traces() {
    for n in [1, 2, 3, 5, 9, 27, 64] {
        let trace = testkit::sample_trace(n);
        let bytes = trace.to_bytes().unwrap();
        assert_eq!(
            bytes,
            trace.to_bytes().unwrap(),
            "encoding is deterministic (n = {n})"
        );
        let back = decode(&bytes).unwrap_or_else(|e| panic!("n = {n}: {e}"));
        assert_eq!(back, trace, "n = {n}");
        assert_eq!(
            back.to_bytes().unwrap(),
            bytes,
            "re-encoding is byte-identical (n = {n})"
        );
        assert_eq!(back.routes.len() as u64, n);
    }
}

#[test]
fn round_trip_vendor_route() {
    let trace = vendor_trace();
    assert!(trace.routes[0].vendor.is_some());
    let bytes = trace.to_bytes().unwrap();
    let back = decode(&bytes).unwrap();
    assert_eq!(back, trace);
    assert_eq!(back.routes[0].vendor, trace.routes[0].vendor);
    assert_eq!(back.to_bytes().unwrap(), bytes);
}

#[test]
fn round_trip_with_explicit_limits_at_the_edge() {
    let trace = testkit::sample_trace(3);
    let bytes = trace.to_bytes().unwrap();
    let exact = Limits {
        max_file_bytes: bytes.len() as u64,
        max_routes: 3,
        ..Limits::default()
    };
    assert_eq!(codec::decode_trace(&bytes, &exact).unwrap(), trace);
}

// ------------------------------------------------------------ byte-exact pin

// A change to either pin below is a FORMAT CHANGE: the bytes of a trace
// file changed. Any such change must bump `FORMAT_VERSION` (see
// docs/trace-format.md, "Stability") and then re-pin. Do not just paste new
// values.

/// `testkit::sample_trace(1).to_bytes()`, in full.
const SAMPLE_1_HEX: &str = concat!(
    "47454d4d415544540700000087040000000000000973796e74686574696334e1f5c4e12c384d9f945c8241a86db3fed7",
    "128f6d1d0cb7d6943654579e59d800010101010104000103020101012b1f04bf6adcf9089aa53746c196cdeae4da277c",
    "9e7fe529b5d0f1e2561d5ead0973796e74686574696303312e30bff3e252d2f4b29ebe4b25c3469a525a8bbeb4a281f8",
    "13884a09449e748809f61cdac0f55fe307c98e960fc66b7744af1b58029f64fee32b2799c4bd4d826c5f05736d5f3930",
    "040d73796e7468657469635f6d6d61090000020100000102010000020201000100020100010102010001020201000200",
    "02010002010201000202020100015b353cd2c963679417855088cd7a986a65a016dcda8f53975d8712e57f87298f0108",
    "6d6d612e73796e63086d31366e386b313601000140402000200102010103666d61001473796e7468657469635f736361",
    "6c61725f666d611200000000000000000100000100000000010001000002000000000200010001000000000100000100",
    "010100000001010001000102000000010200010002000000000200000100020100000002010001000202000000020200",
    "0100015b353cd2c963679417855088cd7a986a65a016dcda8f53975d8712e57f87298f010a7363616c61722d666d6105",
    "317831783100000140402000200102000103666d61001173796e7468657469635f73706c69745f6b0900000100000001",
    "0100000002010000010001000001010100000102010000020001000002010100000202010000015b353cd2c963679417",
    "855088cd7a986a65a016dcda8f53975d8712e57f87298f010a7363616c61722d666d6105317831783102010140402000",
    "200102000103666d61000f73796e7468657469635f74696c656409000000000000010000000002000000010000000001",
    "010000000102000000020000000002010000000202000000015b353cd2c963679417855088cd7a986a65a016dcda8f53",
    "975d8712e57f87298f010a7363616c61722d666d6105317831783101000140402000200102000103666d61000d73796e",
    "7468657469632d67707501090084053538302e300101010001b51b15ce922171d61ed2e64b7d132b414cb1ec82895ab0",
    "05926b9ce94b2767a9010567656d6d3000000100010a7363616c61722d666d610531783178310000001473796e746865",
    "7469635f7363616c61725f666d610105736d5f39302b1f04bf6adcf9089aa53746c196cdeae4da277c9e7fe529b5d0f1",
    "e2561d5ead0973796e74686574696303312e30bff3e252d2f4b29ebe4b25c3469a525a8bbeb4a281f813884a09449e74",
    "8809f61cdac0f55fe307c98e960fc66b7744af1b58029f64fee32b2799c4bd4d826c5f0d73796e7468657469632d6770",
    "7501090084053538302e300103666d6101fb0010fb0004fb0010fb0004fb0004404020200280100101800101fb0040dd",
    "d121e58a702c01d0986cebe9e35cbc35c772da7e85ffee75aab4c69884ca7f005b353cd2c963679417855088cd7a986a",
    "65a016dcda8f53975d8712e57f87298f0101000100fb00043329ecbbdfe7617f2a01158bcf089dddf566ceac0a1f5f72",
    "c43b500432b549770104686f73740973796e7468657469630000001a86af86041faaee0305cb101bd8d4d594518a9cc9",
    "4d0e148bcfdeb2966e5194",
);

/// SHA-256 of `testkit::sample_trace(3).to_bytes()`.
const SAMPLE_3_SHA256: &str = "4d72d657e21b8541150aeaf020bbbbfa7a9319f9f90ee5663caee9e385dca028";

#[test]
fn pinned_bytes_of_sample_trace_1() {
    let file = file_of(1);
    assert_eq!(
        hex(&file),
        SAMPLE_1_HEX,
        "trace file bytes changed: a format change needs a FORMAT_VERSION bump"
    );
}

#[test]
fn pinned_sha256_of_sample_trace_3() {
    let file = file_of(3);
    assert_eq!(
        Digest::sha256(&file).to_hex(),
        SAMPLE_3_SHA256,
        "trace file bytes changed: a format change needs a FORMAT_VERSION bump"
    );
}

#[test]
fn header_fields_at_their_offsets() {
    assert_eq!(&MAGIC, b"GEMMAUDT");
    assert_eq!(FORMAT_VERSION, 7);
    assert_eq!((HEADER_LEN, TRAILER_LEN), (20, 32));
    for n in [1, 3] {
        let file = file_of(n);
        assert_eq!(&file[0..8], b"GEMMAUDT");
        assert_eq!(u16_at(&file, 8), 7, "version");
        assert_eq!(u16_at(&file, 10), 0, "reserved");
        assert_eq!(
            u64_at(&file, 12),
            (file.len() - 52) as u64,
            "payload length"
        );
        let payload = payload_of(&file);
        assert_eq!(
            payload,
            codec::encode_payload(&testkit::sample_trace(n)).unwrap()
        );
        assert_eq!(
            &file[file.len() - 32..],
            &Digest::sha256(&payload).0,
            "trailer is SHA-256 of the payload"
        );
    }
}

// --------------------------------------------------------------- truncation

#[test]
fn truncation_at_every_offset_is_refused() {
    let file = file_of(1);
    for cut in 0..file.len() {
        let e = decode(&file[..cut]).expect_err("a truncated file must not decode");
        assert_message(&e);
        match cut {
            0..8 => assert_eq!(
                e,
                FormatError::Truncated {
                    offset: 0,
                    needed: 8,
                    len: cut as u64
                }
            ),
            // A prefix of a valid file has a valid magic: it is cut short, not foreign.
            8..20 => assert!(
                matches!(e, FormatError::Truncated { offset: 8 | 10 | 12, len, .. } if len == cut as u64),
                "cut {cut}: {e:?}"
            ),
            _ => assert_eq!(
                e,
                FormatError::LengthMismatch {
                    declared: (file.len() - 52) as u64,
                    actual: (cut - HEADER_LEN).saturating_sub(TRAILER_LEN) as u64,
                },
                "cut {cut}"
            ),
        }
    }
    // One byte too many is refused as well.
    let mut longer = file.clone();
    longer.push(0);
    assert!(matches!(
        decode(&longer),
        Err(FormatError::LengthMismatch { .. })
    ));
}

// ----------------------------------------------------------------- bit flips

#[test]
fn every_single_bit_flip_is_refused_by_region() {
    let file = file_of(1);
    for i in 0..file.len() {
        for bit in 0..8 {
            let mut f = file.clone();
            f[i] ^= 1 << bit;
            // Version 7 with bit 0 flipped is version 6, whose payload of
            // a trace without an observation is the same bytes: it reads
            // as the same trace.
            if i == 8 && bit == 0 {
                assert_eq!(decode(&f).unwrap(), decode(&file).unwrap());
                continue;
            }
            let e = decode(&f).expect_err("a flipped bit must not decode");
            assert_message(&e);
            let ok = match i {
                0..8 => matches!(e, FormatError::BadMagic { .. }),
                // Version 7 with bit 1 or 2 flipped is version 5 or 3,
                // which read (and then fail: the header is outside the
                // checksum, but the payload is not theirs); every other
                // flip is newer.
                8 if bit == 1 || bit == 2 => matches!(
                    e,
                    FormatError::Checksum { .. }
                        | FormatError::Decode(_)
                        | FormatError::TrailingBytes(_)
                        | FormatError::NonCanonical
                ),
                8 | 9 => matches!(e, FormatError::NewerVersion { supported: 7, .. }),
                10 | 11 => matches!(e, FormatError::Reserved { .. }),
                12..20 => matches!(e, FormatError::LengthMismatch { .. }),
                // Payload and trailer alike: the checksum no longer matches.
                _ => matches!(e, FormatError::Checksum { .. }),
            };
            assert!(ok, "byte {i} bit {bit}: unexpected {e:?}");
        }
    }
}

// ------------------------------------------------------------------- headers

#[test]
fn wrong_magic_is_refused() {
    let mut f = file_of(1);
    f[7] = b'X';
    assert_eq!(
        decode(&f).unwrap_err(),
        FormatError::BadMagic {
            found: b"GEMMAUDX".to_vec()
        }
    );
    let zeros = vec![0u8; 200];
    assert!(matches!(decode(&zeros), Err(FormatError::BadMagic { .. })));
    assert!(matches!(
        decode(b"{\"workload\": \"x\"}"),
        Err(FormatError::BadMagic { .. })
    ));
    // The error shows what the file begins with, and sends a profile to
    // the command that reads it.
    assert_eq!(
        decode(&f).unwrap_err().to_string(),
        "not a gemm-audit trace: it begins with \"GEMMAUDX\", a trace with \"GEMMAUDT\""
    );
    let json = decode(b"\n {\"traceEvents\": []}").unwrap_err().to_string();
    assert!(
        json.contains("it begins with \"\\n {\\\"trac\"")
            && json.ends_with("(JSON: a PyTorch profiler trace is read by `gemm-audit import`)"),
        "{json}"
    );
    let gz = decode(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3])
        .unwrap_err()
        .to_string();
    assert!(
        gz.contains("\"\\x1f\\x8b\\x08\\x00")
            && gz.ends_with(
                "(gzip data: a compressed PyTorch profiler trace is read by `gemm-audit import`)"
            ),
        "{gz}"
    );
    assert_eq!(
        decode(&[]).unwrap_err(),
        FormatError::Truncated {
            offset: 0,
            needed: 8,
            len: 0
        }
    );
}

#[test]
fn newer_version_asks_for_an_upgrade() {
    for v in [8u16, 9, u16::MAX] {
        let mut f = file_of(1);
        f[8..10].copy_from_slice(&v.to_le_bytes());
        let e = decode(&f).unwrap_err();
        assert_eq!(
            e,
            FormatError::NewerVersion {
                found: v,
                supported: FORMAT_VERSION
            }
        );
        let msg = e.to_string();
        assert!(msg.contains("upgrade"), "{msg}");
        assert!(msg.contains(&v.to_string()), "{msg}");
    }
}

#[test]
fn version_zero_is_unsupported() {
    let mut f = file_of(1);
    f[8..10].copy_from_slice(&0u16.to_le_bytes());
    let e = decode(&f).unwrap_err();
    assert_eq!(
        e,
        FormatError::UnsupportedVersion {
            found: 0,
            supported: FORMAT_VERSION
        }
    );
    assert_message(&e);
}

#[test]
fn reserved_and_length_fields_are_checked() {
    let mut f = file_of(1);
    f[10..12].copy_from_slice(&0x0100u16.to_le_bytes());
    assert_eq!(
        decode(&f).unwrap_err(),
        FormatError::Reserved { found: 0x0100 }
    );

    // A hostile declared length (near u64::MAX) must not overflow anything.
    let mut f = file_of(1);
    f[12..20].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(
        decode(&f),
        Err(FormatError::LengthMismatch {
            declared: u64::MAX,
            ..
        })
    ));
}

// ------------------------------------------- payload attacks, valid checksum

#[test]
fn trailing_bytes_after_a_valid_payload() {
    let payload = payload_of(&file_of(1));
    assert!(
        decode_resealed(&payload).is_ok(),
        "the untouched payload reseals and decodes"
    );
    for extra in [&[0u8][..], &[1, 2, 3, 4, 5], &payload[..]] {
        let mut p = payload.clone();
        p.extend_from_slice(extra);
        assert_eq!(
            decode_resealed(&p).unwrap_err(),
            FormatError::TrailingBytes(extra.len() as u64)
        );
    }
}

#[test]
fn overlong_varints_are_not_canonical() {
    let trace = testkit::sample_trace(1);
    let payload = codec::encode_payload(&trace).unwrap();

    // bincode 2 standard varint: < 251 is one byte; 251 = u16 follows,
    // 252 = u32, 253 = u64. bincode itself accepts the longer forms, so the
    // canonical re-encoding check is what refuses them.

    // The workload name's length (9, "synthetic") is the first byte.
    assert_eq!(payload[0] as usize, trace.workload.len());
    for longer in [
        vec![0xFB, 9, 0],
        vec![0xFC, 9, 0, 0, 0],
        vec![0xFD, 9, 0, 0, 0, 0, 0, 0, 0],
    ] {
        let e = decode_resealed(&splice(&payload, 0, 1, &longer)).unwrap_err();
        assert_eq!(
            e,
            FormatError::NonCanonical,
            "workload length as {}",
            hex(&longer)
        );
    }

    // The launch count (1), just before the ordered digest.
    let digest_at = find_unique(&payload, &trace.launch_set.ordered_digest.0);
    assert_eq!(payload[digest_at - 1], 1);
    let e = decode_resealed(&splice(&payload, digest_at - 1, 1, &[0xFB, 1, 0])).unwrap_err();
    assert_eq!(e, FormatError::NonCanonical);

    // The fingerprint's byte count (1024 = FB 00 04), just before its digest.
    let sha_at = find_unique(&payload, &trace.fingerprints[0].sha256.0);
    assert_eq!(&payload[sha_at - 3..sha_at], &[0xFB, 0x00, 0x04]);
    let e =
        decode_resealed(&splice(&payload, sha_at - 3, 3, &[0xFC, 0x00, 0x04, 0, 0])).unwrap_err();
    assert_eq!(e, FormatError::NonCanonical);
}

#[test]
fn huge_declared_lengths_fail_fast() {
    let trace = testkit::sample_trace(1);
    let payload = codec::encode_payload(&trace).unwrap();
    let digest_at = find_unique(&payload, &trace.launch_set.ordered_digest.0);
    let routes_at = digest_at + 32;
    assert_eq!(payload[routes_at], 1, "route count follows the launch set");

    let mut attacks: Vec<(&str, Vec<u8>)> = Vec::new();
    for len in [u64::MAX / 2, u64::MAX, MAX_FILE_BYTES + 1, 64 << 20] {
        let mut v = vec![0xFD];
        v.extend_from_slice(&len.to_le_bytes());
        attacks.push(("workload string length", splice(&payload, 0, 1, &v)));
        attacks.push(("route count", splice(&payload, routes_at, 1, &v)));
    }
    // Refused as a decode error: the declared length is checked against
    // what is left of the payload before anything is allocated for it
    // (how long that takes is a benchmark's business, not a test's).
    for (what, p) in attacks {
        let e = decode_resealed(&p).unwrap_err();
        assert!(matches!(e, FormatError::Decode(_)), "{what}: {e:?}");
        assert_message(&e);
    }
}

#[test]
fn route_count_over_the_limit() {
    let bytes = file_of(3);
    let limits = Limits {
        max_routes: 2,
        ..Limits::default()
    };
    let e = codec::decode_trace(&bytes, &limits).unwrap_err();
    assert_eq!(
        e,
        FormatError::LimitExceeded {
            what: "route count",
            found: 3,
            limit: 2
        }
    );
    assert_message(&e);
    assert!(
        codec::decode_trace(
            &bytes,
            &Limits {
                max_routes: 3,
                ..Limits::default()
            }
        )
        .is_ok()
    );
}

#[test]
fn string_length_over_the_limit() {
    let limit = Limits::default().max_string_bytes;
    assert_eq!(limit, 4096);
    let build =
        |workload: String, symbol_len: usize, module_symbol_len: usize, volatile_len: usize| {
            let mut routes = testkit::sample_routes(2);
            routes[1].kernel_symbol = "k".repeat(symbol_len);
            let mut context = testkit::context();
            context.modules[0]
                .symbols
                .push(gemm_audit::SymbolEntry::new("s".repeat(module_symbol_len)));
            let mut volatile = gemm_audit::identity::VolatileMetadata::new();
            volatile.insert("v".repeat(volatile_len), "value".into());
            let fingerprints = vec![
                OutputFingerprint::of(0, b"a"),
                OutputFingerprint::of(1, b"b"),
            ];
            sealed(
                &RecordedGemmTrace::new(
                    workload,
                    Digest::sha256(b"w"),
                    context,
                    routes,
                    fingerprints,
                    volatile,
                )
                .unwrap(),
            )
        };
    let at = limit as usize;
    // Exactly at the limit, everywhere: accepted.
    assert!(decode(&build("w".repeat(at), at, at, at)).is_ok());
    // One byte over, in each place strings live: refused.
    let over = at + 1;
    for (place, bytes) in [
        ("workload", build("w".repeat(over), 1, 1, 1)),
        ("route kernel symbol", build("w".into(), over, 1, 1)),
        ("context module symbol", build("w".into(), 1, over, 1)),
        ("volatile key", build("w".into(), 1, 1, over)),
    ] {
        let e = decode(&bytes).unwrap_err();
        assert_eq!(
            e,
            FormatError::LimitExceeded {
                what: "string length",
                found: over as u64,
                limit
            },
            "{place}"
        );
    }
    // A tighter limit applies to the sample trace too.
    let e = codec::decode_trace(
        &file_of(1),
        &Limits {
            max_string_bytes: 8,
            ..Limits::default()
        },
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            FormatError::LimitExceeded {
                what: "string length",
                limit: 8,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn file_over_the_size_limit() {
    let bytes = file_of(1);
    let len = bytes.len() as u64;
    let e = codec::decode_trace(
        &bytes,
        &Limits {
            max_file_bytes: len - 1,
            ..Limits::default()
        },
    )
    .unwrap_err();
    assert_eq!(
        e,
        FormatError::TooLarge {
            size: len,
            limit: len - 1
        }
    );
    assert_message(&e);
    assert!(
        codec::decode_trace(
            &bytes,
            &Limits {
                max_file_bytes: len,
                ..Limits::default()
            }
        )
        .is_ok()
    );
    // Even a garbage file is refused for its size before anything else.
    let e = codec::decode_trace(
        &[0u8; 64],
        &Limits {
            max_file_bytes: 10,
            ..Limits::default()
        },
    )
    .unwrap_err();
    assert_eq!(
        e,
        FormatError::TooLarge {
            size: 64,
            limit: 10
        }
    );
}

#[test]
fn inconsistent_traces_are_refused() {
    // Fewer fingerprints than routes.
    let mut trace = testkit::sample_trace(2);
    trace.fingerprints.pop();
    let e = decode_resealed(&codec::encode_payload(&trace).unwrap()).unwrap_err();
    assert!(matches!(e, FormatError::Inconsistent(_)), "{e:?}");
    assert_message(&e);

    // A launch count that disagrees with the routes.
    let mut trace = testkit::sample_trace(2);
    trace.launch_set.launch_count = 3;
    let e = decode_resealed(&codec::encode_payload(&trace).unwrap()).unwrap_err();
    assert!(matches!(e, FormatError::Inconsistent(_)), "{e:?}");

    // `new` refuses to build one in the first place.
    let mut fingerprints = testkit::sample_trace(2).fingerprints;
    fingerprints.pop();
    let r = RecordedGemmTrace::new(
        "w",
        Digest::sha256(b"w"),
        testkit::context(),
        testkit::sample_routes(2),
        fingerprints,
        Default::default(),
    );
    assert!(
        matches!(
            r,
            Err(Error::Format {
                source: FormatError::Inconsistent(_),
                ..
            })
        ),
        "{r:?}"
    );
}

/// Every payload byte replaced by a few values, behind a valid checksum:
/// never a panic, and whatever still decodes re-encodes to the same bytes.
#[test]
fn payload_byte_mutations_never_panic_and_stay_canonical() {
    let payload = payload_of(&file_of(1));
    let mut decoded = 0;
    for i in 0..payload.len() {
        for v in [0x00, 0xFF, 0xFB, payload[i] ^ 0x01, payload[i] ^ 0x80] {
            if v == payload[i] {
                continue;
            }
            let mut p = payload.clone();
            p[i] = v;
            match decode_resealed(&p) {
                Ok(t) => {
                    decoded += 1;
                    assert_eq!(
                        codec::encode_payload(&t).unwrap(),
                        p,
                        "byte {i} = {v:#04x}: not canonical"
                    );
                }
                Err(e) => assert_message(&e),
            }
        }
    }
    // Changed digests and names still decode: the sweep did reach the decoder.
    assert!(decoded > 0);
}

// ------------------------------------------------------------ atomic writes

#[test]
fn write_refuses_to_overwrite_and_replaces_on_request() {
    let dir = Scratch::new("write");
    let path = dir.path("golden.trace");
    let first = testkit::sample_trace(1);
    let second = testkit::sample_trace(2);

    first.write(&path, false).unwrap();
    let original = std::fs::read(&path).unwrap();
    assert_eq!(original, first.to_bytes().unwrap());
    assert_eq!(RecordedGemmTrace::read(&path).unwrap(), first);

    let e = second.write(&path, false).unwrap_err();
    match &e {
        Error::WouldOverwrite { path: p } => assert_eq!(p, &path),
        other => panic!("expected WouldOverwrite, got {other:?}"),
    }
    assert!(e.to_string().contains("golden.trace"));
    assert_eq!(
        std::fs::read(&path).unwrap(),
        original,
        "a refused write leaves the file untouched"
    );

    second.write(&path, true).unwrap();
    assert_eq!(RecordedGemmTrace::read(&path).unwrap(), second);
    assert_eq!(
        dir.leftovers(),
        Vec::<String>::new(),
        "temporary files left behind"
    );
}

#[test]
fn write_into_a_missing_directory_is_an_io_error() {
    let dir = Scratch::new("missing-dir");
    let path = dir.path("no/such/dir/t.trace");
    let e = testkit::sample_trace(1).write(&path, false).unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e:?}");
    assert!(!path.exists());
}

#[test]
fn concurrent_writers_never_tear_a_file() {
    let dir = Scratch::new("concurrent");
    let traces: Vec<RecordedGemmTrace> = (1..=6).map(testkit::sample_trace).collect();

    // Everyone replaces: every write succeeds and the result is one of them, whole.
    let replaced = dir.path("replaced.trace");
    std::thread::scope(|s| {
        for t in &traces {
            let p = &replaced;
            s.spawn(move || t.write(p, true).unwrap());
        }
    });
    let got = RecordedGemmTrace::read(&replaced).unwrap();
    assert!(traces.contains(&got));

    // Nobody replaces: exactly one write wins, the rest are refused.
    let fresh = dir.path("fresh.trace");
    let results: Vec<Result<(), Error>> = std::thread::scope(|s| {
        let fresh = &fresh;
        let handles: Vec<_> = traces
            .iter()
            .map(|t| s.spawn(move || t.write(fresh, false)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let winners: Vec<usize> = results
        .iter()
        .enumerate()
        .filter(|(_, r)| r.is_ok())
        .map(|(i, _)| i)
        .collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    for r in &results {
        assert!(
            matches!(r, Ok(()) | Err(Error::WouldOverwrite { .. })),
            "{r:?}"
        );
    }
    assert_eq!(RecordedGemmTrace::read(&fresh).unwrap(), traces[winners[0]]);
    assert_eq!(
        dir.leftovers(),
        Vec::<String>::new(),
        "temporary files left behind"
    );
}

// --------------------------------------------------------------------- read

#[test]
fn read_names_the_path_on_failure() {
    let dir = Scratch::new("read");

    let missing = dir.path("missing.trace");
    match RecordedGemmTrace::read(&missing).unwrap_err() {
        e @ Error::Io { .. } => {
            let Error::Io { path, source } = &e else {
                unreachable!()
            };
            assert_eq!(path, &missing);
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
            assert!(e.to_string().contains("missing.trace"), "{e}");
        }
        other => panic!("expected Io, got {other:?}"),
    }

    let garbage = dir.path("garbage.trace");
    std::fs::write(&garbage, b"this is not a trace file, just some text\n").unwrap();
    match RecordedGemmTrace::read(&garbage).unwrap_err() {
        e @ Error::Format { .. } => {
            let Error::Format { path, source } = &e else {
                unreachable!()
            };
            assert_eq!(path, &garbage);
            assert!(matches!(source, FormatError::BadMagic { .. }), "{source:?}");
            assert!(e.to_string().contains("garbage.trace"), "{e}");
        }
        other => panic!("expected Format, got {other:?}"),
    }

    let truncated = dir.path("truncated.trace");
    let bytes = file_of(1);
    std::fs::write(&truncated, &bytes[..bytes.len() - 1]).unwrap();
    assert!(matches!(
        RecordedGemmTrace::read(&truncated),
        Err(Error::Format {
            source: FormatError::LengthMismatch { .. },
            ..
        })
    ));
}

#[test]
fn read_refuses_an_oversized_file_before_reading_it() {
    let dir = Scratch::new("oversized");
    let path = dir.path("huge.trace");
    // Sparse: no disk space or memory is used; `read` must refuse on the size alone.
    let f = std::fs::File::create(&path).unwrap();
    f.set_len(MAX_FILE_BYTES + 1).unwrap();
    drop(f);
    match RecordedGemmTrace::read(&path) {
        Err(Error::Format {
            path: p,
            source: FormatError::TooLarge { size, limit },
        }) => {
            assert_eq!(p, path);
            assert_eq!((size, limit), (MAX_FILE_BYTES + 1, MAX_FILE_BYTES));
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
}

// --------------------------------------------------------------------- JSON

fn is_hex64(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Fails if any array of 32 small integers (a digest rendered as bytes) is present.
fn assert_no_byte_arrays(v: &serde_json::Value, at: &str) {
    match v {
        serde_json::Value::Array(items) => {
            assert!(
                !(items.len() == 32 && items.iter().all(|x| x.as_u64().is_some_and(|n| n < 256))),
                "{at}: digest rendered as a byte array"
            );
            for (i, x) in items.iter().enumerate() {
                assert_no_byte_arrays(x, &format!("{at}[{i}]"));
            }
        }
        serde_json::Value::Object(map) => {
            for (k, x) in map {
                assert_no_byte_arrays(x, &format!("{at}.{k}"));
            }
        }
        _ => {}
    }
}

#[test]
fn json_rendering_has_hex_digests_and_parses() {
    for trace in [testkit::sample_trace(3), vendor_trace()] {
        let json = trace.to_json();
        let v: serde_json::Value = serde_json::from_str(&json).expect("to_json is valid JSON");
        assert_no_byte_arrays(&v, "$");

        let digests = [
            (&v["workload_digest"], trace.workload_digest),
            (
                &v["launch_set"]["ordered_digest"],
                trace.launch_set.ordered_digest,
            ),
            (
                &v["routes"][0]["launch"]["arguments_digest"],
                trace.routes[0].launch.arguments_digest,
            ),
            (
                &v["routes"][0]["artifact_digest"],
                trace.routes[0].artifact_digest,
            ),
            (
                &v["fingerprints"][0]["sha256"],
                trace.fingerprints[0].sha256,
            ),
            (
                &v["context"]["modules"][0]["digest"],
                trace.context.modules[0].digest,
            ),
        ];
        for (j, d) in digests {
            let s = j
                .as_str()
                .unwrap_or_else(|| panic!("digest not a string: {j}"));
            assert!(is_hex64(s), "{s}");
            assert_eq!(s, d.to_hex());
            assert!(json.contains(&format!("\"{s}\"")));
        }
        assert_eq!(
            v["workload"],
            serde_json::Value::String(trace.workload.clone())
        );
        assert_eq!(v["routes"].as_array().unwrap().len(), trace.routes.len());

        // The rendering reads back to the same trace.
        let back: RecordedGemmTrace = serde_json::from_str(&json).unwrap();
        assert_eq!(back, trace);
    }
}

// ------------------------------------------------------------- version 1

/// The H200 m-sweep golden as it was committed in format 4 (before its
/// re-blessing in format 6 on the same card, driver and libraries) reads
/// as what the re-blessing recorded: the same routes, fingerprints and
/// launch set, no pins and no observation block, and a context that
/// differs only in the cuBLASLt module's services and declarations (the
/// `vendor-invariant` contract it serves since).
#[test]
fn version_4_golden_reads_like_its_format_6_reblessing() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let bytes = std::fs::read(dir.join("tests/data/v4/nvidia-h200-m-sweep.gat")).unwrap();
    assert_eq!(u16_at(&bytes, 8), 4, "the fixture is a version-4 file");
    let old = decode(&bytes).expect("a version-4 file decodes");
    let current = RecordedGemmTrace::read(&dir.join("traces/nvidia-h200/m-sweep.gat")).unwrap();
    assert_eq!(
        u16_at(
            &std::fs::read(dir.join("traces/nvidia-h200/m-sweep.gat")).unwrap(),
            8
        ),
        6,
        "the re-blessing was written in format 6"
    );
    assert_eq!(old.routes, current.routes);
    assert_eq!(old.fingerprints, current.fingerprints);
    assert_eq!(old.launch_set, current.launch_set);
    assert!(old.context.pins.is_empty() && current.context.pins.is_empty());
    assert!(gemm_audit::CapturedGemmGraphPlan::from_trace(&old).is_ok());
    let changes = gemm_audit::digest::field_changes(&old.context, &current.context);
    let fields: Vec<&str> = changes.iter().map(|c| c.field.as_str()).collect();
    assert_eq!(fields, vec!["module.services", "module.declarations"]);
    let differing: Vec<_> = old
        .context
        .modules
        .iter()
        .zip(&current.context.modules)
        .filter(|(o, c)| o != c)
        .map(|(o, _)| &o.kind)
        .collect();
    assert_eq!(differing, vec![&gemm_audit::vocab::ModuleKind::CublasLt]);
    assert!(old.observation.is_none());
}

/// A version-1 golden (the CPU m-sweep as committed before format 2) still
/// reads: its routes are the current golden's but for the CPU module's
/// identity (artifact and compiler, changed on purpose since: the kernels'
/// revision replaced the crate version), its launch set verifies (routes
/// frame the same in both versions), and the upgraded context differs from
/// the current one only in that identity and in what the v1 file could not
/// say (the services of symbols no route used, resources and declarations).
#[test]
fn version_1_golden_reads_and_upgrades() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let bytes = std::fs::read(dir.join("tests/data/v1/cpu-m-sweep.gat")).unwrap();
    assert_eq!(u16_at(&bytes, 8), 1, "the fixture is a version-1 file");
    let old = decode(&bytes).expect("a version-1 file decodes");
    let current = RecordedGemmTrace::read(&dir.join("traces/cpu-x86_64/m-sweep.gat")).unwrap();
    let (o, c) = (&old.context.modules[0], &current.context.modules[0]);
    assert_eq!(o.compiler.version, "0.1.0", "v1 carried the crate version");
    assert_eq!(c.compiler.version, "1", "now the CPU kernels' revision");
    let reidentified: Vec<_> = old
        .routes
        .iter()
        .map(|r| gemm_audit::ResolvedGemmRoute {
            artifact_digest: c.digest,
            compiler: c.compiler.clone(),
            ..r.clone()
        })
        .collect();
    assert_eq!(reidentified, current.routes);
    assert_eq!(old.launch_set.launch_count, current.launch_set.launch_count);
    assert!(gemm_audit::CapturedGemmGraphPlan::from_trace(&old).is_ok());
    assert_eq!(
        (
            &o.backend,
            &o.kind,
            &o.compiler.name,
            &o.compiler.options_digest,
            &o.target
        ),
        (
            &c.backend,
            &c.kind,
            &c.compiler.name,
            &c.compiler.options_digest,
            &c.target
        )
    );
    assert_eq!(o.symbol_names(), c.symbol_names());
    // Every symbol a route used serves that route in the upgrade too.
    for r in &old.routes {
        let s = o.symbol(&r.kernel_symbol).unwrap();
        assert!(s.serves.iter().any(|x| x.dtype == r.dtype && x.op == r.op));
    }
    let changes = gemm_audit::digest::field_changes(&old.context, &current.context);
    let fields: Vec<&str> = changes.iter().map(|c| c.field.as_str()).collect();
    assert_eq!(
        fields,
        vec![
            "module.digest",
            "module.compiler.version",
            "module.compiler.source_digest",
            "module.services",
            "module.resources",
            "module.declarations"
        ]
    );
    // Re-encoding writes the current version.
    let again = old.to_bytes().unwrap();
    assert_eq!(u16_at(&again, 8), FORMAT_VERSION);
    assert_eq!(decode(&again).unwrap(), old);
}

/// Graph-node symbols are held to the same 4,096-byte string limit as
/// every other string (a 1 MiB symbol was once accepted).
#[test]
fn graph_node_symbols_are_within_the_string_limit() {
    let mut t = testkit::sample_trace(1);
    t.physical = vec![gemm_audit::physical::PhysicalNode::kernel(
        "k".repeat(1 << 20),
        [1; 3],
        [1; 3],
        0,
    )];
    assert!(matches!(
        t.to_bytes(),
        Err(FormatError::LimitExceeded {
            what: "string length",
            ..
        })
    ));
    let bytes = sealed(&t);
    match decode(&bytes) {
        Err(FormatError::LimitExceeded { what, found, limit }) => {
            assert_eq!((what, found, limit), ("string length", 1 << 20, 4096));
        }
        other => panic!("{other:?}"),
    }
}

/// A sample trace whose context, volatile entries or graph `edit` makes
/// hostile, encoded as `record` would (sealed, checksummed).
fn hostile(edit: impl FnOnce(&mut RecordedGemmTrace)) -> Vec<u8> {
    let mut t = testkit::sample_trace(2);
    edit(&mut t);
    sealed(&t)
}

/// Lists that decode to many times their encoded size (a one-byte backend
/// becomes tens of bytes; framing repeats a symbol's name per service) are
/// bounded at the decoder, with a message naming the list and its limit.
#[test]
fn list_counts_over_the_limits_are_refused_while_decoding() {
    use gemm_audit::trace::{MAX_MODULES, MAX_PERMITTED, MAX_SERVICES, MAX_VOLATILE};
    let service = gemm_audit::identity::Service {
        op: gemm_audit::GemmOp::Nn,
        dtype: gemm_audit::DType::F32,
        contract: gemm_audit::vocab::ContractKind::ScalarFma,
        tensor_cores: false,
        conversion: gemm_audit::vocab::OperandConversion::ExactWiden,
    };
    // At the limits: accepted.
    let at = hostile(|t| {
        let b = t.context.permitted_backends[0].clone();
        t.context.permitted_backends = vec![b; MAX_PERMITTED];
        t.context.modules[0].symbols[0].serves = vec![service.clone(); MAX_SERVICES];
        t.volatile = (0..MAX_VOLATILE)
            .map(|i| (i.to_string(), String::new()))
            .collect();
    });
    decode(&at).expect("every list exactly at its limit decodes");
    for (what, bytes) in [
        (
            "at most 64 permitted backends or contracts",
            hostile(|t| {
                let b = t.context.permitted_backends[0].clone();
                t.context.permitted_backends = vec![b; MAX_PERMITTED + 1];
            }),
        ),
        (
            "at most 64 permitted backends or contracts",
            hostile(|t| {
                let c = t.context.permitted_contracts[0].clone();
                t.context.permitted_contracts = vec![c; 1_000_000];
            }),
        ),
        (
            "at most 256 modules",
            hostile(|t| {
                let m = t.context.modules[0].clone();
                t.context.modules = vec![m; MAX_MODULES + 1];
            }),
        ),
        (
            "at most 64 services of a symbol",
            hostile(|t| {
                t.context.modules[0].symbols[0].serves = vec![service.clone(); MAX_SERVICES + 1];
            }),
        ),
        (
            "at most 1024 volatile entries",
            hostile(|t| {
                t.volatile = (0..=MAX_VOLATILE)
                    .map(|i| (i.to_string(), String::new()))
                    .collect();
            }),
        ),
    ] {
        let e = decode(&bytes).unwrap_err();
        assert!(matches!(e, FormatError::Decode(_)), "{what}: {e:?}");
        assert!(e.to_string().contains(what), "{what}: {e}");
        assert_message(&e);
    }
}

/// Framing a context repeats each symbol's name once per service: a small
/// file of long names with many services would frame to many megabytes in
/// every validation and diff. Refused by size, before any framing.
#[test]
fn context_framing_size_and_graph_nodes_are_bounded() {
    use gemm_audit::trace::codec::{MAX_CONTEXT_FRAMED_BYTES, MAX_NODES_PER_ROUTE};
    let services: Vec<gemm_audit::identity::Service> = gemm_audit::GemmOp::ALL
        .iter()
        .flat_map(|&op| {
            gemm_audit::DType::ALL.iter().flat_map(move |&dtype| {
                [false, true].map(|tensor_cores| gemm_audit::identity::Service {
                    op,
                    dtype,
                    contract: gemm_audit::vocab::ContractKind::ScalarFma,
                    tensor_cores,
                    conversion: gemm_audit::vocab::OperandConversion::ExactWiden,
                })
            })
        })
        .collect();
    let bytes = hostile(|t| {
        let module = &mut t.context.modules[0];
        for i in 0..300 {
            let mut s = gemm_audit::SymbolEntry::new(format!("{i:04}{}", "s".repeat(4090)));
            s.serves = services.clone();
            module.symbols.push(s);
        }
    });
    assert!(
        (bytes.len() as u64) < MAX_CONTEXT_FRAMED_BYTES / 4,
        "a small file ({} bytes)",
        bytes.len()
    );
    let e = decode(&bytes).unwrap_err();
    assert!(
        matches!(
            e,
            FormatError::LimitExceeded {
                what: "context size (symbol names times their services)",
                ..
            }
        ),
        "{e:?}"
    );
    assert_message(&e);

    let nodes = |count: u64| {
        hostile(|t| {
            t.physical = (0..count)
                .map(|_| gemm_audit::physical::PhysicalNode::kernel("k", [1; 3], [1; 3], 0))
                .collect();
        })
    };
    let limit = 2 * MAX_NODES_PER_ROUTE + MAX_NODES_PER_ROUTE;
    assert!(!matches!(
        decode(&nodes(limit)),
        Err(FormatError::LimitExceeded { .. })
    ));
    let e = decode(&nodes(limit + 1)).unwrap_err();
    assert_eq!(
        e,
        FormatError::LimitExceeded {
            what: "graph node count",
            found: limit + 1,
            limit
        }
    );
}

/// Decoded structures outgrow their varint encoding several times over: a
/// legitimate trace whose payload is just under the smallest decode tier
/// (64 KiB) must still decode (the H200 `wgmma-sweep` golden, 84 routes,
/// was refused with bincode's `LimitExceeded` before the tier allowed 8x).
#[test]
fn payloads_near_the_smallest_decode_tier_still_decode() {
    let mut checked = 0;
    for n in (20..400).step_by(20) {
        let t = testkit::sample_trace(n);
        let bytes = t.to_bytes().unwrap();
        let payload = payload_of(&bytes).len();
        if !(16 << 10..=64 << 10).contains(&payload) {
            continue;
        }
        let back = RecordedGemmTrace::from_bytes(&bytes)
            .unwrap_or_else(|e| panic!("{n} routes, payload {payload} bytes: {e}"));
        assert_eq!(back.routes, t.routes);
        checked += 1;
    }
    assert!(checked >= 3, "only {checked} traces fell in 16..64 KiB");
}

/// A route's short lists are capped when read ([`MAX_ROUTE_LIST`]
/// entries): an empty string costs a byte in the file and 24 in memory, so
/// millions of them would cost memory out of proportion to the file. The
/// writer refuses what the reader would.
#[test]
fn a_route_list_over_its_cap_is_refused_by_reader_and_writer() {
    use gemm_audit::trace::MAX_ROUTE_LIST;
    let mut t = testkit::sample_trace(2);
    t.routes[1].device_capabilities = vec![String::new(); MAX_ROUTE_LIST];
    // At the cap: written and read back (the trace need not replay here).
    let bytes = t.to_bytes().expect("at the cap, written");
    assert_eq!(
        RecordedGemmTrace::from_bytes(&bytes)
            .expect("and read")
            .routes[1]
            .device_capabilities
            .len(),
        MAX_ROUTE_LIST
    );
    t.routes[1].device_capabilities.push(String::new());
    let err = t.to_bytes().expect_err("over the cap, refused").to_string();
    assert!(err.contains("entries of a route's list"), "{err}");
    // The reader refuses it on its own (here through the route's JSON).
    let json = serde_json::to_string(&t.routes[1]).unwrap();
    let err = serde_json::from_str::<gemm_audit::ResolvedGemmRoute>(&json)
        .expect_err("over the cap, not read")
        .to_string();
    assert!(err.contains("entries of a route's list"), "{err}");
}
