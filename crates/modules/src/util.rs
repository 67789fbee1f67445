//! Small helpers shared by module classes.

/// A fast xorshift64* generator for per-packet randomness (not cryptographic).
#[derive(Clone, Debug)]
pub struct FastRng(u64);

impl FastRng {
    /// A generator seeded from `seed` (0 is replaced by a fixed odd constant).
    pub fn new(seed: u64) -> FastRng {
        FastRng(if seed == 0 {
            0x9E37_79B9_7F4A_7C15
        } else {
            seed
        })
    }

    /// A generator seeded from the TSC.
    pub fn from_tsc() -> FastRng {
        FastRng::new(bessemer_core::tsc::rdtsc() | 1)
    }

    /// Next 64 random bits.
    #[inline(always)]
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A uniform value in `0..n` (n > 0), by multiply-shift.
    #[inline(always)]
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() >> 32) * n) >> 32
    }
}
