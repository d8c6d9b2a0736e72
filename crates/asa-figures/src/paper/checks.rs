//! The values a table can hold, and the refusal of every other (docs/paper-tables.md):
//! an accuracy is a fraction in [0, 1] (lm-eval-harness writes fractions; the tables show
//! percent), a standard error is finite and >= 0, a perplexity is finite and >= 1 (exp of a
//! mean negative log-likelihood, which is >= 0), a loss is finite, sizes and methods are
//! non-empty names without control characters. Each refusal names the file and the field.
//! Means are computed so that they cannot overflow ([`mean`]).

use std::path::Path;

use asa_core::error::{Error, Result};

/// `value` when `holds`, else the refusal of `field` in `file` stating `rule`.
fn held(value: f64, holds: bool, (field, file): (&str, &Path), rule: &str) -> Result<f64> {
    match holds {
        true => Ok(value),
        false => Err(Error::input(file, format!("{field} is {value}: {rule}"))),
    }
}

/// `value` of `field` in `file` when it is an accuracy (a fraction in [0, 1]).
pub fn accuracy(value: f64, field: &str, file: &Path) -> Result<f64> {
    let holds = (0.0..=1.0).contains(&value);
    held(
        value,
        holds,
        (field, file),
        "an accuracy is a fraction in [0, 1]",
    )
}

/// `value` of `field` in `file` when it is a standard error (finite, >= 0).
pub fn stderr(value: f64, field: &str, file: &Path) -> Result<f64> {
    let holds = value.is_finite() && value >= 0.0;
    held(
        value,
        holds,
        (field, file),
        "a standard error is finite and >= 0",
    )
}

/// `value` of `field` in `file` when it is a perplexity (finite, >= 1).
pub fn perplexity(value: f64, field: &str, file: &Path) -> Result<f64> {
    let holds = value.is_finite() && value >= 1.0;
    held(
        value,
        holds,
        (field, file),
        "a perplexity is finite and at least 1",
    )
}

/// `value` of `field` in `file` when it is finite.
pub fn finite(value: f64, field: &str, file: &Path) -> Result<f64> {
    held(
        value,
        value.is_finite(),
        (field, file),
        "not a finite number",
    )
}

/// A size or method name (`what`) as given in `source` (a manifest, or an option): not
/// empty, no control characters (they would break a table's line).
pub fn name(value: &str, what: &str, source: &Path) -> Result<()> {
    if value.trim().is_empty() {
        return Err(Error::input(source, format!("{what} is empty")));
    }
    if value.chars().any(char::is_control) {
        return Err(Error::input(
            source,
            format!("{what} {value:?} has a control character"),
        ));
    }
    Ok(())
}

/// The mean of finite `values` as a running convex combination (m_k = m_{k-1} (k-1)/k +
/// x_k / k): never past the largest |x|, so it cannot overflow where a sum would (two
/// losses of 1e308); `None` when empty.
pub fn mean(values: &[f64]) -> Option<f64> {
    let mut m = 0.0;
    for (i, &x) in values.iter().enumerate() {
        let k = (i + 1) as f64;
        m = m * ((k - 1.0) / k) + x / k;
    }
    (!values.is_empty()).then_some(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_and_a_mean_that_does_not_overflow() {
        let f = Path::new("r.json");
        assert!(accuracy(1.0, "acc", f).is_ok() && accuracy(0.0, "acc", f).is_ok());
        for bad in [1.5, -0.2, 1e308, f64::NAN] {
            let err = accuracy(bad, "results.piqa.\"acc,none\"", f).unwrap_err();
            assert!(err.to_string().contains("results.piqa"), "{err}");
        }
        assert!(stderr(-0.01, "s", f).is_err() && stderr(f64::INFINITY, "s", f).is_err());
        assert!(perplexity(0.0, "p", f).is_err() && perplexity(-5.0, "p", f).is_err());
        assert!(perplexity(1.0, "p", f).is_ok());
        assert!(name("", "method", f).is_err() && name("a\nb", "method", f).is_err());
        assert_eq!(mean(&[1e308, 1e308]), Some(1e308));
        assert_eq!(mean(&[-1e308, 1e308]), Some(0.0));
        // (2 + 2.5 + 3) / 3
        assert!((mean(&[2.0, 2.5, 3.0]).unwrap() - 2.5).abs() < 1e-15);
        assert_eq!(mean(&[]), None);
    }
}
