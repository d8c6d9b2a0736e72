//! `--shard K/N` (SPEC section 8): shard K (0-based) of N analyses a deterministic share of
//! each model's windows, so that N shards cover every (model, window) unit exactly once
//! whatever N is. K and N come from the flag, from a Slurm job array
//! (`SLURM_ARRAY_TASK_ID` less `SLURM_ARRAY_TASK_MIN`, over `SLURM_ARRAY_TASK_STEP`, of
//! `SLURM_ARRAY_TASK_COUNT`: `--array=0-3` and `--array=1-8` both work) or from a Kubernetes
//! indexed job (`JOB_COMPLETION_INDEX` of `--shard-count N`). The flag wins over the
//! environment; `--shard-count` inside a Slurm array names two sources and is refused, as is
//! a `SLURM_ARRAY_TASK_MAX` that is not the array's last task. N is at most the windows of
//! each model ([`Shard::check_windows`]). run.json says where K and N came from.

use std::ops::Range;

use asa_core::error::{Error, Result};

/// Where a shard's K and N came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShardSource {
    Flag,
    Slurm,
    Kubernetes,
}

impl ShardSource {
    /// Where K and N came from, in words (`analyze`'s note on a written shard).
    pub fn describe(self) -> &'static str {
        match self {
            ShardSource::Flag => "from --shard",
            ShardSource::Slurm => "from the Slurm job array",
            ShardSource::Kubernetes => "from the Kubernetes indexed job",
        }
    }
}

/// Shard `index` of `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
    pub source: ShardSource,
}

impl Shard {
    /// `K/N` with 0 <= K < N.
    pub fn parse(text: &str) -> Result<Shard> {
        let bad = || {
            Error::option(
                "--shard",
                format!("`{text}` must be K/N with 0 <= K < N, e.g. 0/4"),
            )
        };
        let (k, n) = text.split_once('/').ok_or_else(bad)?;
        let index: usize = k.trim().parse().map_err(|_| bad())?;
        let count: usize = n.trim().parse().map_err(|_| bad())?;
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Shard {
            index,
            count,
            source: ShardSource::Flag,
        })
    }

    /// The shard of this run: the flag `--shard K/N`; else a Slurm array task; else a
    /// Kubernetes indexed job's index when `--shard-count` is given; else none. `env` reads
    /// an environment variable.
    pub fn resolve(
        flag: Option<&str>,
        shard_count: Option<usize>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Shard>> {
        if let Some(text) = flag {
            if shard_count.is_some() {
                return Err(Error::usage(
                    "give --shard K/N or --shard-count N (with JOB_COMPLETION_INDEX), not both",
                ));
            }
            return Shard::parse(text).map(Some);
        }
        let slurm_id = env("SLURM_ARRAY_TASK_ID");
        if let (Some(id), Some(count)) = (&slurm_id, shard_count) {
            let index = env("JOB_COMPLETION_INDEX")
                .map_or(String::new(), |i| format!(" with JOB_COMPLETION_INDEX {i}"));
            return Err(Error::option("--shard-count", format!(
                "{count}{index} (a Kubernetes indexed job) and SLURM_ARRAY_TASK_ID {id} (a Slurm job array) both name the shard: give one of them, or --shard K/N"
            )));
        }
        if let Some(id) = slurm_id {
            return slurm(&id, &env).map(Some);
        }
        let Some(count) = shard_count else {
            return Ok(None);
        };
        let Some(index) = env("JOB_COMPLETION_INDEX") else {
            return Err(Error::option(
                "--shard-count",
                "needs JOB_COMPLETION_INDEX (a Kubernetes indexed job); elsewhere give --shard K/N",
            ));
        };
        let index: usize = index.trim().parse().map_err(|_| {
            Error::usage(format!(
                "JOB_COMPLETION_INDEX `{index}` is not a non-negative integer"
            ))
        })?;
        if count == 0 || index >= count {
            return Err(Error::usage(format!(
                "JOB_COMPLETION_INDEX {index} is not below --shard-count {count}"
            )));
        }
        Ok(Some(Shard {
            index,
            count,
            source: ShardSource::Kubernetes,
        }))
    }

    /// Where N came from, for a message: `--shard K/N`, `SLURM_ARRAY_TASK_COUNT N` or
    /// `--shard-count N`.
    pub fn origin(&self) -> String {
        match self.source {
            ShardSource::Flag => format!("--shard {}/{}", self.index, self.count),
            ShardSource::Slurm => format!("SLURM_ARRAY_TASK_COUNT {}", self.count),
            ShardSource::Kubernetes => format!("--shard-count {}", self.count),
        }
    }

    /// Refuses more shards than the `total` windows of model `label` (a shard of no window
    /// is a count no run needs, and bounds what `merge` reads).
    pub fn check_windows(&self, total: usize, label: &str) -> Result<()> {
        if self.count <= total {
            return Ok(());
        }
        Err(Error::usage(format!(
            "{}: {} shards of the {total} windows of {label}: at most {total} (one window each)",
            self.origin(),
            self.count
        )))
    }

    /// The units (windows of one model, in order) this shard analyses out of `total`: the
    /// K-th of N contiguous, nearly equal ranges.
    pub fn units(&self, total: usize) -> Range<usize> {
        let at = |k: usize| (k as u128 * total as u128 / self.count as u128) as usize;
        at(self.index)..at(self.index + 1)
    }
}

