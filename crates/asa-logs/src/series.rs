//! One metric of one run, from raw log rows to a clean sample: steps sorted, duplicate
//! steps resolved (the last logged value wins, as when a resumed run overwrites), and
//! missing, NaN and infinite values counted and set aside, never silently used.

use serde::Serialize;

use super::window::StepWindow;

/// One logged row: a step and its value, `None` when the cell was empty or null.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Observation {
    /// Training step.
    pub step: i64,
    /// The logged value (may be NaN or infinite); `None`: an empty cell.
    pub value: Option<f64>,
}

/// A metric as read from a log, rows in file order.
#[derive(Debug, Clone)]
pub struct RawSeries {
    /// The run inside the file (W&B exports hold several), if the file names one.
    pub run: Option<String>,
    /// The metric as reported (`grad_norm`, `loss`, or the name as requested).
    pub metric: String,
    /// The column or tag it was read from (`train/grad_norm`).
    pub source: String,
    /// Rows in file order.
    pub rows: Vec<Observation>,
}

/// Counts of what was set aside in a window (or a whole run).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Quality {
    /// Steps logged with an empty cell and no value in any other row.
    pub n_missing: usize,
    /// Steps whose (last) value is NaN.
    pub n_nan: usize,
    /// Steps whose (last) value is +inf or -inf.
    pub n_inf: usize,
    /// Values overwritten by a later row with the same step.
    pub n_duplicate: usize,
}

impl Quality {
    /// Steps excluded from the statistics: missing + NaN + inf.
    pub fn n_excluded(&self) -> usize {
        self.n_missing + self.n_nan + self.n_inf
    }
}

/// One step after duplicates are resolved.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Entry {
    step: i64,
    value: Option<f64>,
    overwritten: u32,
}

/// A series with sorted, unique steps.
#[derive(Debug, Clone)]
pub struct Series {
    /// The run inside the file, if any (see [`RawSeries::run`]).
    pub run: Option<String>,
    /// Reported metric name.
    pub metric: String,
    /// Column or tag read.
    pub source: String,
    /// Whether the file's steps were out of order (they are sorted here).
    pub reordered: bool,
    entries: Vec<Entry>,
}

/// The finite values of a series inside a window, with the counts of what was excluded.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// Steps of the kept values, ascending.
    pub steps: Vec<i64>,
    /// Finite values, aligned with `steps`.
    pub values: Vec<f64>,
    /// What was set aside.
    pub quality: Quality,
    /// Steps of the window with any entry, finite or not.
    pub n_steps: usize,
}

impl Series {
    /// Sorts by step (stable, so file order decides among equal steps) and keeps, per
    /// step, the last row that has a value; a step whose rows are all empty stays as one
    /// missing entry.
    pub fn from_raw(raw: RawSeries) -> Series {
        let reordered = raw.rows.windows(2).any(|w| w[1].step < w[0].step);
        let mut rows = raw.rows;
        if reordered {
            rows.sort_by_key(|o| o.step);
        }
        let mut entries: Vec<Entry> = Vec::with_capacity(rows.len());
        for o in rows {
            match entries.last_mut() {
                Some(e) if e.step == o.step => {
                    if o.value.is_some() {
                        if e.value.is_some() {
                            e.overwritten += 1;
                        }
                        e.value = o.value;
                    }
                }
                _ => entries.push(Entry {
                    step: o.step,
                    value: o.value,
                    overwritten: 0,
                }),
            }
        }
        Series {
            run: raw.run,
            metric: raw.metric,
            source: raw.source,
            reordered,
            entries,
        }
    }

    /// Number of distinct steps.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no step was logged.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// First and last step, if any.
    pub fn step_range(&self) -> Option<(i64, i64)> {
        Some((self.entries.first()?.step, self.entries.last()?.step))
    }

    /// Values overwritten by later rows, over the whole run.
    pub fn n_duplicate(&self) -> usize {
        self.entries.iter().map(|e| e.overwritten as usize).sum()
    }

    /// Finite values in `window` and counts of the rest.
    pub fn sample(&self, window: &StepWindow) -> Sample {
        let mut out = Sample::default();
        for e in self.entries.iter().filter(|e| window.contains(e.step)) {
            out.n_steps += 1;
            out.quality.n_duplicate += e.overwritten as usize;
            match e.value {
                None => out.quality.n_missing += 1,
                Some(v) if v.is_nan() => out.quality.n_nan += 1,
                Some(v) if v.is_infinite() => out.quality.n_inf += 1,
                Some(v) => {
                    out.steps.push(e.step);
                    out.values.push(v);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(step: i64, value: Option<f64>) -> Observation {
        Observation { step, value }
    }

    #[test]
    fn sorts_resolves_duplicates_and_counts() {
        let raw = RawSeries {
            run: None,
            metric: "grad_norm".into(),
            source: "grad_norm".into(),
            rows: vec![
                obs(2, Some(2.0)),
                obs(1, Some(1.0)),
                obs(3, Some(f64::NAN)),
                obs(4, None),
                obs(2, Some(2.5)), // overwrites step 2
                obs(1, None),      // an empty cell does not overwrite
                obs(5, Some(f64::NEG_INFINITY)),
                obs(6, Some(6.0)),
            ],
        };
        let s = Series::from_raw(raw);
        assert!(s.reordered);
        assert_eq!(s.len(), 6);
        assert_eq!(s.n_duplicate(), 1);
        let all = s.sample(&StepWindow::ALL);
        assert_eq!(all.steps, vec![1, 2, 6]);
        assert_eq!(all.values, vec![1.0, 2.5, 6.0]);
        assert_eq!(
            all.quality,
            Quality {
                n_missing: 1,
                n_nan: 1,
                n_inf: 1,
                n_duplicate: 1
            }
        );
        assert_eq!(all.quality.n_excluded(), 3);
        let w = s.sample(&"3..6".parse().unwrap());
        assert!(w.values.is_empty());
        assert_eq!(w.n_steps, 3);
        assert_eq!(w.quality.n_duplicate, 0);
    }
}
