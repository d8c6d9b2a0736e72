//! The one shape every metric has: an [`Accumulator`] says what it [`Needs`], takes
//! [`Event`]s (the same ones whichever kernel computed a block), merges exactly with another
//! of its kind, and finishes into results ([`super::results`]).

use std::any::Any;

use candle_core::Tensor;

use super::block_pools::BlockPools;
use super::results::ModelMetrics;
use super::{MetricOptions, VariantTraits};
use asa_core::error::Result;
pub use asa_hooks::row_pass::QkSums;
use asa_hooks::{BlockCtx, Hook, KeyWindow};
use asa_kernels::row_table::{Column, KeyBlocks, RowWants};

/// What an accumulator reads. The probe asks the kernels for the union of every
/// accumulator's needs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Needs {
    /// Columns of the pattern's row table (first-token mass, weight sum, entropy, distance
    /// bands, the row's largest logit).
    pub rows: RowWants,
    /// Also pool the row table over the queries `>= rows_from` of every window
    /// ([`BlockPools::late`]): a mean over a later part of each window (the induction
    /// probe's second copy). Every accumulator asking for it asks for the same query.
    pub rows_from: Option<usize>,
    /// Sums of raw q.k over the visible keys.
    pub qk: bool,
    /// Each row's mass that goes to no token (sink, off_by_one).
    pub sink_mass: bool,
    /// The entropy of the plain softmax instead of the pattern (`--entropy-of softmax`).
    pub softmax_entropy: bool,
    /// The block's weights themselves (per-key metrics): the block is materialised.
    pub weights: bool,
    /// Once-per-layer hooks (`Alpha`, `Gate`) or the logits (`Logits`).
    pub tensors: Vec<Hook>,
}

impl Needs {
    /// Both needs: what either reads.
    pub fn union(mut self, other: Needs) -> Needs {
        self.rows.first |= other.rows.first;
        self.rows.sum |= other.rows.sum;
        self.rows.entropy |= other.rows.entropy;
        self.rows.max_logit |= other.rows.max_logit;
        self.rows.key_blocks = self.rows.key_blocks.or(other.rows.key_blocks);
        self.rows.key_sums_from = self.rows.key_sums_from.or(other.rows.key_sums_from);
        // every band either reads, each once, in the order first seen: an accumulator finds
        // its own bands' columns by range (`RowWants::band_columns`)
        for band in other.rows.bands {
            if !self.rows.bands.contains(&band) {
                self.rows.bands.push(band);
            }
        }
        if let (Some(mine), Some(theirs)) = (self.rows_from, other.rows_from) {
            assert_eq!(
                mine, theirs,
                "two metrics pool the rows from different queries"
            );
        }
        self.rows_from = self.rows_from.or(other.rows_from);
        self.qk |= other.qk;
        self.sink_mass |= other.sink_mass;
        self.softmax_entropy |= other.softmax_entropy;
        self.weights |= other.weights;
        self.tensors.extend(other.tensors);
        self
    }

    /// Whether a column of the pattern's row table is read (the weights' reductions).
    pub fn reads_pattern_rows(&self) -> bool {
        let r = &self.rows;
        r.first || r.sum || r.entropy || !r.bands.is_empty() || r.key_blocks.is_some()
    }

    /// Whether `hook` (a block or once-per-layer hook) must be computed for these needs.
    pub fn wants(&self, hook: Hook) -> bool {
        match hook {
            // a materialised block's key sums are taken from its weights
            Hook::Pattern => {
                self.reads_pattern_rows() || self.weights || self.rows.key_sums_from.is_some()
            }
            Hook::Softmax => self.softmax_entropy,
            Hook::Qk => self.qk,
            Hook::SinkMass => self.sink_mass,
            Hook::MaxLogit => self.rows.max_logit,
            other => self.tensors.contains(&other),
        }
    }
}

/// A block's row table, pooled ([`BlockPools`]; columns as in [`asa_kernels::row_table`]),
/// whichever kernel made it: the fused kernels fill it as they go, a materialised block
/// gets the same columns from the row pass over its weights (and its sink mass and row
/// maxima written into their columns).
#[derive(Debug, Clone, Copy)]
pub struct Rows<'a> {
    pub pools: &'a BlockPools,
    /// The table's distance bands (`RowWants::bands` of the union of every need): where
    /// each band's column is ([`RowWants::band_columns`]).
    pub bands: &'a [(usize, usize)],
}

/// A block's key-block columns (`block_map`): per row, in `[batch, head, n]` order, the sum
/// and then the maximum of its weights over each of the G key blocks ([`KeyBlocks`]; a
/// block the row sees no key of holds 0 in both), read in place from the host row table.
#[derive(Debug, Clone, Copy)]
pub struct KeyBlockRows<'a> {
    table: &'a [f32],
    width: usize,
    column: usize,
    pub blocks: KeyBlocks,
}