/// K and N of a Slurm array task whose `SLURM_ARRAY_TASK_ID` is `id`.
fn slurm(id: &str, env: &impl Fn(&str) -> Option<String>) -> Result<Shard> {
    let number = |name: &str, value: Option<String>| -> Result<usize> {
        let value = value.ok_or_else(|| {
            Error::usage(format!(
                "SLURM_ARRAY_TASK_ID is set but {name} is not (not a job array task?); give --shard K/N"
            ))
        })?;
        value
            .trim()
            .parse()
            .map_err(|_| Error::usage(format!("{name} `{value}` is not a non-negative integer")))
    };
    let or = |name: &str, default: &str| Some(env(name).unwrap_or_else(|| default.into()));
    let task = number("SLURM_ARRAY_TASK_ID", Some(id.to_string()))?;
    let count = number("SLURM_ARRAY_TASK_COUNT", env("SLURM_ARRAY_TASK_COUNT"))?;
    let min = number("SLURM_ARRAY_TASK_MIN", or("SLURM_ARRAY_TASK_MIN", "0"))?;
    let step = number("SLURM_ARRAY_TASK_STEP", or("SLURM_ARRAY_TASK_STEP", "1"))?;
    let offset = task.checked_sub(min).filter(|_| step > 0);
    let index = match offset {
        Some(offset) if offset % step == 0 && offset / step < count => offset / step,
        _ => return Err(Error::usage(format!(
            "SLURM_ARRAY_TASK_ID {task}, SLURM_ARRAY_TASK_MIN {min}, SLURM_ARRAY_TASK_STEP {step} and SLURM_ARRAY_TASK_COUNT {count} do not make a task of the array (an array with gaps such as --array=0,3,7 cannot be sharded: give --shard K/N)"
        ))),
    };
    // the last task, when Slurm says it, must be the count's: else tasks are missing
    if let Some(max) = env("SLURM_ARRAY_TASK_MAX") {
        let max = number("SLURM_ARRAY_TASK_MAX", Some(max))?;
        let last = (count - 1)
            .checked_mul(step)
            .and_then(|s| s.checked_add(min));
        if last != Some(max) {
            return Err(Error::usage(format!(
                "SLURM_ARRAY_TASK_MAX {max} is not the last task of SLURM_ARRAY_TASK_MIN {min}, SLURM_ARRAY_TASK_STEP {step} and SLURM_ARRAY_TASK_COUNT {count} (an array with gaps cannot be sharded: give --shard K/N)"
            )));
        }
    }
    Ok(Shard {
        index,
        count,
        source: ShardSource::Slurm,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn the_flag_is_k_of_n_and_wins() {
        let slurm = [
            ("SLURM_ARRAY_TASK_ID", "3"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
        ];
        let s = Shard::resolve(Some("1/3"), None, env(&slurm))
            .unwrap()
            .unwrap();
        assert_eq!((s.index, s.count, s.source), (1, 3, ShardSource::Flag));
        for bad in ["3/3", "0/0", "3/x", "1", "-1/2", ""] {
            let err = Shard::parse(bad).unwrap_err().to_string();
            assert!(err.contains("must be K/N"), "{bad}: {err}");
        }
        assert!(Shard::resolve(None, None, env(&[])).unwrap().is_none());
    }

    #[test]
    fn slurm_arrays_from_0_or_1_and_with_steps() {
        let at = |vars: &[(&str, &str)]| Shard::resolve(None, None, env(vars));
        let s = at(&[
            ("SLURM_ARRAY_TASK_ID", "2"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!((s.index, s.count, s.source), (2, 4, ShardSource::Slurm));
        // --array=1-8
        let s = at(&[
            ("SLURM_ARRAY_TASK_ID", "8"),
            ("SLURM_ARRAY_TASK_COUNT", "8"),
            ("SLURM_ARRAY_TASK_MIN", "1"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!((s.index, s.count), (7, 8));
        // --array=0-15:4
        let s = at(&[
            ("SLURM_ARRAY_TASK_ID", "12"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
            ("SLURM_ARRAY_TASK_STEP", "4"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!((s.index, s.count), (3, 4));
        for vars in [
            &[
                ("SLURM_ARRAY_TASK_ID", "4"),
                ("SLURM_ARRAY_TASK_COUNT", "4"),
            ][..],
            &[
                ("SLURM_ARRAY_TASK_ID", "0"),
                ("SLURM_ARRAY_TASK_COUNT", "4"),
                ("SLURM_ARRAY_TASK_MIN", "1"),
            ],
            &[
                ("SLURM_ARRAY_TASK_ID", "x"),
                ("SLURM_ARRAY_TASK_COUNT", "4"),
            ],
        ] {
            let err = at(vars).unwrap_err().to_string();
            assert!(err.contains("SLURM_ARRAY_TASK_"), "{vars:?}: {err}");
        }
        let err = at(&[("SLURM_ARRAY_TASK_ID", "1")]).unwrap_err().to_string();
        assert!(err.contains("SLURM_ARRAY_TASK_COUNT is not"), "{err}");
    }

    #[test]
    fn kubernetes_index_with_a_shard_count() {
        let k8s = [("JOB_COMPLETION_INDEX", "5")];
        let s = Shard::resolve(None, Some(8), env(&k8s)).unwrap().unwrap();
        assert_eq!(
            (s.index, s.count, s.source),
            (5, 8, ShardSource::Kubernetes)
        );
        // the index alone shards nothing; a count without an index is an error
        assert!(Shard::resolve(None, None, env(&k8s)).unwrap().is_none());
        let err = Shard::resolve(None, Some(8), env(&[]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("JOB_COMPLETION_INDEX"), "{err}");
        let err = Shard::resolve(None, Some(4), env(&k8s))
            .unwrap_err()
            .to_string();
        assert!(err.contains("not below --shard-count 4"), "{err}");
        let err = Shard::resolve(Some("0/2"), Some(2), env(&k8s)).unwrap_err();
        assert!(err.to_string().contains("not both"));
    }

    #[test]
    fn contradictory_shard_sources_are_refused_naming_both() {
        let both = [
            ("JOB_COMPLETION_INDEX", "1"),
            ("SLURM_ARRAY_TASK_ID", "2"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
        ];
        let err = Shard::resolve(None, Some(3), env(&both))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--shard-count 3 with JOB_COMPLETION_INDEX 1")
                && err.contains("SLURM_ARRAY_TASK_ID 2"),
            "{err}"
        );
    }

    #[test]
    fn slurm_array_task_max_must_be_the_last_task() {
        let at = |max: &str| {
            let vars = [
                ("SLURM_ARRAY_TASK_ID", "3"),
                ("SLURM_ARRAY_TASK_COUNT", "4"),
                ("SLURM_ARRAY_TASK_MIN", "1"),
                ("SLURM_ARRAY_TASK_MAX", max),
            ];
            Shard::resolve(None, None, env(&vars))
        };
        // --array=1-4
        assert_eq!(at("4").unwrap().unwrap().index, 2);
        for bad in ["7", "3", "x"] {
            let err = at(bad).unwrap_err().to_string();
            assert!(err.contains("SLURM_ARRAY_TASK_MAX"), "{bad}: {err}");
        }
    }

    #[test]
    fn a_shard_count_is_at_most_the_windows() {
        let s = Shard::parse(&format!("0/{}", usize::MAX)).unwrap();
        let err = s.check_windows(7, "a").unwrap_err().to_string();
        assert!(err.contains("of the 7 windows of a: at most 7"), "{err}");
        assert!(Shard::parse("6/7").unwrap().check_windows(7, "a").is_ok());
    }

    #[test]
    fn shards_cover_every_unit_once_whatever_n() {
        for total in [0, 1, 7, 10, 33] {
            for count in 1..=12 {
                let mut next = 0;
                for index in 0..count {
                    let r = Shard {
                        index,
                        count,
                        source: ShardSource::Flag,
                    }
                    .units(total);
                    assert_eq!(r.start, next, "{total} {count} {index}");
                    next = r.end;
                }
                assert_eq!(next, total);
            }
        }
    }
}
