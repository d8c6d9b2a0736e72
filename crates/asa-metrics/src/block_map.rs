//! block_map (SPEC section 4): per (layer, head), and over heads, the attention map at a
//! fixed resolution. With G = min(`--map-size`, T), query block a holds positions
//! [floor(a T / G), floor((a + 1) T / G)) and key block b likewise; cell (a, b) has the
//! mean of a_ij over its visible pairs (j <= i, inside a sliding window where there is
//! one), over sequences, and their largest a_ij. Every query counts (query 0 too, as in the
//! heatmap); a cell with no visible pair is absent.
//!
//! No map is held: every kernel hands each row's sums and maxima over the G key blocks
//! ([`KeyBlockRows`], the row table's key-block columns, made by the flash tiles as they
//! go), and this accumulator adds the rows of a query block in f64.

use std::ops::Range;

use super::accumulator::{Accumulator, BlockEvent, FinishCtx, KeyBlockRows, Needs, Setup};
use super::merge::Merge;
use super::results::{MetricResult, ModelMetrics};
use super::tables::{floats, ints, strs, TableRows};
use super::Metric;
use asa_core::error::Result;
use asa_hooks::KeyWindow;
use asa_kernels::row_table::{KeyBlocks, RowWants};
use asa_tables::{schema, Column};

/// The cells of one layer that hold a visible pair: query block a sees the key blocks
/// `first[a] ..= last(a)` (the keys its queries see are one run, from the first key of its
/// first query to the last key of its last query: `a` itself in a causal layer, later ones
/// in a bidirectional layer), stored row after row from `offsets[a]`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CellLayout {
    window: KeyWindow,
    first: Vec<usize>,
    offsets: Vec<usize>,
    /// `last(a)` of a bidirectional layer; empty for causal ones (`last(a)` = a), as saved
    /// states written before bidirectional layers have it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    last: Vec<usize>,
}

impl CellLayout {
    /// The cells of `blocks` in a layer whose queries see the keys of `window`.
    pub fn new(blocks: KeyBlocks, window: KeyWindow) -> Self {
        let first: Vec<usize> = (0..blocks.blocks)
            .map(|a| blocks.block_of(window.first_key(blocks.start(a))))
            .collect();
        let last: Vec<usize> = match window.sees_later() {
            true => (0..blocks.blocks)
                .map(|a| blocks.block_of(window.keys(blocks.start(a + 1) - 1).end - 1))
                .collect(),
            false => Vec::new(),
        };
        let mut layout = CellLayout {
            window,
            first,
            offsets: vec![0],
            last,
        };
        for a in 0..blocks.blocks {
            let cells = layout.last(a) + 1 - layout.first[a];
            layout.offsets.push(layout.offsets[a] + cells);
        }
        layout
    }

    /// The last key block query block `a` sees.
    #[inline(always)]
    fn last(&self, a: usize) -> usize {
        self.last.get(a).copied().unwrap_or(a)
    }

    /// Cells held.
    pub fn len(&self) -> usize {
        self.offsets.last().copied().unwrap_or(0)
    }

    /// Whether no cell is held (no block).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The index of cell (a, b), b in `first[a] ..= last(a)`.
    #[inline(always)]
    fn index(&self, a: usize, b: usize) -> usize {
        self.offsets[a] + b - self.first[a]
    }

    /// Adds to `pairs` (`[cell]`) the visible (query, key) pairs of the `queries` of `batch`
    /// sequences whose keys are those of `window`.
    pub fn add_pairs(
        &self,
        blocks: KeyBlocks,
        window: KeyWindow,
        queries: Range<usize>,
        batch: usize,
        pairs: &mut [u64],
    ) {
        for i in queries {
            let keys = window.keys(i);
            let a = blocks.block_of(i);
            blocks.split(keys.start, keys.end, |b, lo, hi| {
                pairs[self.index(a, b)] += (batch * (hi - lo)) as u64;
            });
        }
    }

