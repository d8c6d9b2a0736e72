//! Training-log statistics (SPEC section 5; paper Tables 4 and 5, Figs. 7, 8, 10): log
//! readers for CSV/TSV, JSON Lines, W&B exports and TensorBoard event files; series
//! cleaning (sorted steps, last value wins, missing/NaN/inf counted and excluded);
//! step windows; robust statistics; and the three analyses, gradient-norm statistics
//! ([`grad`]), median + k * MAD spikes ([`spikes`]) and smoothed curves ([`curves`]).
//! Every analysis returns rows that serialise as JSON and convert to the exported
//! tables of SPEC section 6.

pub mod curves;
pub mod grad;
pub mod metric;
pub mod read;
pub mod report;
pub mod runs;
pub mod series;
pub mod spikes;
pub mod window;

pub use read::{read_log, LogFile, LogFormat, LogRequest};
pub use runs::{load_runs, Loaded, RunSeries, RunSpec};
pub use series::{Quality, Series};
pub use window::{StepWindow, StepWindowError};

/// A number for people: four significant digits, scientific notation when very large or
/// small (`1.826`, `0.04044`, `2.500e-5`).
pub fn num(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.into();
    }
    if x == 0.0 {
        return "0".into();
    }
    let a = x.abs();
    if !(1e-3..1e5).contains(&a) {
        return format!("{x:.3e}");
    }
    let decimals = (3 - a.log10().floor() as i32).max(0) as usize;
    format!("{x:.decimals$}")
}

/// Column builders for the exported tables.
pub(crate) mod cols {
    use asa_tables::Column;

    /// A text column.
    pub fn text<T>(rows: &[T], f: impl Fn(&T) -> String) -> Column {
        Column::Str(rows.iter().map(|r| Some(f(r))).collect())
    }

    /// An integer column (`None` is an empty cell).
    pub fn int<T>(rows: &[T], f: impl Fn(&T) -> Option<i64>) -> Column {
        Column::Int(rows.iter().map(f).collect())
    }

    /// A float column.
    pub fn float<T>(rows: &[T], f: impl Fn(&T) -> f64) -> Column {
        Column::Float(rows.iter().map(|r| Some(f(r))).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::num;

    #[test]
    fn numbers_for_people() {
        assert_eq!(num(1.82634), "1.826");
        assert_eq!(num(0.040441), "0.04044");
        assert_eq!(num(12345.6), "12346");
        assert_eq!(num(-2.0), "-2.000");
        assert_eq!(num(2.5e-5), "2.500e-5");
        assert_eq!(num(f64::NAN), "nan");
    }
}
