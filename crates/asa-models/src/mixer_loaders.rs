//! The hybrid mixers' weights loaded into [`asa_engine::mixer`]'s layers: LFM2's short
//! convolution, Qwen3-Next's Gated DeltaNet, Granite 4's and Falcon-H1's Mamba-2 (what each
//! layer's [`crate::mixers::Mixer`] says).

use candle_core::{DType, Tensor};

use crate::layers::{linear, ProjDims};
use crate::mixers::{DeltaNetShape, Mamba2Shape, ShortConvShape};
use crate::weights::WeightStore;
use asa_core::error::Result;
use asa_engine::mixer::{CausalConv, GatedDeltaNet, Mamba2, Mamba2Gate, ShortConv};

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
