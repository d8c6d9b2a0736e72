//! The probe: a push-model hook interface with TransformerLens-style hook points.
//!
//! The forward pass asks [`Probe::wants`] before computing anything optional, and pushes
//! tensors to [`Probe::on_tensor`]. Attention-map hooks arrive query block by query block:
//! a block tensor covers queries `ctx.q_start .. ctx.q_start + ctx.q_len` and the keys they
//! can see, `0 .. ctx.q_start + ctx.q_len` (keys after the last query are invisible to every
//! query of the block and are not materialised).

pub mod blocks;
mod capture;
mod kernel;
pub mod row_pass;

pub use asa_kernels::KeyWindow;
pub use capture::CaptureProbe;
pub use kernel::Kernel;

use candle_core::Tensor;

use asa_core::error::Result;
use asa_kernels::row_table::RowWants;

/// A hook point inside one layer (or after the last, for logits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Hook {
    /// `hook_q`: queries after the projection (and QK-norm), before RoPE, as TransformerLens
    /// has it, `[batch, pos, head, d_head]`, once per layer.
    Q,
    /// `hook_k`: keys after the projection (and QK-norm), before RoPE,
    /// `[batch, pos, kv_head, d_head]`, once per layer.
    K,
    /// `hook_rot_q`: queries after RoPE, `[batch, pos, head, d_head]`, once per layer.
    RotQ,
    /// `hook_rot_k`: keys after RoPE, `[batch, pos, kv_head, d_head]`, once per layer.
    RotK,
    /// `hook_qk`: raw q . k before 1/sqrt(d) and any variant transform, unmasked,
    /// `[batch, head, q_block, keys]` (key j is visible to query i = `ctx.q_start + r` when j <= i; `hooks::blocks::visibility` builds the mask).
    Qk,
    /// `hook_attn_scores`: the logits the variant normalises (scaled, masked with -inf),
    /// `[batch, head, q_block, keys]`, f32.
    AttnScores,
    /// `hook_pattern`: effective weights a_ij (what multiplies v_j), `[batch, head, q_block, keys]`, f32.
    Pattern,
    /// `hook_softmax`: plain softmax p_ij over the logits of `hook_attn_scores` (scaled, and
    /// transformed for scale_invariant / logn), before any sink or affine step,
    /// `[batch, head, q_block, keys]`, f32.
    Softmax,
    /// `hook_sink_mass`: mass that goes to no token (sink, off_by_one), `[batch, head, q_block]`, f32.
    SinkMass,
    /// `hook_max_logit`: each row's largest logit over its visible keys (the logit the
    /// variant normalises, as in `hook_attn_scores`), `[batch, head, q_block]`, f32.
    MaxLogit,
    /// `hook_alpha`: Affine-Scaled alpha, `[batch, head, pos]`, f32, once per layer.
    Alpha,
    /// `hook_gate`: sigmoid gate values, `[batch, pos, head * d_head]`, f32, once per layer.
    Gate,
    /// `hook_logits`: next-token logits, `[batch, pos_block, vocab]`, in the model's dtype
    /// (f32 unless the run is bf16/f16), after the last layer.
    Logits,
}

impl Hook {
    /// Every hook, in forward order.
    pub const ALL: [Hook; 13] = [
        Hook::Q,
        Hook::K,
        Hook::RotQ,
        Hook::RotK,
        Hook::Qk,
        Hook::AttnScores,
        Hook::Pattern,
        Hook::Softmax,
        Hook::SinkMass,
        Hook::MaxLogit,
        Hook::Alpha,
        Hook::Gate,
        Hook::Logits,
    ];

    /// The TransformerLens-style name of this hook in layer `layer` (0-based):
    /// `blocks.{layer}.attn.hook_pattern`; logits are `hook_logits`.
    pub fn name(self, layer: usize) -> String {
        let short = match self {
            Hook::Q => "hook_q",
            Hook::K => "hook_k",
            Hook::RotQ => "hook_rot_q",
            Hook::RotK => "hook_rot_k",
            Hook::Qk => "hook_qk",
            Hook::AttnScores => "hook_attn_scores",
            Hook::Pattern => "hook_pattern",
            Hook::Softmax => "hook_softmax",
            Hook::SinkMass => "hook_sink_mass",
            Hook::MaxLogit => "hook_max_logit",
            Hook::Alpha => "hook_alpha",
            Hook::Gate => "hook_gate",
            Hook::Logits => return "hook_logits".to_string(),
        };
        format!("blocks.{layer}.attn.{short}")
    }

