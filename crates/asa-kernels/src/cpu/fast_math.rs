//! exp and ln for f32 written as branch-free polynomials (Cephes' expf/logf), so loops over
//! a row vectorise; within 2 ulp of the correctly rounded result over the ranges the
//! kernels use.

const LOG2E: f32 = std::f32::consts::LOG2_E;
/// ln 2 split into a part exact in f32 and the rest (Cody-Waite reduction).
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
/// 1.5 * 2^23: adding it rounds an f32 of magnitude < 2^22 to an integer.
const ROUND_MAGIC: f32 = 12_582_912.0;

/// e^x for x <= 88; exactly 0 below -87.3 (where e^x is no longer a normal f32) and for
/// -inf; e^88 above 88 (the kernels only take x <= 0).
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    let clamped = x.clamp(-87.3, 88.0);
    // n = round(x / ln 2) by the 1.5 * 2^23 trick: the sum's low mantissa bits hold n, so
    // no float-to-int conversion (which does not vectorise) is needed
    let shifted = clamped * LOG2E + ROUND_MAGIC;
    let n = shifted - ROUND_MAGIC;
    let n_int = shifted.to_bits().wrapping_sub(ROUND_MAGIC.to_bits());
    let r = clamped - n * LN2_HI - n * LN2_LO;
    let r2 = r * r;
    let p = ((((1.987_569_2e-4 * r + 1.398_199_9e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r
        + 1.666_666_5e-1)
        * r
        + 5.000_000_1e-1;
    let e = p * r2 + r + 1.0;
    let scale = f32::from_bits(n_int.wrapping_add(127) << 23);
    if x < -87.3 {
        0.0
    } else {
        e * scale
    }
}

/// ln x for normal positive x (the caller keeps x >= f32::MIN_POSITIVE).
#[inline(always)]
pub fn ln(x: f32) -> f32 {
    let bits = x.to_bits();
    // x = m * 2^e with m in [0.5, 1)
    let mut e = ((bits >> 23) & 0xff) as i32 - 126;
    let mut m = f32::from_bits((bits & 0x007f_ffff) | 0x3f00_0000);
    // m in [sqrt(1/2), sqrt(2)) keeps the polynomial's argument small
    let small = m < std::f32::consts::FRAC_1_SQRT_2;
    e -= small as i32;
    m = if small { m + m - 1.0 } else { m - 1.0 };
    let z = m * m;
    let poly = ((((((((7.037_683_6e-2 * m - 1.151_461e-1) * m + 1.167_699_9e-1) * m
        - 1.242_014_1e-1)
        * m
        + 1.424_932_3e-1)
        * m
        - 1.666_805_8e-1)
        * m
        + 2.000_071_5e-1)
        * m
        - 2.499_999_4e-1)
        * m
        + 3.333_333e-1)
        * m
        * z;
    let ef = e as f32;
    poly + ef * LN2_LO - 0.5 * z + m + ef * LN2_HI
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ulps(a: f32, b: f64) -> f64 {
        let b32 = b as f32;
        ((a - b32).abs() / (b32.abs() * f32::EPSILON).max(f32::MIN_POSITIVE)) as f64
    }

    #[test]
    fn exp_matches_f64_within_two_ulp() {
        let mut worst = 0f64;
        for k in -87_000..=87_990 {
            let x = k as f32 * 1e-3 + 1.7e-4;
            worst = worst.max(ulps(exp(x), (x as f64).exp()));
        }
        assert!(worst <= 2.0, "{worst} ulp");
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert!(exp(f32::NAN).is_nan());
        // the flush to 0 starts below -87.3, where e^x leaves the normal range
        assert!(exp(-87.29) >= f32::MIN_POSITIVE);
        assert_eq!(exp(-100.0), 0.0);
        assert_eq!(exp(0.0), 1.0);
    }

    #[test]
    fn ln_matches_f64_within_two_ulp() {
        let mut worst = 0f64;
        let mut x = f32::MIN_POSITIVE;
        while x < 1e30 {
            worst = worst.max(ulps(ln(x), (x as f64).ln()));
            for y in [x * 1.000_123, x * 1.37, x * 1.999] {
                let exact = (y as f64).ln();
                // near ln = 0 absolute error is what matters
                let err = (ln(y) as f64 - exact).abs();
                if exact.abs() > 1e-3 {
                    worst = worst.max(ulps(ln(y), exact));
                } else {
                    assert!(err < 1e-9, "ln({y})");
                }
            }
            x *= 1.73;
        }
        assert!(worst <= 2.0, "{worst} ulp");
        assert_eq!(ln(1.0), 0.0);
    }
}