    /// The visible (query, key) pairs of every cell in one sequence of the blocks' length.
    #[cfg(test)]
    fn pairs(&self, blocks: KeyBlocks) -> Vec<u64> {
        let mut pairs = vec![0; self.len()];
        self.add_pairs(blocks, self.window, 0..blocks.seq_len, 1, &mut pairs);
        pairs
    }

    /// Every cell (query block, key block), in index order.
    pub fn cells(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.first
            .iter()
            .enumerate()
            .flat_map(move |(a, &lo)| (lo..=self.last(a)).map(move |b| (a, b)))
    }
}

/// Per (layer, head, cell): the sum of a_ij over the cell's visible pairs and over
/// sequences, and the largest a_ij; per (layer, cell) the visible pairs added, counted
/// from the blocks (sequences of different lengths pool: a capture's padded batch).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct BlockMap {
    heads: usize,
    blocks: KeyBlocks,
    /// `[layer]`.
    layouts: Vec<CellLayout>,
    /// `[layer][head][cell]`.
    sum: Vec<Vec<Vec<f64>>>,
    /// `[layer][head][cell]`, -inf before any pair (NaN once a weight was NaN).
    max: Vec<Vec<Vec<f32>>>,
    /// `[layer][cell]` visible pairs added (over sequences).
    pairs: Vec<Vec<u64>>,
}

/// block_map results: query and key block a holds positions `bounds[a] .. bounds[a + 1]`;
/// per layer, the cells with a visible pair (query block, key block) and per cell the mean
/// and the largest weight, per head (`[layer][head][cell]`) and over heads (`[layer][cell]`:
/// the mean over heads and pairs, the largest over heads).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct BlockMapResult {
    pub bounds: Vec<usize>,
    pub cells: Vec<Vec<(usize, usize)>>,
    pub mean: Vec<Vec<Vec<f64>>>,
    pub max: Vec<Vec<Vec<f64>>>,
    pub layer_mean: Vec<Vec<f64>>,
    pub layer_max: Vec<Vec<f64>>,
}

/// The larger of `m` and `v`, NaN once either is.
#[inline(always)]
fn max_nan(m: f32, v: f32) -> f32 {
    if v > m || v.is_nan() {
        v
    } else {
        m
    }
}

impl BlockMap {
    /// For the layers of `windows` (the keys their queries see) x `heads`, in `blocks`.
    pub fn new(windows: &[KeyWindow], heads: usize, blocks: KeyBlocks) -> Self {
        let layouts: Vec<CellLayout> = windows
            .iter()
            .map(|&w| CellLayout::new(blocks, w))
            .collect();
        BlockMap {
            heads,
            blocks,
            sum: layouts
                .iter()
                .map(|c| vec![vec![0.0; c.len()]; heads])
                .collect(),
            max: layouts
                .iter()
                .map(|c| vec![vec![f32::NEG_INFINITY; c.len()]; heads])
                .collect(),
            pairs: layouts.iter().map(|c| vec![0; c.len()]).collect(),
            layouts,
        }
    }

    /// Adds the key-block columns `rows` of the `queries` of `layer`, whose keys are those
    /// of `window` (the layout's, or a bidirectional one over a shorter sequence).
    pub fn add(
        &mut self,
        layer: usize,
        window: KeyWindow,
        queries: Range<usize>,
        rows: &KeyBlockRows,
    ) {
        let (q_start, n) = (queries.start, queries.len());
        let cells = rows.rows();
        let batch = cells / (self.heads * n).max(1);
        let layout = &self.layouts[layer];
        layout.add_pairs(self.blocks, window, queries, batch, &mut self.pairs[layer]);
        for row in 0..batch * self.heads * n {
            let head = (row / n) % self.heads;
            let i = q_start + row % n;
            let a = self.blocks.block_of(i);
            let keys = window.keys(i);
            let lo = self.blocks.block_of(keys.start);
            let hi = self.blocks.block_of(keys.end - 1);
            let at = layout.index(a, lo);
            let (sums, maxima) = (rows.sums(row), rows.maxima(row));
            let sum = &mut self.sum[layer][head][at..=at + hi - lo];
            for (s, &v) in sum.iter_mut().zip(&sums[lo..=hi]) {
                *s += v as f64;
            }
            let max = &mut self.max[layer][head][at..=at + hi - lo];
            for (m, &v) in max.iter_mut().zip(&maxima[lo..=hi]) {
                *m = max_nan(*m, v);
            }
        }
    }

