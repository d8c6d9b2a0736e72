//! sink_mass (sink, off_by_one): the mass a row sends to no token, 1 - sum_j a_ij where a
//! sink takes it, mean per (layer, head) over sequences and queries i >= min_query.

use super::accumulator::{Accumulator, BlockEvent, FinishCtx, Needs, Setup};
use super::layer_stat::head_means;
use super::merge::Merge;
use super::results::{ModelMetrics, PerHead};
use super::rows::RowAccumulator;
use super::Metric;
use asa_core::error::Result;
use asa_kernels::row_table::SINK_MASS;

impl Metric {
    /// sink_mass: mean mass sent to no token per (layer, head); reported for variants with
    /// a sink.
    pub const SINK_MASS: Metric = Metric::by_default("sink_mass");
}

/// Row sink masses per (layer, sequence, head).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct SinkMass {
    rows: RowAccumulator,
}

/// The sink_mass accumulator.
pub fn build(s: &Setup) -> Box<dyn Accumulator> {
    let rows = RowAccumulator::new(s.layers, s.windows.len(), s.heads, s.opts.min_query);
    Box::new(SinkMass { rows })
}

impl Merge for SinkMass {
    fn merge(&mut self, other: &SinkMass) {
        self.rows.merge(&other.rows);
    }
}

impl Accumulator for SinkMass {
    fn needs(&self, _layer: usize) -> Needs {
        Needs {
            sink_mass: true,
            ..Needs::default()
        }
    }

    /// The row table's sink column (0 for a variant without a sink, which reports none).
    fn block(&mut self, b: &BlockEvent) -> Result<()> {
        if let Some(rows) = b.rows {
            let pools = &rows.pools.counted[SINK_MASS];
            self.rows.add_pools(b.layer, b.seq_offset, pools);
        }
        Ok(())
    }

    fn finish(&self, ctx: &FinishCtx, out: &mut ModelMetrics) {
        if ctx.traits.has_sink_mass {
            out.insert(Metric::SINK_MASS, PerHead(head_means(&self.rows)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accumulator::Rows;
    use crate::block_pools::{pool_host, PoolShape};
    use asa_hooks::BlockCtx;
    use asa_hooks::KeyWindow;
    use asa_kernels::row_table::BANDS;

    #[test]
    fn sink_mass_is_the_mean_over_counted_queries_per_head() {
        // 1 sequence, 2 heads, queries 0..3, min_query 1: head 0 rows 0.9, 0.2, 0.4
        let mut acc = SinkMass {
            rows: RowAccumulator::new(1, 1, 2, 1),
        };
        let mass = [0.9f32, 0.2, 0.4, 0.0, 0.1, 0.3];
        // the block's row table: the sink column of each row, the rest 0
        let width = BANDS;
        let mut table = vec![0.0f32; mass.len() * width];
        for (row, &m) in mass.iter().enumerate() {
            table[row * width + SINK_MASS] = m;
        }
        let shape = PoolShape {
            batch: 1,
            heads: 2,
            n: 3,
            skip: 1,
            late: None,
            width,
        };
        let pools = pool_host(&table, &shape);
        let ctx = BlockCtx {
            layer: 0,
            q_start: 0,
            q_len: 3,
            seq_len: 3,
            window: KeyWindow::CAUSAL,
        };
        let event = BlockEvent {
            rows: Some(Rows {
                pools: &pools,
                bands: &[],
            }),
            ..BlockEvent::empty(&ctx, 0)
        };
        Accumulator::block(&mut acc, &event).unwrap();
        let means = head_means(&acc.rows);
        assert!((means[0][0] - 0.3).abs() < 1e-7, "{means:?}");
        assert!((means[0][1] - 0.2).abs() < 1e-7, "{means:?}");
    }
}