    /// The per-block attention hooks: what a kernel materialises or reduces to row tables.
    pub const ATTENTION: [Hook; 6] = [
        Hook::Qk,
        Hook::AttnScores,
        Hook::Pattern,
        Hook::Softmax,
        Hook::SinkMass,
        Hook::MaxLogit,
    ];

    /// Whether the hook is one of a block's attention tensors ([`Hook::ATTENTION`]).
    pub fn is_attention(self) -> bool {
        Hook::ATTENTION.contains(&self)
    }

    /// Whether the hook's tensors arrive per query block: the attention hooks and logits.
    pub fn is_blocked(self) -> bool {
        self.is_attention() || self == Hook::Logits
    }
}

/// Where a pushed tensor sits.
#[derive(Debug, Clone, Copy)]
pub struct BlockCtx {
    /// 0-based layer (the number of layers for logits).
    pub layer: usize,
    /// First query (or position) of the block.
    pub q_start: usize,
    /// Queries (positions) in the block.
    pub q_len: usize,
    /// Sequence length T of the forward pass.
    pub seq_len: usize,
    /// The keys each query of the layer sees (a sliding window, or all earlier keys).
    pub window: KeyWindow,
}

/// Receives tensors from the forward pass. Every method defaults to a no-op, so a probe
/// implements only what it needs; a probe that wants nothing adds no work.
pub trait Probe {
    /// Whether `hook` in `layer` (0-based) should be computed and pushed.
    fn wants(&self, _hook: Hook, _layer: usize) -> bool {
        false
    }

    /// Receives a tensor this probe wants.
    fn on_tensor(&mut self, _hook: Hook, _ctx: &BlockCtx, _xs: &Tensor) -> Result<()> {
        Ok(())
    }

    /// The next pushes belong to batch `batch` (0-based) of the batches a layer-major
    /// forward pass runs (`Model::forward_layer_major`); a batch-major pass never calls it.
    fn on_batch(&mut self, _batch: usize) {}

    /// Called when a query block's attention is done.
    fn on_block_end(&mut self, _ctx: &BlockCtx) -> Result<()> {
        Ok(())
    }

    /// Which kernel computes layer `layer`'s attention (once per layer and forward pass,
    /// before its first block).
    fn on_kernel(&mut self, _layer: usize, _kernel: Kernel) {}

    /// Called when a layer's attention is done (0-based layer).
    fn on_layer_end(&mut self, _layer: usize) -> Result<()> {
        Ok(())
    }

    /// Whether this probe can take layer `layer`'s attention as row tables
    /// ([`asa_kernels::row_table`]) instead of its block tensors: `Some(wants)` when the rows cover
    /// every `Qk`, `Pattern`, `SinkMass` and `MaxLogit` tensor it wants there, so a fused kernel can
    /// skip them (`AttnScores` and `Softmax` are still pushed as tensors).
    fn row_request(&self, _layer: usize) -> Option<RowWants> {
        None
    }

    /// Receives a query block's row table `[rows, wants.width()]` (f32, on the device of
    /// the forward pass) in place of its `Qk`, `Pattern`, `SinkMass` and `MaxLogit` tensors
    /// (the sink column holds 0 for a variant without a sink).
    fn on_row_table(&mut self, _ctx: &BlockCtx, _table: &Tensor) -> Result<()> {
        Ok(())
    }

    /// Receives, just before its row table, a query block's key sums
    /// `[batch, head, q_start + n]` (f32; `RowWants::key_sums_from`).
    fn on_key_sums(&mut self, _ctx: &BlockCtx, _sums: &Tensor) -> Result<()> {
        Ok(())
    }

    /// Whether an observer beside the planned probe wants `hook` (a per-block attention
    /// hook) of `layer` materialised for it, whatever the layer's kernel ([`ProbeSet`]).
    fn observes(&self, _hook: Hook, _layer: usize) -> bool {
        false
    }

