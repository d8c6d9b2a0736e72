//! key_received on the flash tiles ([`super::flash`]) without a second q.k pass: the
//! online pass keeps each row's tile weights e = exp(y - m_t) as it makes them (m_t the
//! row's running maximum after that tile) beside m_t, and once the row's maximum m and
//! weight factor are final, each key's weight is e * exp(m_t - m) * factor, summed per key.
//!
//! That is one multiply-add per kept weight where recomputing them took the q.k product and
//! the exp again (SmolLM2 at 8k in f32: the second pass cost 45 % of the first). The task's
//! rows x keys are held, so a task asking for them takes fewer rows when keys are many
//! ([`rows_within`]): [`KEPT_BYTES`] a task at any length, never the block's weights.

/// The most a task keeps (each of the tasks in flight, one a core).
pub const KEPT_BYTES: usize = 32 << 20;

/// Queries a task may take so that its `groups` heads' rows of `keys` weights fit
/// [`KEPT_BYTES`] (at least one: one row a head).
pub fn rows_within(per_task: usize, groups: usize, keys: usize) -> usize {
    let fit = KEPT_BYTES / (4 * groups.max(1) * keys.max(1));
    per_task.min(fit).max(1)
}

/// A task's kept tile weights: `rows` x `span` values (the task's keys from its first tile
/// on) and each row's maximum after each tile.
pub struct KeptWeights {
    span: usize,
    tile: usize,
    tiles: usize,
    values: Vec<f32>,
    /// `[rows, tiles]`; -inf where a row saw no key of the tile.
    maxima: Vec<f32>,
}

impl KeptWeights {
    /// Room for `rows` rows over `span` keys in tiles of `tile`.
    pub fn new(rows: usize, span: usize, tile: usize) -> Self {
        let tiles = span.div_ceil(tile.max(1));
        KeptWeights {
            span,
            tile,
            tiles,
            values: vec![0f32; rows * span],
            maxima: vec![f32::NEG_INFINITY; rows * tiles],
        }
    }

    /// Keeps row `r`'s weights `e` of the tile starting `offset` keys into the span (hidden
    /// keys 0), made against the row's running maximum `max`.
    pub fn keep(&mut self, r: usize, offset: usize, e: &[f32], max: f32) {
        let at = r * self.span + offset;
        self.values[at..at + e.len()].copy_from_slice(e);
        self.maxima[r * self.tiles + offset / self.tile] = max;
    }

    /// Adds row `r`'s final weights, e * exp(m_t - `max`) * `factor`, into `sums` (one a key
    /// of the span).
    pub fn add_row(&self, r: usize, max: f32, factor: f32, sums: &mut [f32]) {
        let row = &self.values[r * self.span..(r + 1) * self.span];
        let maxima = &self.maxima[r * self.tiles..(r + 1) * self.tiles];
        for ((e, sums), &m_t) in row
            .chunks(self.tile)
            .zip(sums.chunks_mut(self.tile))
            .zip(maxima)
        {
            if m_t == f32::NEG_INFINITY {
                continue;
            }
            let scale = (m_t - max).exp() * factor;
            for (s, &e) in sums.iter_mut().zip(e) {
                *s += e * scale;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_weights_rescaled_to_the_final_maximum_are_the_softmax_weights() {
        // one row of 10 logits in tiles of 4 (the last partial), its maximum rising in the
        // second tile; a second row that sees only the first tile
        let y: Vec<f32> = (0..10).map(|i| ((i * 7 % 10) as f32 * 0.9) - 3.0).collect();
        let mut kept = KeptWeights::new(2, 10, 4);
        let mut running = f32::NEG_INFINITY;
        for k0 in (0..10).step_by(4) {
            let tile = &y[k0..(k0 + 4).min(10)];
            running = tile.iter().fold(running, |m, &v| m.max(v));
            let e: Vec<f32> = tile.iter().map(|&v| (v - running).exp()).collect();
            kept.keep(0, k0, &e, running);
        }
        let first_max = y[..4].iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
        let e: Vec<f32> = y[..4].iter().map(|&v| (v - first_max).exp()).collect();
        kept.keep(1, 0, &e, first_max);
        let total: f64 = y.iter().map(|&v| (v as f64 - running as f64).exp()).sum();
        let total_first: f64 = y[..4]
            .iter()
            .map(|&v| (v as f64 - first_max as f64).exp())
            .sum();
        let mut sums = vec![0.5f32; 10];
        kept.add_row(0, running, (1.0 / total) as f32, &mut sums);
        kept.add_row(1, first_max, (1.0 / total_first) as f32, &mut sums);
        for (k, &s) in sums.iter().enumerate() {
            let mut want = 0.5 + (y[k] as f64 - running as f64).exp() / total;
            if k < 4 {
                want += (y[k] as f64 - first_max as f64).exp() / total_first;
            }
            assert!((s as f64 - want).abs() < 1e-6, "key {k}: {s} vs {want}");
        }
    }

    #[test]
    fn long_keys_take_fewer_rows_a_task() {
        assert_eq!(rows_within(64, 3, 8192), 64);
        assert_eq!(rows_within(64, 3, 131_072), 21);
        assert_eq!(rows_within(64, 8, 1 << 30), 1);
    }
}
