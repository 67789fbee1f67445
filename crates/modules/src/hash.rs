//! CRC-32C (Castagnoli) hashing shared by module classes: the register update the SSE4.2
//! `crc32` instruction and DPDK's `rte_hash_crc` perform, which BESS uses for flow hashes
//! (HashLB's `hash_64`, VXLANEncap's UDP source port), so flows hash as under BESS.
//! Also [`SeededMix`], the hasher of flow tables keyed by packet fields.

/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) lookup table for byte-wise updates.
static CRC32C_TABLE: [u32; 256] = {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0x82F6_3B78
            } else {
                c >> 1
            };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
};

/// The CRC-32C update of register `crc` over `bytes`, without pre- or post-inversion: the
/// value the SSE4.2 `crc32` instruction (and `rte_hash_crc`, given `init`) gives.
#[inline(always)]
pub fn crc32c(crc: u32, bytes: &[u8]) -> u32 {
    // The instruction where the CPU has it (every x86-64 CPU since 2008), the table
    // elsewhere: 12 table steps were most of VXLANEncap's time (perf).
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("sse4.2") {
        // SAFETY: the CPU has SSE4.2 (checked just above).
        return unsafe { crc32c_sse42(crc, bytes) };
    }
    crc32c_table(crc, bytes)
}

/// [`crc32c`] with the SSE4.2 `crc32` instruction, 8 bytes a step.
///
/// # Safety
/// The CPU must support SSE4.2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
unsafe fn crc32c_sse42(crc: u32, bytes: &[u8]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u64, _mm_crc32_u8};
    let mut c = crc as u64;
    let mut chunks = bytes.chunks_exact(8);
    for w in &mut chunks {
        c = _mm_crc32_u64(c, u64::from_le_bytes(w.try_into().expect("8 bytes")));
    }
    let mut c = c as u32;
    for &b in chunks.remainder() {
        c = _mm_crc32_u8(c, b);
    }
    c
}

/// [`crc32c`] a byte at a time with the table (any CPU).
fn crc32c_table(mut crc: u32, bytes: &[u8]) -> u32 {
    for &b in bytes {
        crc = CRC32C_TABLE[((crc ^ b as u32) & 0xff) as usize] ^ (crc >> 8);
    }
    crc
}

/// A hasher for flow tables keyed by packet fields: a multiply-xor mix per word from a
/// random seed per table. SipHash (std's default) took a third of IPDefrag's time and most
/// of UrlFilter's on flows it does not track; the keys come from the wire, so the seed
/// keeps colliding keys from being chosen offline (BESS's rte_hash of the same keys is an
/// unseeded CRC). Keys should hash as whole words (`write_u64`): byte slices are mixed a
/// byte at a time.
#[derive(Clone)]
pub struct SeededMix(u64);

impl Default for SeededMix {
    fn default() -> SeededMix {
        use std::hash::{BuildHasher, RandomState};
        SeededMix(RandomState::new().hash_one(0x5eed_u64) | 1)
    }
}

impl std::hash::BuildHasher for SeededMix {
    type Hasher = MixHasher;
    fn build_hasher(&self) -> MixHasher {
        MixHasher(self.0)
    }
}

/// The state of one [`SeededMix`] hash.
pub struct MixHasher(u64);

impl std::hash::Hasher for MixHasher {
    fn finish(&self) -> u64 {
        let x = self.0;
        x ^ (x >> 32)
    }
    #[inline]
    fn write_u32(&mut self, v: u32) {
        self.write_u64(v as u64);
    }
    #[inline]
    fn write_u16(&mut self, v: u16) {
        self.write_u64(v as u64);
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(*b as u64);
        }
    }
    #[inline]
    fn write_u64(&mut self, v: u64) {
        let x = (self.0 ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = x ^ (x >> 29);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn crc32c_matches_the_standard_check_value() {
        // The standard CRC-32C check: init !0, final inversion, over "123456789".
        assert_eq!(!crc32c(!0, b"123456789"), 0xE306_9283);
    }

    /// Bit-by-bit reference (no table).
    fn reference(mut crc: u32, bytes: &[u8]) -> u32 {
        for &b in bytes {
            crc ^= b as u32;
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ 0x82F6_3B78
                } else {
                    crc >> 1
                };
            }
        }
        crc
    }

    proptest! {
        #[test]
        fn crc32c_matches_the_bitwise_reference_and_chains(
            init in any::<u32>(),
            a in proptest::collection::vec(any::<u8>(), 0..40),
            b in proptest::collection::vec(any::<u8>(), 0..40),
        ) {
            let ab = [a.clone(), b.clone()].concat();
            prop_assert_eq!(crc32c(init, &ab), reference(init, &ab));
            prop_assert_eq!(crc32c_table(init, &ab), reference(init, &ab));
            prop_assert_eq!(crc32c(crc32c(init, &a), &b), crc32c(init, &ab));
        }
    }
}
