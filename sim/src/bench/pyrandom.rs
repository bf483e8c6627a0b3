//! CPython's `random.Random` (MT19937, `Modules/_randommodule.c`, and the `_randbelow`,
//! `choice`, `randrange`, `randint` and `getrandbits` of `Lib/random.py`), so that a seed gives
//! the twin the very pods and events `serve.py` draws from it. Only the calls `serve.py` makes
//! are here.

const N: usize = 624;
const M: usize = 397;

/// Python's `random.Random(seed)` for a non-negative integer seed.
pub(crate) struct PyRandom {
    mt: [u32; N],
    index: usize,
}

impl PyRandom {
    /// `random.Random(seed)`: `init_by_array` over the seed's 32-bit words, least significant
    /// first (one word, 0, for seed 0).
    pub(crate) fn new(seed: u64) -> Self {
        let lo = (seed & 0xffff_ffff) as u32;
        let hi = (seed >> 32) as u32;
        let key: &[u32] = if hi == 0 { &[lo] } else { &[lo, hi] };
        let mut r = Self {
            mt: [0; N],
            index: N,
        };
        r.init_genrand(19_650_218);
        let (mut i, mut j) = (1_usize, 0_usize);
        for _ in 0..N.max(key.len()) {
            let prev = r.mt[i - 1] ^ (r.mt[i - 1] >> 30);
            r.mt[i] = (r.mt[i] ^ prev.wrapping_mul(1_664_525))
                .wrapping_add(key[j])
                .wrapping_add(j as u32);
            i += 1;
            j += 1;
            if i >= N {
                r.mt[0] = r.mt[N - 1];
                i = 1;
            }
            if j >= key.len() {
                j = 0;
            }
        }
        for _ in 0..N - 1 {
            let prev = r.mt[i - 1] ^ (r.mt[i - 1] >> 30);
            r.mt[i] = (r.mt[i] ^ prev.wrapping_mul(1_566_083_941)).wrapping_sub(i as u32);
            i += 1;
            if i >= N {
                r.mt[0] = r.mt[N - 1];
                i = 1;
            }
        }
        r.mt[0] = 0x8000_0000;
        r
    }

    fn init_genrand(&mut self, s: u32) {
        self.mt[0] = s;
        for i in 1..N {
            let prev = self.mt[i - 1] ^ (self.mt[i - 1] >> 30);
            self.mt[i] = 1_812_433_253_u32.wrapping_mul(prev).wrapping_add(i as u32);
        }
        self.index = N;
    }

    /// `genrand_uint32`.
    fn next_u32(&mut self) -> u32 {
        const UPPER: u32 = 0x8000_0000;
        const LOWER: u32 = 0x7fff_ffff;
        const MATRIX_A: u32 = 0x9908_b0df;
        if self.index >= N {
            for k in 0..N {
                let y = (self.mt[k] & UPPER) | (self.mt[(k + 1) % N] & LOWER);
                let mag = if y & 1 == 1 { MATRIX_A } else { 0 };
                self.mt[k] = self.mt[(k + M) % N] ^ (y >> 1) ^ mag;
            }
            self.index = 0;
        }
        let mut y = self.mt[self.index];
        self.index += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^= y >> 18;
        y
    }

    /// `random()`: 53 bits in [0, 1).
    pub(crate) fn random(&mut self) -> f64 {
        let a = f64::from(self.next_u32() >> 5);
        let b = f64::from(self.next_u32() >> 6);
        (a * 67_108_864.0 + b) * (1.0 / 9_007_199_254_740_992.0)
    }

    /// `getrandbits(k)` as 32-bit words, least significant first (the last one holds the top
    /// `k % 32` bits when `k` is not a multiple of 32).
    pub(crate) fn getrandbits_words(&mut self, k: u32) -> Vec<u32> {
        let mut out = Vec::new();
        let mut left = k;
        while left > 0 {
            let r = self.next_u32();
            out.push(if left < 32 { r >> (32 - left) } else { r });
            left = left.saturating_sub(32);
        }
        out
    }

    /// `_randbelow(n)` (`_randbelow_with_getrandbits`): `n` must be at least 1.
    pub(crate) fn randbelow(&mut self, n: u64) -> u64 {
        let k = 64 - n.leading_zeros();
        loop {
            let w = self.getrandbits_words(k);
            let r = w
                .iter()
                .rev()
                .fold(0_u64, |acc, x| (acc << 32) | u64::from(*x));
            if r < n {
                return r;
            }
        }
    }

    /// `randint(a, b)`.
    pub(crate) fn randint(&mut self, a: u64, b: u64) -> u64 {
        a + self.randbelow(b - a + 1)
    }

    /// `choice(seq)` over a byte alphabet.
    pub(crate) fn choice(&mut self, seq: &[u8]) -> u8 {
        seq[self.randbelow(seq.len() as u64) as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_cpython() {
        // python3 -c 'import random; r = random.Random(1); print(repr(r.random()),
        //   r.getrandbits(32), r.randrange(1000), r.randint(1, 3), r.getrandbits(128),
        //   r.choice("abcdefghijklmnopqrstuvwxyz0"))'
        let mut r = PyRandom::new(1);
        assert_eq!(r.random(), 0.134_364_244_112_401_22);
        assert_eq!(r.getrandbits_words(32), [3_639_700_191]);
        assert_eq!(r.randbelow(1000), 821);
        assert_eq!(r.randint(1, 3), 1);
        let w = r.getrandbits_words(128);
        let x = w
            .iter()
            .rev()
            .fold(0_u128, |a, x| (a << 32) | u128::from(*x));
        assert_eq!(x, 258_942_101_109_365_321_786_641_234_908_934_845_500);
        assert_eq!(r.choice(b"abcdefghijklmnopqrstuvwxyz0"), b'o');
        // A seed wider than 32 bits.
        let mut r = PyRandom::new((1 << 40) + 5);
        assert_eq!(r.random(), 0.504_380_297_041_844_3);
        assert_eq!(r.randbelow(150_000), 70_413);
    }
}
