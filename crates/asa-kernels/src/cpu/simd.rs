//! Which x86 vector instructions the CPU kernels use: the widest the CPU has, capped by the
//! `ASA_SIMD` environment variable (`avx512`, `avx2` or `portable`), read once. The cap runs
//! this binary as a CPU without AVX-512 (or without AVX2) runs it, so that CI tests those
//! paths on any machine (candle's own matrix products choose their instructions themselves).

use std::sync::OnceLock;

/// A tier of vector instructions, narrowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SimdLevel {
    /// No x86 vector extension beyond the target's baseline (any architecture).
    Portable,
    /// AVX2 and FMA.
    Avx2,
    /// AVX-512 F and VL beside AVX2 and FMA.
    Avx512,
}

impl SimdLevel {
    /// Its name, as `ASA_SIMD` spells it.
    pub fn name(self) -> &'static str {
        match self {
            SimdLevel::Portable => "portable",
            SimdLevel::Avx2 => "avx2",
            SimdLevel::Avx512 => "avx512",
        }
    }

    fn parse(text: &str) -> Option<SimdLevel> {
        [SimdLevel::Portable, SimdLevel::Avx2, SimdLevel::Avx512]
            .into_iter()
            .find(|l| l.name() == text.trim().to_ascii_lowercase())
    }
}

/// The tier the kernels use: the CPU's, capped by `ASA_SIMD` (an unknown value caps
/// nothing).
pub fn level() -> SimdLevel {
    static LEVEL: OnceLock<SimdLevel> = OnceLock::new();
    *LEVEL.get_or_init(|| {
        let cap = std::env::var("ASA_SIMD")
            .ok()
            .and_then(|v| SimdLevel::parse(&v))
            .unwrap_or(SimdLevel::Avx512);
        detected().min(cap)
    })
}

/// The widest tier this CPU has.
fn detected() -> SimdLevel {
    #[cfg(target_arch = "x86_64")]
    {
        let wide = std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma");
        if wide
            && std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512vl")
        {
            return SimdLevel::Avx512;
        }
        if wide {
            return SimdLevel::Avx2;
        }
    }
    SimdLevel::Portable
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_and_order_narrowest_first() {
        for level in [SimdLevel::Portable, SimdLevel::Avx2, SimdLevel::Avx512] {
            assert_eq!(SimdLevel::parse(level.name()), Some(level));
        }
        assert_eq!(SimdLevel::parse(" AVX2 "), Some(SimdLevel::Avx2));
        assert_eq!(SimdLevel::parse("sse"), None);
        assert!(SimdLevel::Portable < SimdLevel::Avx2 && SimdLevel::Avx2 < SimdLevel::Avx512);
        assert!(level() <= detected());
    }
}
