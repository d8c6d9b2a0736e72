//! head_role: each (layer, head) named sink, local, previous_token, induction or mixed from
//! four attention masses, each a mean over sequences and queries i >= min_query:
//! - first_token: a_i0 (as the first_token metric: on a sliding-window layer over the
//!   queries that still see key 0);
//! - local_mass: the mass on the last w keys, distances 0 <= i - j < w
//!   (`--role-local-window`), key 0 left out (it is first_token's);
//! - prev_token: a_{i, i-1}, distance 1 (for query 1 the previous token is key 0, counted
//!   as first_token, so query 1 adds 0 here);
//! - induction_score, when the induction probe ran ([`super::induction`]).
//!
//! The rule (docs/head-roles.md, with each threshold's source): a role is a candidate when
//! its score reaches its threshold (`>=`; a NaN score reaches none): sink (first_token),
//! induction (induction_score), previous_token (prev_token), local (local_mass). Local is
//! dropped where a more specific candidate's distance lies inside the window (distance 1
//! of previous_token when w >= 2; L - 1 of induction when L - 1 < w): its mass is part of
//! the local mass. One candidate left: that role; none, or several (sink and
//! previous_token, say): mixed. The scores go out beside the role (`head_roles.csv`).
//!
//! The induction scores come from the induction_score accumulator, which the registry lists
//! before this one: finishing reads its result from the model's metrics.

use super::accumulator::{Accumulator, BlockEvent, FinishCtx, Needs, Setup};
use super::first_token::FirstToken;
use super::induction::InductionResult;
use super::layer_stat::head_means;
use super::merge::Merge;
use super::results::{MetricResult, ModelMetrics};
use super::rows::RowAccumulator;
use super::tables::{floats, ints, strs, TableRows};
use super::Metric;
use asa_core::error::Result;
use asa_kernels::row_table::{RowWants, FIRST};
use asa_tables::{schema, Column};

impl Metric {
    /// head_role: per (layer, head) sink, local, previous_token, induction or mixed, with
    /// the scores it was decided from (`head_roles.csv`).
    pub const HEAD_ROLE: Metric = Metric::by_default("head_role");
}

/// The thresholds of the roles (`--role-*`).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RoleThresholds {
    /// sink: first_token >= this (`--role-sink`).
    pub sink: f64,
    /// w: local_mass is the mass at distances 0 .. w - 1 (`--role-local-window`, >= 1).
    pub local_window: usize,
    /// local: local_mass >= this (`--role-local`).
    pub local: f64,
    /// previous_token: prev_token >= this (`--role-prev`).
    pub prev: f64,
    /// induction: induction_score >= this (`--role-induction`).
    pub induction: f64,
}

impl Default for RoleThresholds {
    fn default() -> Self {
        RoleThresholds {
            sink: 0.5,
            local_window: 16,
            local: 0.5,
            prev: 0.4,
            induction: 0.4,
        }
    }
}

/// A head's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Sink,
    Local,
    PreviousToken,
    Induction,
    /// No role, or more than one.
    Mixed,
}

impl Role {
    /// The role as the table writes it.
    pub fn name(self) -> &'static str {
        match self {
            Role::Sink => "sink",
            Role::Local => "local",
            Role::PreviousToken => "previous_token",
            Role::Induction => "induction",
            Role::Mixed => "mixed",
        }
    }
}

/// One head's scores and role.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct HeadRole {
    pub role: Role,
    pub first_token: f64,
    pub local_mass: f64,
    pub prev_token: f64,
    /// `None` where the induction probe did not run.
    pub induction_score: Option<f64>,
}

/// Every head's role, `[layer][head]`, and the thresholds that decided them.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct HeadRoleResult {
    pub thresholds: RoleThresholds,
    /// The induction probe's L, when its scores were computed.
    pub induction_len: Option<usize>,
    pub heads: Vec<Vec<HeadRole>>,
}

