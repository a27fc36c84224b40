//! YCSB's request distribution: a zipfian choice of items, and the
//! scrambled form that spreads the popular items over the key space.
//!
//! The zipfian draw is the method of Gray, Sundaresan, Englert, Baclawski
//! and Weinberger, "Quickly Generating Billion-Record Synthetic Databases"
//! (SIGMOD 1994), as YCSB's `ZipfianGenerator` uses it: with `n` items and
//! exponent `θ`, `ζ(n) = Σ 1/i^θ`, `α = 1/(1-θ)` and `η = (1 - (2/n)^(1-θ))
//! / (1 - ζ(2)/ζ(n))`, a uniform `u` gives item 0 when `u·ζ(n) < 1`, item 1
//! when `u·ζ(n) < 1 + 0.5^θ`, else `⌊n·(η·u - η + 1)^α⌋`. Item `i` (0-based)
//! comes with probability close to `1/((i+1)^θ·ζ(n))`.
//!
//! The scrambled form (YCSB's `ScrambledZipfianGenerator`) draws from a
//! zipfian over [`SCRAMBLED_ITEMS`] items whatever the key space, and maps
//! the item to a key index by its FNV-1a hash ([`super::workload::fnvhash64`])
//! modulo the number of keys: the most popular keys get the same shares of
//! the draws at any table size, and sit anywhere in it.

use rand::{Rng, SeedableRng, rngs::StdRng};

use super::workload::fnvhash64;

/// YCSB's zipfian constant (`zipfian.constant`): the exponent θ.
pub const ZIPFIAN_CONSTANT: f64 = 0.99;

/// Items of the zipfian a scrambled choice draws from (YCSB's 10¹⁰).
pub const SCRAMBLED_ITEMS: u64 = 10_000_000_000;

/// Terms of `ζ` summed one by one; beyond them the Euler–Maclaurin formula
/// gives the rest (its first left-out term is below 1e-17 there).
const EXACT_TERMS: u64 = 1000;

/// `ζ(n, θ) = Σ_{i=1..n} 1/i^θ`, for `0 < θ < 1`: the first
/// [`EXACT_TERMS`] terms summed, the rest by Euler–Maclaurin up to the
/// third derivative, so it takes microseconds for any `n`.
pub fn zeta(n: u64, theta: f64) -> f64 {
    let f = |x: f64| x.powf(-theta);
    let exact = n.min(EXACT_TERMS);
    // Smallest terms first, for the rounding.
    let head: f64 = (1..=exact).rev().map(|i| f(i as f64)).sum();
    if n <= EXACT_TERMS {
        return head;
    }
    // Σ_{i=m..n} f(i) = ∫_m^n f + (f(m) + f(n))/2 + (f'(n) - f'(m))/12
    //                 - (f'''(n) - f'''(m))/720 + ..., then less f(m).
    let (m, n) = (EXACT_TERMS as f64, n as f64);
    let integral = (n.powf(1.0 - theta) - m.powf(1.0 - theta)) / (1.0 - theta);
    let d1 = |x: f64| -theta * x.powf(-theta - 1.0);
    let d3 = |x: f64| -theta * (theta + 1.0) * (theta + 2.0) * x.powf(-theta - 3.0);
    let tail = integral + (f(m) + f(n)) / 2.0 + (d1(n) - d1(m)) / 12.0 - (d3(n) - d3(m)) / 720.0;
    head + tail - f(m)
}

/// Zipfian choice of an item in `0..items` (Gray et al.'s method, see the
/// module docs); item 0 the most popular.
#[derive(Clone, Debug)]
pub struct Zipfian {
    items: u64,
    theta: f64,
    zetan: f64,
    alpha: f64,
    eta: f64,
    half_pow_theta: f64,
}

impl Zipfian {
    /// Items `0..items` (at least 1) with exponent `theta` (`0 < θ < 1`).
    pub fn new(items: u64, theta: f64) -> Zipfian {
        let items = items.max(1);
        let zetan = zeta(items, theta);
        let zeta2 = zeta(2, theta);
        let n = items as f64;
        Zipfian {
            items,
            theta,
            zetan,
            alpha: 1.0 / (1.0 - theta),
            eta: (1.0 - (2.0 / n).powf(1.0 - theta)) / (1.0 - zeta2 / zetan),
            half_pow_theta: 0.5f64.powf(theta),
        }
    }

    /// `ζ(items, θ)`: item 0 comes with probability `1/ζ`.
    pub fn zetan(&self) -> f64 {
        self.zetan
    }

    /// The exponent θ.
    pub fn theta(&self) -> f64 {
        self.theta
    }

    /// The next item, from one uniform draw of `rng`.
    pub fn next(&self, rng: &mut impl Rng) -> u64 {
        let u: f64 = rng.random();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + self.half_pow_theta {
            return 1.min(self.items - 1);
        }
        let v = self.items as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha);
        (v as u64).min(self.items - 1)
    }
}

/// YCSB's scrambled zipfian choice of a key index in `0..keys`: a zipfian
/// item of [`SCRAMBLED_ITEMS`], hashed ([`fnvhash64`]) modulo `keys`.
#[derive(Clone, Debug)]
pub struct ScrambledZipfian {
    keys: u64,
    zipfian: Zipfian,
}

impl ScrambledZipfian {
    /// Key indexes `0..keys` (at least 1), YCSB's constant 0.99.
    pub fn new(keys: u64) -> ScrambledZipfian {
        ScrambledZipfian {
            keys: keys.max(1),
            zipfian: Zipfian::new(SCRAMBLED_ITEMS, ZIPFIAN_CONSTANT),
        }
    }

    /// The zipfian the items are drawn from.
    pub fn zipfian(&self) -> &Zipfian {
        &self.zipfian
    }

    /// The key index item `item` of the zipfian maps to.
    pub fn scramble(&self, item: u64) -> u64 {
        // Items are far below i64::MAX; the hash is non-negative but for
        // i64::MIN, which rem_euclid keeps in range too.
        fnvhash64(item as i64).rem_euclid(self.keys as i64) as u64
    }

    /// The next key index.
    pub fn next(&self, rng: &mut impl Rng) -> u64 {
        self.scramble(self.zipfian.next(rng))
    }
}

/// A seeded generator for a draw sequence: the same `seed` gives the same
/// sequence on every run of the same build (rand's `StdRng`).
pub fn seeded(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}
