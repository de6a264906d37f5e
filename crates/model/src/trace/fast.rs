//! The fast chunk hash for output fingerprints: 128 bits per
//! [`FINGERPRINT_CHUNK_BYTES`] chunk at memory speed on a GPU, where the
//! SHA-256 chunk kernel is integer-bound (docs/performance.md).
//!
//! The hash is NH (the inner hash of UMAC): the chunk is read as
//! little-endian `u64` words, zero-padded to a whole number of 16-byte
//! pairs, and
//!
//! ```text
//! digest = Σ over pairs p of (w[2p] + k[2p] mod 2^64) × (w[2p+1] + k[2p+1] mod 2^64)   (mod 2^128)
//! ```
//!
//! with the fixed keys of [`fast_keys`]. Every product is exact and the sum
//! is mod 2^128, so the order in which a GPU warp adds its lanes' partial
//! sums cannot change the result: the device kernel (`kernels/nh128.cu`,
//! one warp per chunk) and this reference give the same bits. NH is
//! almost-universal (two different equal-length chunks collide with
//! probability about 2^-64 over the keys), not collision resistant against
//! someone who knows the keys: it finds accidents, and SHA-256 chunks stay
//! the strong hash for adversarial use. A chunk's zero padding is not
//! bound by its digest; the fingerprint that frames the digests binds the
//! output's byte length.
//!
//! It is the chunk hash of [`super::FingerprintMode::Fast`]
//! (`--fingerprint fast`); SHA-256 chunks stay the default, strong mode.

use super::FINGERPRINT_CHUNK_BYTES;

/// Bytes of one chunk digest.
pub const FAST_DIGEST_BYTES: usize = 16;
/// Keys: one per `u64` word of a full chunk.
pub const FAST_KEYS: usize = FINGERPRINT_CHUNK_BYTES / 8;
/// The seed the keys are derived from (fixed: the keys are part of the
/// hash's definition).
pub const FAST_KEY_SEED: u64 = 0x6765_6d6d_2d61_7564;

/// The [`FAST_KEYS`] keys: the splitmix64 sequence from [`FAST_KEY_SEED`].
pub fn fast_keys() -> Vec<u64> {
    let mut state = FAST_KEY_SEED;
    (0..FAST_KEYS)
        .map(|_| {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        })
        .collect()
}

/// The digest of one chunk (at most [`FINGERPRINT_CHUNK_BYTES`] bytes),
/// little-endian. `keys` must be [`fast_keys`].
pub fn fast_chunk_digest(keys: &[u64], chunk: &[u8]) -> [u8; FAST_DIGEST_BYTES] {
    assert!(
        chunk.len() <= FINGERPRINT_CHUNK_BYTES && keys.len() == FAST_KEYS,
        "a chunk of at most {FINGERPRINT_CHUNK_BYTES} bytes and {FAST_KEYS} keys"
    );
    let mut acc: u128 = 0;
    for (p, pair) in chunk.chunks(16).enumerate() {
        let mut buf = [0u8; 16];
        buf[..pair.len()].copy_from_slice(pair);
        let w0 = u64::from_le_bytes(buf[..8].try_into().expect("8 bytes"));
        let w1 = u64::from_le_bytes(buf[8..].try_into().expect("8 bytes"));
        let a = w0.wrapping_add(keys[2 * p]);
        let b = w1.wrapping_add(keys[2 * p + 1]);
        acc = acc.wrapping_add(u128::from(a) * u128::from(b));
    }
    acc.to_le_bytes()
}

/// The digests of every chunk of `bytes`, in order.
pub fn fast_chunk_digests(bytes: &[u8]) -> Vec<[u8; FAST_DIGEST_BYTES]> {
    let keys = fast_keys();
    super::map_chunks(bytes, |c| fast_chunk_digest(&keys, c))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i % 251) as u8).collect()
    }

    #[test]
    fn keys_are_fixed() {
        let k = fast_keys();
        assert_eq!(k.len(), FAST_KEYS);
        // The first splitmix64 output from the seed, pinned (computed
        // independently of this module): the keys are part of the hash's
        // definition, shared with the device kernel.
        assert_eq!(k[0], 0xff80_9f13_8dc5_fb0f);
        let distinct: std::collections::HashSet<u64> = k.iter().copied().collect();
        assert_eq!(distinct.len(), FAST_KEYS);
    }

    #[test]
    fn nh_by_hand_on_one_pair() {
        // One pair: (w0 + k0) * (w1 + k1) mod 2^128, w0 = 1, w1 = 2
        // (bytes 01 00.. 02 00..), computed here with u128 arithmetic.
        let keys = fast_keys();
        let mut chunk = [0u8; 16];
        chunk[0] = 1;
        chunk[8] = 2;
        let want = u128::from(keys[0].wrapping_add(1)) * u128::from(keys[1].wrapping_add(2));
        assert_eq!(fast_chunk_digest(&keys, &chunk), want.to_le_bytes());
        // A short pair is zero-padded.
        let want = u128::from(keys[0].wrapping_add(1)) * u128::from(keys[1]);
        assert_eq!(fast_chunk_digest(&keys, &[1]), want.to_le_bytes());
    }

    #[test]
    fn every_single_bit_flip_changes_the_digest() {
        let keys = fast_keys();
        for len in [1usize, 15, 16, 17, 100, FINGERPRINT_CHUNK_BYTES] {
            let base = pattern(len);
            let d = fast_chunk_digest(&keys, &base);
            for byte in 0..len {
                for bit in 0..8 {
                    let mut x = base.clone();
                    x[byte] ^= 1 << bit;
                    assert_ne!(
                        fast_chunk_digest(&keys, &x),
                        d,
                        "len {len} byte {byte} bit {bit}"
                    );
                }
            }
        }
    }

    #[test]
    fn digests_follow_the_chunking() {
        let bytes = pattern(3 * FINGERPRINT_CHUNK_BYTES + 5);
        let d = fast_chunk_digests(&bytes);
        assert_eq!(d.len(), 4);
        let keys = fast_keys();
        assert_eq!(
            d[3],
            fast_chunk_digest(&keys, &bytes[3 * FINGERPRINT_CHUNK_BYTES..])
        );
        // Chunks with equal contents have equal digests (position is bound
        // by the framing of the fingerprint, not the chunk digest).
        let same = vec![7u8; 2 * FINGERPRINT_CHUNK_BYTES];
        let d = fast_chunk_digests(&same);
        assert_eq!(d[0], d[1]);
        assert!(fast_chunk_digests(&[]).is_empty());
    }
}