/// The role of a head with these scores (see the module doc); `induction_len` is the
/// probe's L when its induction score is known.
pub fn classify(s: &HeadRole, t: &RoleThresholds, induction_len: Option<usize>) -> Role {
    let w = t.local_window;
    let sink = s.first_token >= t.sink;
    let induction = s.induction_score.is_some_and(|v| v >= t.induction);
    let prev = s.prev_token >= t.prev;
    // a candidate whose distance lies in the local window: its mass is local mass too
    let inside = (prev && w >= 2) || (induction && induction_len.is_some_and(|l| l <= w));
    let local = s.local_mass >= t.local && !inside;
    let candidates = [
        (sink, Role::Sink),
        (induction, Role::Induction),
        (prev, Role::PreviousToken),
        (local, Role::Local),
    ];
    let mut on = candidates.iter().filter(|(on, _)| *on).map(|&(_, r)| r);
    match (on.next(), on.next()) {
        (Some(role), None) => role,
        _ => Role::Mixed,
    }
}

/// The distance band of prev_token.
const PREV: (usize, usize) = (1, 2);

/// First-token, previous-token and local masses per (layer, sequence, head).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct HeadScores {
    thresholds: RoleThresholds,
    first: FirstToken,
    prev: RowAccumulator,
    local: RowAccumulator,
}

impl HeadScores {
    /// The band of local_mass, distances `[0, w)`.
    fn local_band(&self) -> (usize, usize) {
        (0, self.thresholds.local_window.max(1))
    }

    /// The roles, given the induction scores when there are some.
    pub fn roles(&self, induction: Option<&InductionResult>) -> HeadRoleResult {
        let (first, prev, local) = (
            self.first.per_head(),
            head_means(&self.prev),
            head_means(&self.local),
        );
        let heads = (0..first.len())
            .map(|l| {
                (0..first[l].len())
                    .map(|h| {
                        let mut head = HeadRole {
                            role: Role::Mixed,
                            first_token: first[l][h],
                            local_mass: local[l][h],
                            prev_token: prev[l][h],
                            induction_score: induction.map(|r| r.per_head[l][h]),
                        };
                        head.role = classify(&head, &self.thresholds, induction.map(|r| r.len));
                        head
                    })
                    .collect()
            })
            .collect();
        HeadRoleResult {
            thresholds: self.thresholds,
            induction_len: induction.map(|r| r.len),
            heads,
        }
    }
}

impl Merge for HeadScores {
    fn merge(&mut self, other: &HeadScores) {
        self.first.merge(&other.first);
        self.prev.merge(&other.prev);
        self.local.merge(&other.local);
    }
}

/// The head_role accumulator, with `MetricOptions::roles`.
pub fn build(s: &Setup) -> Box<dyn Accumulator> {
    let (seqs, mq) = (s.windows.len(), s.opts.min_query);
    Box::new(HeadScores {
        thresholds: s.opts.roles,
        first: FirstToken::windowed(s.key_windows, seqs, s.heads, mq),
        prev: RowAccumulator::new(s.layers, seqs, s.heads, mq),
        local: RowAccumulator::new(s.layers, seqs, s.heads, mq),
    })
}

impl Accumulator for HeadScores {
    fn needs(&self, _layer: usize) -> Needs {
        Needs {
            rows: RowWants {
                first: true,
                bands: vec![PREV, self.local_band()],
                ..RowWants::default()
            },
            ..Needs::default()
        }
    }

    fn block(&mut self, b: &BlockEvent) -> Result<()> {
        if let Some(rows) = b.rows {
            let p = rows.pools;
            let queries = b.q_start..b.q_start + b.q_len;
            let (counted, early) = (&p.counted[FIRST], &p.early[FIRST]);
            self.first
                .add_pools(b.layer, b.seq_offset, queries, counted, early);
            let columns = RowWants::band_columns(rows.bands, &[PREV, self.local_band()])
                .expect("the row table holds every band the accumulators asked for");
            self.prev
                .add_pools(b.layer, b.seq_offset, &p.counted[columns[1]]);
            self.local
                .add_pools(b.layer, b.seq_offset, &p.counted[columns[2]]);
        }
        Ok(())
    }