impl<'a> KeyBlockRows<'a> {
    /// The columns from `column` on (G sums, then G maxima) of a host `table` of `width`
    /// columns.
    pub fn new(table: &'a [f32], width: usize, column: usize, blocks: KeyBlocks) -> Self {
        KeyBlockRows {
            table,
            width: width.max(1),
            column,
            blocks,
        }
    }

    /// Rows of the table.
    pub fn rows(&self) -> usize {
        self.table.len() / self.width
    }

    /// Row `row`'s sums over each key block, `[G]`.
    pub fn sums(&self, row: usize) -> &'a [f32] {
        let at = row * self.width + self.column;
        &self.table[at..at + self.blocks.blocks]
    }

    /// Row `row`'s largest weight in each key block, `[G]`.
    pub fn maxima(&self, row: usize) -> &'a [f32] {
        let at = row * self.width + self.column + self.blocks.blocks;
        &self.table[at..at + self.blocks.blocks]
    }
}

/// A block's weights themselves, handed on only when an accumulator asked for them
/// ([`Needs::weights`]): the effective weights, and the mass each row sends to no token.
#[derive(Debug, Clone, Copy)]
pub struct Weights<'a> {
    /// `[batch, head, n, q_start + n]`.
    pub pattern: &'a Tensor,
    /// `[batch, head, n]` (sink, off_by_one).
    pub sink_mass: Option<&'a Tensor>,
}

/// What a kernel computed for one query block: queries `q_start .. q_start + q_len` of the
/// sequences `seq_offset ..` of the run. Every kernel hands the same event, so no
/// accumulator knows which one ran: the block's row table (`rows`), its q.k sums, each
/// row's largest logit and, only when a metric asked for them, its weights. A field is
/// `None` where nobody asked for it. On a GPU the pooled rows of a layer's blocks arrive in
/// events of their own at the layer's end (one copy to the host per layer).
#[derive(Debug, Clone, Copy)]
pub struct BlockEvent<'a> {
    pub layer: usize,
    pub seq_offset: usize,
    pub q_start: usize,
    pub q_len: usize,
    /// The keys each query of the layer sees.
    pub window: KeyWindow,
    /// The pattern's row table.
    pub rows: Option<Rows<'a>>,
    /// The plain softmax's row table (its entropy column), `--entropy-of softmax`.
    pub softmax_rows: Option<&'a BlockPools>,
    /// Each row's largest logit, `[batch, head, n]`.
    pub max_logit: Option<Column<'a>>,
    /// The block's raw q.k sums.
    pub qk: Option<QkSums>,
    /// The block's weights, when asked for.
    pub weights: Option<Weights<'a>>,
    /// Each row's sums and maxima over the key blocks (`block_map`).
    pub key_blocks: Option<KeyBlockRows<'a>>,
    /// Each key's weight summed over the block's queries from `RowWants::key_sums_from` on,
    /// `[batch, head, q_start + q_len]`, from the flash tiles (a materialised block hands
    /// its `weights` instead).
    pub key_sums: Option<&'a Tensor>,
}

/// One event of a forward pass.
#[derive(Debug, Clone, Copy)]
pub enum Event<'a> {
    /// A query block.
    Block(BlockEvent<'a>),
    /// A once-per-layer tensor or a block of logits.
    Tensor(TensorEvent<'a>),
}

/// A once-per-layer tensor (`Alpha`, `Gate`) or a block of logits (`Logits`), as the probe
/// received it.
#[derive(Debug, Clone, Copy)]
pub struct TensorEvent<'a> {
    pub hook: Hook,
    pub ctx: &'a BlockCtx,
    /// The first sequence of the batch.
    pub seq_offset: usize,
    pub xs: &'a Tensor,
}

impl Event<'_> {
    /// Hands the event to `acc`'s method for its kind.
    pub fn deliver(&self, acc: &mut dyn Accumulator) -> Result<()> {
        match self {
            Event::Block(block) => acc.block(block),
            Event::Tensor(tensor) => acc.tensor(tensor),
        }
    }
}

/// What an accumulator is made from.
pub struct Setup<'a> {
    pub opts: &'a MetricOptions,
    pub layers: usize,
    pub heads: usize,
    /// `[layer]` the keys each query sees (sliding windows).
    pub key_windows: &'a [KeyWindow],
    /// The attention logits' soft-cap (Gemma 2), if any.
    pub logit_softcap: Option<f64>,
    /// Every window (sequence) of the run.
    pub windows: &'a [Vec<u32>],
}