    /// Means over pairs and sequences, maxima; over heads too.
    pub fn finish(&self) -> BlockMapResult {
        let bounds = (0..=self.blocks.blocks)
            .map(|a| self.blocks.start(a))
            .collect();
        let mut result = BlockMapResult {
            bounds,
            cells: Vec::new(),
            mean: Vec::new(),
            max: Vec::new(),
            layer_mean: Vec::new(),
            layer_max: Vec::new(),
        };
        for (l, layout) in self.layouts.iter().enumerate() {
            let pairs = &self.pairs[l];
            let (sums, maxima) = (&self.sum[l], &self.max[l]);
            let per_pair = |k: usize, sum: f64| sum / pairs[k] as f64;
            let mean = sums
                .iter()
                .map(|s| s.iter().enumerate().map(|(k, &v)| per_pair(k, v)).collect())
                .collect();
            let max = maxima
                .iter()
                .map(|m| m.iter().map(|&v| v as f64).collect())
                .collect();
            let heads = self.heads as f64;
            let over_heads = (0..layout.len()).map(|k| sums.iter().map(|s| s[k]).sum::<f64>());
            let layer_mean = over_heads.enumerate().map(|(k, v)| per_pair(k, v) / heads);
            let layer_max = (0..layout.len()).map(|k| {
                maxima
                    .iter()
                    .fold(f32::NEG_INFINITY, |m, h| max_nan(m, h[k])) as f64
            });
            result.cells.push(layout.cells().collect());
            result.mean.push(mean);
            result.max.push(max);
            result.layer_mean.push(layer_mean.collect());
            result.layer_max.push(layer_max.collect());
        }
        result
    }
}

impl Merge for BlockMap {
    fn merge(&mut self, other: &BlockMap) {
        self.sum.merge(&other.sum);
        for (mine, theirs) in self
            .max
            .iter_mut()
            .flatten()
            .zip(other.max.iter().flatten())
        {
            for (m, &v) in mine.iter_mut().zip(theirs) {
                *m = max_nan(*m, v);
            }
        }
        self.pairs.merge(&other.pairs);
    }
}

impl Metric {
    /// block_map: the attention map at `--map-size` blocks (per head and over heads); a
    /// large table, so computed only when asked for.
    pub const BLOCK_MAP: Metric = Metric::on_request("block_map");
}

/// The block_map accumulator, for windows of the run's length and G = min(`--map-size`, T).
pub fn build(s: &Setup) -> Box<dyn Accumulator> {
    let seq_len = s.windows.first().map_or(0, Vec::len);
    let blocks = KeyBlocks::new(s.opts.map_size, seq_len);
    Box::new(BlockMap::new(s.key_windows, s.heads, blocks))
}

impl Accumulator for BlockMap {
    fn needs(&self, _layer: usize) -> Needs {
        Needs {
            rows: RowWants {
                key_blocks: Some(self.blocks),
                ..RowWants::default()
            },
            ..Needs::default()
        }
    }

    fn block(&mut self, b: &BlockEvent) -> Result<()> {
        if let Some(rows) = &b.key_blocks {
            BlockMap::add(
                self,
                b.layer,
                b.window,
                b.q_start..b.q_start + b.q_len,
                rows,
            );
        }
        Ok(())
    }

