//! What mixes positions in each decoder layer: softmax attention (every family's, and the
//! only mixer the probe and the metrics see), or a hybrid's other mixers, which carry the
//! hidden state on ([`asa_engine::mixer`]). A family reads its layers' mixers from its config in
//! its own file (`super::config::Family::mixers`); the decoder loads them here.

use candle_core::{DType, Tensor};

use super::layers::{linear, ProjDims};
use super::weights::WeightStore;
use asa_core::error::Result;
use asa_engine::mixer::{CausalConv, GatedDeltaNet, Mamba2, Mamba2Gate, ShortConv};

pub use asa_engine::mixer::{DeltaNetShape, Mamba2Shape};

/// A short gated convolution's settings (LFM2's `conv` layers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ShortConvShape {
    /// The causal convolution's width (`conv_L_cache`).
    pub kernel: usize,
    /// Biases on the projections and the convolution (`conv_bias`).
    pub bias: bool,
}

/// The mixer of one decoder layer.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub enum Mixer {
    /// Softmax attention (`self_attn`).
    Attention,
    /// A short gated convolution (`conv`).
    ShortConv(ShortConvShape),
    /// Gated DeltaNet (`linear_attn`, Qwen3-Next).
    GatedDeltaNet(DeltaNetShape),
    /// Mamba-2 (`mamba`, Granite 4 hybrid).
    Mamba2(Mamba2Shape),
    /// Attention and Mamba-2 side by side on the same input, their outputs summed
    /// (Falcon-H1).
    AttentionAndMamba2(Mamba2Shape),
}

impl Mixer {
    /// The mixer in a word, as run.json's `layer_kinds` and `inspect` name it.
    pub fn name(self) -> &'static str {
        match self {
            Mixer::Attention => "attention",
            Mixer::ShortConv(_) => "short conv",
            Mixer::GatedDeltaNet(_) => "gated deltanet",
            Mixer::Mamba2(_) => "mamba2",
            Mixer::AttentionAndMamba2(_) => "attention + mamba2",
        }
    }

    /// Whether the layer has softmax attention (what the probe sees).
    pub fn has_attention(self) -> bool {
        matches!(self, Mixer::Attention | Mixer::AttentionAndMamba2(_))
    }
}

/// `n` attention layers: the mixers of every family without other mixers.
pub fn every_layer_attention(n: usize) -> Vec<Mixer> {
    vec![Mixer::Attention; n]
}

/// The decoder layers (0-based) whose mixer is attention, in order: the probe numbers
/// them 0, 1, ... (their attention ordinals) and the tables by these layers.
pub fn attention_layers(mixers: &[Mixer]) -> Vec<usize> {
    (0..mixers.len())
        .filter(|&l| mixers[l].has_attention())
        .collect()
}

/// Layer `prefix`'s short convolution (`{prefix}.in_proj`, `{prefix}.conv`,
/// `{prefix}.out_proj`) for `hidden` channels.
pub fn load_short_conv(
    store: &WeightStore,
    prefix: &str,
    hidden: usize,
    shape: ShortConvShape,
) -> Result<ShortConv> {
    let proj = |name: &str, out_dim: usize| {
        let dims = ProjDims {
            in_dim: hidden,
            out_dim,
        };
        linear(store, &format!("{prefix}.{name}"), dims, shape.bias)
    };
    let in_proj = proj("in_proj", 3 * hidden)?;
    let weight = store.get(&format!("{prefix}.conv.weight"), &[hidden, 1, shape.kernel])?;
    let bias: Option<Tensor> = match shape.bias {
        true => Some(store.get(&format!("{prefix}.conv.bias"), &[hidden])?),
        false => None,
    };
    let out_proj = proj("out_proj", hidden)?;
    ShortConv::new(in_proj, weight.squeeze(1)?, bias, out_proj)
}

