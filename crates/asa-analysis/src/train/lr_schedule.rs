//! Warmup-stable-decay learning rate: linear warmup from 0 to the peak over `warmup`
//! steps, constant, then linear decay to `min_ratio * peak` over the last `decay` steps.

/// A warmup-stable-decay schedule over `total` steps.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Schedule {
    pub peak: f64,
    pub warmup: usize,
    /// Steps of the final decay phase.
    pub decay: usize,
    pub total: usize,
    /// Final learning rate as a fraction of the peak.
    pub min_ratio: f64,
}

impl Schedule {
    /// The learning rate of 1-based step `step`.
    pub fn lr(&self, step: usize) -> f64 {
        let s = step as f64;
        if step <= self.warmup && self.warmup > 0 {
            return self.peak * s / self.warmup as f64;
        }
        let decay_start = self.total.saturating_sub(self.decay).max(self.warmup);
        if step <= decay_start || self.decay == 0 {
            return self.peak;
        }
        let span = (self.total - decay_start).max(1) as f64;
        let frac = ((step - decay_start) as f64 / span).min(1.0);
        self.peak * (1.0 - frac * (1.0 - self.min_ratio))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warmup_stable_decay() {
        let s = Schedule {
            peak: 1.0,
            warmup: 10,
            decay: 20,
            total: 100,
            min_ratio: 0.1,
        };
        assert_eq!(s.lr(1), 0.1); // 1 / 10
        assert_eq!(s.lr(10), 1.0);
        assert_eq!(s.lr(50), 1.0);
        assert_eq!(s.lr(80), 1.0); // decay starts after step 80
        assert!((s.lr(90) - 0.55).abs() < 1e-12); // 1 - 0.5 * 0.9
        assert!((s.lr(100) - 0.1).abs() < 1e-12);
    }
}