    fn finish(&self, _ctx: &FinishCtx, out: &mut ModelMetrics) {
        out.insert(Metric::BLOCK_MAP, BlockMap::finish(self));
    }
}

impl MetricResult for BlockMapResult {
    fn write_rows(&self, _metric: Metric, model: &str, out: &mut TableRows) {
        out.append(block_map_table(model, self));
    }
}

/// `block_map.parquet`: model, layer, head (empty: over heads), q_lo, q_hi, k_lo, k_hi,
/// stat (`mean`, `max`), value; a row per cell with a visible pair, per layer the map over
/// heads first, then each head's.
fn block_map_table(label: &str, r: &BlockMapResult) -> asa_tables::Table {
    // (layer, head, cell) in row order: each gives a `mean` and a `max` row
    let maps = || {
        r.cells.iter().enumerate().flat_map(move |(l, cells)| {
            let heads = std::iter::once(None).chain((0..r.mean[l].len()).map(Some));
            heads.flat_map(move |h| (0..cells.len()).map(move |k| (l, h, k)))
        })
    };
    let rows = || maps().flat_map(|m| [(m, "mean"), (m, "max")]);
    let value = |((l, h, k), stat): ((usize, Option<usize>, usize), &str)| match (h, stat) {
        (None, "mean") => r.layer_mean[l][k],
        (None, _) => r.layer_max[l][k],
        (Some(h), "mean") => r.mean[l][h][k],
        (Some(h), _) => r.max[l][h][k],
    };
    // positions of the cell's query (0) or key (1) block, low (0) or high (1) end
    let span = |side: usize, end: usize| {
        ints(rows().map(|((l, _, k), _)| {
            let cell = r.cells[l][k];
            let block = if side == 0 { cell.0 } else { cell.1 };
            r.bounds[block + end] as i64
        }))
    };
    schema::BLOCK_MAP.build(vec![
        ("model", strs(rows().map(|_| label.to_string()))),
        ("layer", ints(rows().map(|((l, _, _), _)| l as i64 + 1))),
        (
            "head",
            Column::Int(
                rows()
                    .map(|((_, h, _), _)| h.map(|h| h as i64 + 1))
                    .collect(),
            ),
        ),
        ("q_lo", span(0, 0)),
        ("q_hi", span(0, 1)),
        ("k_lo", span(1, 0)),
        ("k_hi", span(1, 1)),
        ("stat", strs(rows().map(|(_, stat)| stat.to_string()))),
        ("value", floats(rows().map(value))),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sliding_window_leaves_out_the_cells_it_hides() {
        // T = 10, G = 4: blocks [0, 2), [2, 5), [5, 7), [7, 10); a window of 3 keys: query
        // 5 sees 3..=5 (blocks 1 and 2), query 7 sees 5..=7 (blocks 2 and 3)
        let blocks = KeyBlocks::new(4, 10);
        let layout = CellLayout::new(blocks, KeyWindow::sliding(3));
        let cells: Vec<_> = layout.cells().collect();
        assert_eq!(
            cells,
            [(0, 0), (1, 0), (1, 1), (2, 1), (2, 2), (3, 2), (3, 3)]
        );
        // cell (1, 0): query 2 sees keys 0, 1, query 3 key 1, query 4 none -> 3 pairs;
        // (1, 1): 1 + 2 + 3; (2, 1): query 5 sees keys 3, 4, query 6 key 4 -> 3;
        // (3, 2): query 7 sees 5, 6, query 8 sees 6, query 9 none -> 3
        assert_eq!(layout.pairs(blocks), [3, 3, 6, 3, 3, 3, 6]);
        // causal: query block 3 (queries 7, 8, 9) sees every key block
        let causal = CellLayout::new(blocks, KeyWindow::CAUSAL);
        assert_eq!(causal.len(), 1 + 2 + 3 + 4);
        let pairs = causal.pairs(blocks);
        assert_eq!(pairs.iter().sum::<u64>(), (1..=10).sum::<u64>());
        // cell (3, 0): 3 queries x 2 keys; cell (3, 3): 1 + 2 + 3
        assert_eq!((pairs[6], pairs[9]), (6, 6));
    }

    /// Key-block columns `[rows, 2 G]` from `weights[row]` (every row's visible weights
    /// over keys 0.. with `first_key`), as a kernel writes them.
    fn columns(blocks: KeyBlocks, weights: &[(usize, Vec<f32>)]) -> Vec<f32> {
        let g = blocks.blocks;
        let mut table = vec![0f32; weights.len() * 2 * g];
        for (row, (first, w)) in weights.iter().enumerate() {
            let cell = &mut table[row * 2 * g..(row + 1) * 2 * g];
            blocks.split(*first, first + w.len(), |b, lo, hi| {
                let part = &w[lo - first..hi - first];
                cell[b] = part.iter().sum();
                cell[g + b] = part.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            });
        }
        table
    }

    #[test]
    fn means_over_pairs_and_sequences_and_maxima_by_hand() {
        // T = 3, G = 2: blocks [0, 1), [1, 3); one head; two sequences in blocks of 2 and 1
        // queries. Sequence 0: rows (1), (0.25, 0.75), (0.5, 0.125, 0.375); sequence 1:
        // (1), (0.5, 0.5), (0.25, 0.25, 0.5)
        let blocks = KeyBlocks::new(2, 3);
        let mut acc = BlockMap::new(&[KeyWindow::CAUSAL], 1, blocks);
        let first = columns(
            blocks,
            &[
                (0, vec![1.0, 0.0]),
                (0, vec![0.25, 0.75]),
                (0, vec![1.0, 0.0]),
                (0, vec![0.5, 0.5]),
            ],
        );
        // rows [batch, head, n]: sequence 0 queries 0, 1, then sequence 1; the first row's
        // invisible key 1 is 0 (query 0 sees key 0 only: its block 1 is not read)
        let rows = KeyBlockRows::new(&first, 4, 0, blocks);
        acc.add(0, KeyWindow::CAUSAL, 0..2, &rows);
        let last = columns(
            blocks,
            &[(0, vec![0.5, 0.125, 0.375]), (0, vec![0.25, 0.25, 0.5])],
        );
        acc.add(
            0,
            KeyWindow::CAUSAL,
            2..3,
            &KeyBlockRows::new(&last, 4, 0, blocks),
        );
        let r = acc.finish();
        assert_eq!(r.bounds, [0, 1, 3]);
        assert_eq!(r.cells, [vec![(0, 0), (1, 0), (1, 1)]]);
        // (0, 0): query 0, key 0: (1 + 1) / 2; (1, 0): queries 1, 2 x key 0:
        // (0.25 + 0.5 + 0.5 + 0.25) / 4; (1, 1): pairs (1,1), (2,1), (2,2):
        // (0.75 + 0.125 + 0.375 + 0.5 + 0.25 + 0.5) / 6
        assert_eq!(r.mean, [vec![vec![1.0, 0.375, 2.5 / 6.0]]]);
        assert_eq!(r.max, [vec![vec![1.0, 0.5, 0.75]]]);
        assert_eq!(r.layer_mean, [vec![1.0, 0.375, 2.5 / 6.0]]);
        // merged with itself: twice the sums over twice the sequences, the same map
        let mut twice = acc.clone();
        Merge::merge(&mut twice, &acc);
        assert_eq!(twice.finish(), r);
        // a third sequence of one token (a capture's padded batch): it holds cell (0, 0)
        // alone, the other cells keep their means over the pairs they hold
        let one = columns(blocks, &[(0, vec![0.5])]);
        acc.add(
            0,
            KeyWindow::CAUSAL,
            0..1,
            &KeyBlockRows::new(&one, 4, 0, blocks),
        );
        assert_eq!(acc.finish().mean, [vec![vec![2.5 / 3.0, 0.375, 2.5 / 6.0]]]);
    }
}