    fn finish(&self, _ctx: &FinishCtx, out: &mut ModelMetrics) {
        let roles = self.roles(out.get::<InductionResult>(Metric::INDUCTION_SCORE));
        out.insert(Metric::HEAD_ROLE, roles);
    }
}

impl MetricResult for HeadRoleResult {
    /// `head_roles.csv`: a row per (layer, head), induction_score empty where not computed.
    fn write_rows(&self, _metric: Metric, model: &str, out: &mut TableRows) {
        let rows: Vec<(i64, i64, &HeadRole)> = (self.heads.iter().enumerate())
            .flat_map(|(l, heads)| {
                let layer = l as i64 + 1;
                (heads.iter().enumerate()).map(move |(h, r)| (layer, h as i64 + 1, r))
            })
            .collect();
        out.append(schema::HEAD_ROLES.build(vec![
            ("model", strs(rows.iter().map(|_| model.to_string()))),
            ("layer", ints(rows.iter().map(|r| r.0))),
            ("head", ints(rows.iter().map(|r| r.1))),
            (
                "role",
                strs(rows.iter().map(|r| r.2.role.name().to_string())),
            ),
            ("first_token", floats(rows.iter().map(|r| r.2.first_token))),
            ("local_mass", floats(rows.iter().map(|r| r.2.local_mass))),
            ("prev_token", floats(rows.iter().map(|r| r.2.prev_token))),
            (
                "induction_score",
                Column::Float(rows.iter().map(|r| r.2.induction_score).collect()),
            ),
        ]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(first: f64, local: f64, prev: f64, induction: Option<f64>) -> HeadRole {
        HeadRole {
            role: Role::Mixed,
            first_token: first,
            local_mass: local,
            prev_token: prev,
            induction_score: induction,
        }
    }

    #[test]
    fn the_rule_by_hand() {
        let t = RoleThresholds::default(); // sink 0.5, w 16, local 0.5, prev 0.4, induction 0.4
        let role = |h: HeadRole, len: Option<usize>| classify(&h, &t, len);
        assert_eq!(role(head(0.9, 0.05, 0.02, None), None), Role::Sink);
        assert_eq!(role(head(0.1, 0.8, 0.1, None), None), Role::Local);
        // distance 1 lies in the window: a previous-token head is not local too
        assert_eq!(role(head(0.1, 0.9, 0.7, None), None), Role::PreviousToken);
        assert_eq!(
            role(head(0.1, 0.1, 0.1, Some(0.6)), Some(50)),
            Role::Induction
        );
        // L - 1 = 9 < 16: the induction key is local; L - 1 = 16 is not
        assert_eq!(
            role(head(0.0, 0.7, 0.0, Some(0.6)), Some(10)),
            Role::Induction
        );
        assert_eq!(role(head(0.0, 0.7, 0.0, Some(0.6)), Some(17)), Role::Mixed);
        // several roles, or none
        assert_eq!(role(head(0.5, 0.0, 0.4, None), None), Role::Mixed);
        assert_eq!(role(head(0.3, 0.3, 0.3, Some(0.3)), Some(50)), Role::Mixed);
        // a NaN score reaches no threshold
        assert_eq!(role(head(f64::NAN, 0.9, 0.0, None), None), Role::Local);
        // w = 1: distance 1 is outside the window, local stays a candidate
        let narrow = RoleThresholds {
            local_window: 1,
            ..t
        };
        assert_eq!(
            classify(&head(0.0, 0.6, 0.4, None), &narrow, None),
            Role::Mixed
        );
        // issue 54: the widest window holds every distance; `L < w + 1` wrapped to 0 there
        let widest = RoleThresholds {
            local_window: usize::MAX,
            ..t
        };
        assert_eq!(
            classify(&head(0.0, 0.7, 0.0, Some(0.6)), &widest, Some(10)),
            Role::Induction
        );
        assert_eq!(Role::PreviousToken.name(), "previous_token");
        assert_eq!(
            serde_json::to_value(Role::PreviousToken).unwrap(),
            "previous_token"
        );
    }
}