/// What finishing knows beyond the accumulator.
pub struct FinishCtx<'a> {
    pub opts: &'a MetricOptions,
    pub traits: VariantTraits,
    /// The stored moving average of alpha `[layer][head]` (Affine-Scaled variants).
    pub alpha_ma: Option<&'a [Vec<f64>]>,
}

/// One metric's (or a few metrics') state over a run. See the module doc of `metrics` for
/// how to add one. Its exact merge is its [`super::merge::Merge`] ([`MergeAny`]).
pub trait Accumulator: MergeAny + SaveState + Send {
    /// What it reads in layer `layer` (0-based).
    fn needs(&self, layer: usize) -> Needs;

    /// Takes a query block's statistics (any field it does not read is ignored); by default
    /// nothing.
    fn block(&mut self, _block: &BlockEvent) -> Result<()> {
        Ok(())
    }

    /// Takes a once-per-layer tensor or a block of logits (any hook it does not read is
    /// ignored); by default nothing.
    fn tensor(&mut self, _tensor: &TensorEvent) -> Result<()> {
        Ok(())
    }

    /// Puts its results (those of the asked metrics) into `out`.
    fn finish(&self, ctx: &FinishCtx, out: &mut ModelMetrics);
}

/// [`super::merge::Merge`] between accumulators behind `dyn`: every part of a run has the
/// same registry's accumulators, so `other` is of the same type.
pub trait MergeAny {
    /// Itself as `Any`.
    fn as_any(&self) -> &dyn Any;
    /// Folds in `other`, an accumulator of the same type over other windows of the run.
    fn merge_any(&mut self, other: &dyn MergeAny);
}

impl<T: super::merge::Merge + Any> MergeAny for T {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn merge_any(&mut self, other: &dyn MergeAny) {
        let other = other
            .as_any()
            .downcast_ref::<T>()
            .expect("merged accumulators come from the same registry entry");
        self.merge(other);
    }
}

/// The block event's fields that the probe fills: see [`BlockEvent`].
impl<'a> BlockEvent<'a> {
    /// An event of block `ctx` with nothing in it yet.
    pub fn empty(ctx: &BlockCtx, seq_offset: usize) -> Self {
        BlockEvent {
            layer: ctx.layer,
            seq_offset,
            q_start: ctx.q_start,
            q_len: ctx.q_len,
            window: ctx.window,
            rows: None,
            softmax_rows: None,
            max_logit: None,
            qk: None,
            weights: None,
            key_blocks: None,
            key_sums: None,
        }
    }
}

/// An accumulator's exact state as bytes (MessagePack: every f64 bit for bit, NaN
/// included), from which [`restore`] makes it again: a shard's partial result.
pub trait SaveState {
    fn state(&self) -> Result<Vec<u8>>;
}

impl<T: serde::Serialize> SaveState for T {
    fn state(&self) -> Result<Vec<u8>> {
        rmp_serde::to_vec(self)
            .map_err(|e| asa_core::error::Error::failed("saving a metric state", e))
    }
}

/// The accumulator of type `T` whose [`SaveState::state`] is `bytes`; the decoder's error
/// when they are not one.
pub fn restore<T: Accumulator + serde::de::DeserializeOwned + 'static>(
    bytes: &[u8],
) -> std::result::Result<Box<dyn Accumulator>, rmp_serde::decode::Error> {
    rmp_serde::from_slice::<T>(bytes).map(|acc| Box::new(acc) as Box<dyn Accumulator>)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn banded(bands: &[(usize, usize)]) -> Needs {
        Needs {
            rows: RowWants {
                bands: bands.to_vec(),
                ..RowWants::default()
            },
            ..Needs::default()
        }
    }

    #[test]
    fn a_union_of_two_banded_needs_holds_both_bands_and_each_finds_its_columns() {
        // issue 37: the union kept only the first non-empty band list, so a second banded
        // metric would have read the first one's columns
        let a = [(0, 1), (1, 10), (10, usize::MAX)];
        let b = [(0, 1), (1, 4), (4, usize::MAX)];
        let both = banded(&a).union(banded(&b));
        let table = &both.rows.bands;
        assert_eq!(
            table,
            &[(0, 1), (1, 10), (10, usize::MAX), (1, 4), (4, usize::MAX)]
        );
        // column 6 is the `first` band (a_i0 of i > 0); the ranges follow from column 7
        assert_eq!(RowWants::band_columns(table, &a), Some(vec![6, 7, 8, 9]));
        assert_eq!(RowWants::band_columns(table, &b), Some(vec![6, 7, 10, 11]));
        assert_eq!(RowWants::band_columns(&a, &b), None);
        // a lone banded need keeps its own layout
        assert_eq!(banded(&a).union(Needs::default()).rows.bands, a);
    }
}