/// Layer `prefix`'s Gated DeltaNet (`{prefix}.in_proj_qkvz`, `in_proj_ba`, `conv1d`,
/// `A_log`, `dt_bias`, `norm`, `out_proj`) for `hidden` features; `eps` is its gated
/// RMSNorm's.
pub fn load_gated_delta_net(
    store: &WeightStore,
    prefix: &str,
    hidden: usize,
    shape: DeltaNetShape,
    eps: f64,
) -> Result<GatedDeltaNet> {
    let name = |what: &str| format!("{prefix}.{what}");
    let proj = |what: &str, in_dim: usize, out_dim: usize| {
        linear(store, &name(what), ProjDims { in_dim, out_dim }, false)
    };
    let heads = shape.value_heads;
    let per_head = |what: &str| -> Result<Vec<f32>> {
        let t = store.get_as(&name(what), &[heads], DType::F32)?;
        Ok(match store.reads_data() {
            true => t.to_vec1::<f32>()?,
            false => vec![0.0; heads],
        })
    };
    let in_proj_qkvz = proj("in_proj_qkvz", hidden, shape.qkvz_rows())?;
    let in_proj_ba = proj("in_proj_ba", hidden, 2 * heads)?;
    let channels = shape.conv_channels();
    let conv = store.get(&name("conv1d.weight"), &[channels, 1, shape.conv_kernel])?;
    let a_log = per_head("A_log")?;
    let dt_bias = per_head("dt_bias")?;
    let norm_weight = store.get(&name("norm.weight"), &[shape.value_dim])?;
    let out_proj = proj("out_proj", heads * shape.value_dim, hidden)?;
    Ok(GatedDeltaNet {
        shape,
        in_proj_qkvz,
        in_proj_ba,
        conv: CausalConv::new(conv.squeeze(1)?, None)?,
        a: a_log.iter().map(|&a| f64::from(a).exp()).collect(),
        dt_bias: dt_bias.into_iter().map(f64::from).collect(),
        norm_weight,
        eps,
        out_proj,
    })
}

/// Layer `prefix`'s Mamba-2 mixer (`{prefix}.in_proj`, `conv1d`, `A_log`, `dt_bias`, `D`,
/// `norm` where the gate has one, `out_proj`) of `config`'s hidden size and norm epsilon.
pub fn load_mamba2(
    store: &WeightStore,
    prefix: &str,
    config: &super::config::ModelConfig,
    shape: Mamba2Shape,
) -> Result<Mamba2> {
    let hidden = config.hidden_size;
    let name = |what: &str| format!("{prefix}.{what}");
    let proj = |what: &str, in_dim: usize, out_dim: usize, bias: bool| {
        linear(store, &name(what), ProjDims { in_dim, out_dim }, bias)
    };
    let per_head = |what: &str| -> Result<Vec<f64>> {
        let t = store.get_as(&name(what), &[shape.heads], DType::F32)?;
        Ok(match store.reads_data() {
            true => t.to_vec1::<f32>()?.into_iter().map(f64::from).collect(),
            false => vec![0.0; shape.heads],
        })
    };
    let in_proj = proj("in_proj", hidden, shape.in_rows(), shape.in_bias)?;
    let channels = shape.conv_channels();
    let conv = store.get(&name("conv1d.weight"), &[channels, 1, shape.conv_kernel])?;
    let conv_bias = match shape.conv_bias {
        true => Some(store.get(&name("conv1d.bias"), &[channels])?),
        false => None,
    };
    let a = per_head("A_log")?.into_iter().map(|a| -a.exp()).collect();
    let (dt_bias, d) = (per_head("dt_bias")?, per_head("D")?);
    let norm = match shape.gate {
        Mamba2Gate::ThenGroupNorm => Some((
            store.get(&name("norm.weight"), &[shape.inner()])?,
            config.rms_norm_eps,
        )),
        Mamba2Gate::Only => None,
    };
    let out_proj = proj("out_proj", shape.inner(), hidden, shape.out_bias)?;
    let m = config.multipliers;
    let in_scale = match m.ssm_rows {
        Some(rows) => Some(row_factors(&shape, rows, store.device())?),
        None => None,
    };
    Ok(Mamba2 {
        shape,
        in_proj,
        input_scale: m.ssm_in,
        in_scale,
        conv: CausalConv::new(conv.squeeze(1)?, conv_bias)?,
        a,
        dt_bias,
        d,
        norm,
        out_proj,
    })
}

/// Falcon-H1's muP vector over `in_proj`'s rows: z, x, B, C and dt each times their factor.
fn row_factors(
    shape: &Mamba2Shape,
    factors: [f64; 5],
    device: &candle_core::Device,
) -> Result<Tensor> {
    let gn = shape.groups * shape.state;
    let sizes = [shape.inner(), shape.inner(), gn, gn, shape.heads];
    let rows: Vec<f32> = sizes
        .iter()
        .zip(factors)
        .flat_map(|(&n, f)| std::iter::repeat_n(f as f32, n))
        .collect();
    Ok(Tensor::from_vec(rows, shape.in_rows(), device)?)
}