    /// Receives an observed tensor (see [`Probe::observes`]).
    fn on_observed(&mut self, _hook: Hook, _ctx: &BlockCtx, _xs: &Tensor) -> Result<()> {
        Ok(())
    }
}

/// A probe that wants nothing: a plain forward pass.
pub struct NoProbe;

impl Probe for NoProbe {}

/// A primary probe (the run's metrics) with observers attached beside it (a
/// [`CaptureProbe`], a user's probe). The plan is made for the primary alone: attaching any
/// number of observers never changes a layer's kernel. An observer's once-per-layer hooks
/// and logits are pushed as the forward pass makes them; its per-block attention tensors
/// ([`Hook::is_attention`]) are materialised for it in a pass of their own after the
/// layer's kernel ran ([`Probe::observes`], [`Probe::on_observed`]), block by block.
pub struct ProbeSet<'a, 'b> {
    primary: &'a mut dyn Probe,
    observers: &'a mut [&'b mut dyn Probe],
}

impl<'a, 'b> ProbeSet<'a, 'b> {
    /// `primary` with `observers` beside it.
    pub fn new(primary: &'a mut dyn Probe, observers: &'a mut [&'b mut dyn Probe]) -> Self {
        ProbeSet { primary, observers }
    }

    /// Whether an observer wants `hook` of `layer`.
    fn observed(&self, hook: Hook, layer: usize) -> bool {
        self.observers.iter().any(|o| o.wants(hook, layer))
    }
}

impl Probe for ProbeSet<'_, '_> {
    /// The primary's wants, and the observers' hooks that are not per-block attention.
    fn wants(&self, hook: Hook, layer: usize) -> bool {
        self.primary.wants(hook, layer) || (!hook.is_attention() && self.observed(hook, layer))
    }

    fn on_tensor(&mut self, hook: Hook, ctx: &BlockCtx, xs: &Tensor) -> Result<()> {
        if self.primary.wants(hook, ctx.layer) {
            self.primary.on_tensor(hook, ctx, xs)?;
        }
        if !hook.is_attention() {
            for o in self.observers.iter_mut() {
                if o.wants(hook, ctx.layer) {
                    o.on_tensor(hook, ctx, xs)?;
                }
            }
        }
        Ok(())
    }

    fn observes(&self, hook: Hook, layer: usize) -> bool {
        hook.is_attention() && self.observed(hook, layer)
    }

    fn on_observed(&mut self, hook: Hook, ctx: &BlockCtx, xs: &Tensor) -> Result<()> {
        for o in self.observers.iter_mut() {
            if o.wants(hook, ctx.layer) {
                o.on_tensor(hook, ctx, xs)?;
            }
        }
        Ok(())
    }

    fn on_batch(&mut self, batch: usize) {
        self.primary.on_batch(batch);
        for o in self.observers.iter_mut() {
            o.on_batch(batch);
        }
    }

    fn on_block_end(&mut self, ctx: &BlockCtx) -> Result<()> {
        self.primary.on_block_end(ctx)?;
        for o in self.observers.iter_mut() {
            o.on_block_end(ctx)?;
        }
        Ok(())
    }

    fn on_kernel(&mut self, layer: usize, kernel: Kernel) {
        self.primary.on_kernel(layer, kernel);
        for o in self.observers.iter_mut() {
            o.on_kernel(layer, kernel);
        }
    }

    fn on_layer_end(&mut self, layer: usize) -> Result<()> {
        self.primary.on_layer_end(layer)?;
        for o in self.observers.iter_mut() {
            o.on_layer_end(layer)?;
        }
        Ok(())
    }

    /// The primary's: observers never take row tables.
    fn row_request(&self, layer: usize) -> Option<RowWants> {
        self.primary.row_request(layer)
    }

    fn on_row_table(&mut self, ctx: &BlockCtx, table: &Tensor) -> Result<()> {
        self.primary.on_row_table(ctx, table)
    }

    fn on_key_sums(&mut self, ctx: &BlockCtx, sums: &Tensor) -> Result<()> {
        self.primary.on_key_sums(ctx, sums)
    }
}

/// Whether `probe` wants any of layer `layer`'s per-block attention tensors.
pub fn wants_attention(probe: &dyn Probe, layer: usize) -> bool {
    Hook::ATTENTION
        .into_iter()
        .any(|hook| probe.wants(hook, layer))
}
