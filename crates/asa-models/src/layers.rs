//! Loads the building blocks of [`asa_engine::nn`] from a [`WeightStore`] by their checkpoint
//! names, checking every shape.

use candle_core::Tensor;

use super::experts::{ExpertNames, Experts};
use super::layout::{Layout, MlpKind, NormKind};
use super::weights::WeightStore;
use asa_core::error::Result;
use asa_engine::nn::{Linear, Mlp, MoeMlp, Norm, RmsNorm, SharedExpert};

/// A projection's sizes: `in_dim` features in, `out_dim` out (its weight `[out_dim, in_dim]`
/// as a [`Linear`] holds it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProjDims {
    pub in_dim: usize,
    pub out_dim: usize,
}

/// `{prefix}.weight` `[out, in]` and, when `bias`, `{prefix}.bias` `[out]`.
pub fn linear(store: &WeightStore, prefix: &str, dims: ProjDims, bias: bool) -> Result<Linear> {
    projection(store, prefix, dims, bias, false)
}

/// The weight `name` as `[out, in]`: stored so, or stored `[in, out]` (GPT-2's Conv1D,
/// `conv1d`) and transposed.
pub fn weight_matrix(
    store: &WeightStore,
    name: &str,
    dims: ProjDims,
    conv1d: bool,
) -> Result<candle_core::Tensor> {
    let ProjDims { in_dim, out_dim } = dims;
    Ok(match conv1d {
        false => store.get(name, &[out_dim, in_dim])?,
        true => store.get(name, &[in_dim, out_dim])?.t()?.contiguous()?,
    })
}

/// A projection `{prefix}.weight` (see [`weight_matrix`]) and, when `bias`, `{prefix}.bias`.
pub fn projection(
    store: &WeightStore,
    prefix: &str,
    dims: ProjDims,
    bias: bool,
    conv1d: bool,
) -> Result<Linear> {
    let name = format!("{prefix}.weight");
    let (shape, rows) = ([dims.out_dim, dims.in_dim], 0..dims.out_dim);
    // a bf16 weight stored [out, in] is packed as it is read
    let packed = match conv1d {
        false => store.packed_rows(&name, &shape, rows)?,
        true => None,
    };
    let bias = || match bias {
        true => store
            .get(&format!("{prefix}.bias"), &[dims.out_dim])
            .map(Some),
        false => Ok(None),
    };
    if let Some(packed) = packed {
        return Linear::packed(packed, bias()?.as_ref());
    }
    let weight = weight_matrix(store, &name, dims, conv1d)?;
    Ok(Linear::new(weight, bias()?))
}

/// `{prefix}.weight` `[dim]`.
pub fn rms_norm(store: &WeightStore, prefix: &str, dim: usize, eps: f64) -> Result<RmsNorm> {
    Ok(RmsNorm::new(
        store.get(&format!("{prefix}.weight"), &[dim])?,
        eps,
    ))
}

/// A layer's norm `{prefix}.weight` `[dim]` (and `{prefix}.bias` for LayerNorm with biases).
pub fn norm(
    store: &WeightStore,
    prefix: &str,
    dim: usize,
    eps: f64,
    kind: NormKind,
) -> Result<Norm> {
    Ok(match kind {
        NormKind::Rms => Norm::Rms(rms_norm(store, prefix, dim, eps)?),
        // (1 + w): in f32 for half activations, as Gemma's norm computes it
        NormKind::RmsPlusOne => Norm::Rms(rms_norm(store, prefix, dim, eps)?.plus_one()),
        NormKind::Layer => Norm::layer(
            store.get(&format!("{prefix}.weight"), &[dim])?,
            store.get(&format!("{prefix}.bias"), &[dim])?,
            eps,
        ),
        // a zero bias: torch's arithmetic, (x - mean) / sqrt(var + eps) * w rounded once
        NormKind::LayerNoBias => {
            let weight = store.get(&format!("{prefix}.weight"), &[dim])?;
            let bias = weight.zeros_like()?;
            Norm::layer(weight, bias, eps)
        }
    })
}

/// An MLP's sizes: `hidden` in and out, `intermediate` between.
#[derive(Debug, Clone, Copy)]
pub struct MlpDims {
    pub hidden: usize,
    pub intermediate: usize,
}

/// `{prefix}.{gate,up,down}_proj` (SwiGLU; gate and up as one `gate_up_proj`, gate rows
/// first, when the layout's `fused_gate_up`) or `{prefix}.{up,down}_proj` (GELU), as the
/// layout's MLP kind and `conv1d` say.
pub fn mlp(
    store: &WeightStore,
    prefix: &str,
    dims: MlpDims,
    bias: bool,
    layout: &Layout,
) -> Result<Mlp> {
    let MlpDims {
        hidden,
        intermediate,
    } = dims;
    let kind = layout.mlp;
    let proj = |name: &str, in_dim: usize, out_dim: usize| {
        let dims = ProjDims { in_dim, out_dim };
        projection(
            store,
            &format!("{prefix}.{name}"),
            dims,
            bias,
            layout.conv1d,
        )
    };
    if kind == MlpKind::SwiGlu && layout.fused_gate_up {
        let both = proj("gate_up_proj", hidden, 2 * intermediate)?;
        let (gate, up) = both.split_rows(intermediate)?;
        return Ok(Mlp::new(gate, up, proj("down_proj", intermediate, hidden)?));
    }
    // read in the order of the names, so that a shape error names the first
    let gate = match kind {
        MlpKind::SwiGlu | MlpKind::GeGluTanh => Some(proj("gate_proj", hidden, intermediate)?),
        MlpKind::Gelu | MlpKind::GeluTanh => None,
    };
    let up = proj("up_proj", hidden, intermediate)?;
    let down = proj("down_proj", intermediate, hidden)?;
    Ok(match gate {
        Some(gate) if kind == MlpKind::GeGluTanh => Mlp::geglu(gate, up, down),
        Some(gate) => Mlp::new(gate, up, down),
        None => Mlp::gelu(up, down, kind == MlpKind::GeluTanh),
    })
}

/// A layer's experts as [`Experts::names`] stores them, with their router.
pub fn moe_mlp(
    store: &WeightStore,
    layer_prefix: &str,
    hidden: usize,
    experts: &Experts,
) -> Result<MoeMlp> {
    let prefix = format!("{layer_prefix}.{}", experts.names.block());
    let router = linear(
        store,
        &format!("{prefix}.{}", experts.names.router()),
        ProjDims {
            in_dim: hidden,
            out_dim: experts.count,
        },
        experts.names == ExpertNames::GptOss,
    )?;
    let experts_mlp = match experts.names {
        ExpertNames::GptOss => stacked_experts(store, &prefix, hidden, experts)?,
        ExpertNames::Llama4 => stacked_plain_experts(store, &prefix, hidden, experts, true)?,
        ExpertNames::Granite => stacked_plain_experts(store, &prefix, hidden, experts, false)?,
        _ if store.contains(&format!("{prefix}.experts.gate_up_proj")) => {
            stacked_plain_experts(store, &prefix, hidden, experts, false)?
        }
        ExpertNames::Mixtral
        | ExpertNames::Qwen
        | ExpertNames::QwenShared
        | ExpertNames::DeepSeek => separate_experts(store, &prefix, hidden, experts)?,
    };
    let score_bias = match experts.names {
        ExpertNames::DeepSeek => {
            let name = format!("{prefix}.gate.e_score_correction_bias");
            let bias = store.get_as(&name, &[experts.count], candle_core::DType::F32)?;
            Some(match store.reads_data() {
                true => bias.to_vec1::<f32>()?,
                false => vec![0.0; experts.count],
            })
        }
        _ => None,
    };
    let shared = match (experts.names.shared(), experts.shared_intermediate) {
        (Some(name), Some(intermediate)) => {
            let dims = MlpDims {
                hidden,
                intermediate,
            };
            let gate = match experts.names.shared_gate() {
                Some(gate) => {
                    let dims = ProjDims {
                        in_dim: hidden,
                        out_dim: 1,
                    };
                    Some(linear(store, &format!("{prefix}.{gate}"), dims, false)?)
                }
                None => None,
            };
            let layout = Layout {
                fused_gate_up: experts.names.shared_fused(),
                ..Layout::LLAMA
            };
            let mlp = mlp(store, &format!("{prefix}.{name}"), dims, false, &layout)?;
            Some(SharedExpert { mlp, gate })
        }
        _ => None,
    };
    Ok(
        MoeMlp::new(router, experts_mlp, experts.top_k, experts.routing)
            .with_bias_and_shared(score_bias, shared),
    )
}

/// Stacked experts without biases, the gate's outputs before the up projection's:
/// `{prefix}.experts.gate_up_proj` and `down_proj`, stored as x W (`x_w`: `[experts, hidden,
/// 2 * inter]` and `[experts, inter, hidden]`, Llama 4's files) or as a Linear holds them
/// (`[experts, 2 * inter, hidden]` and `[experts, hidden, inter]`: the fused experts
/// transformers 5 keeps in memory for Mixtral, Qwen3-MoE, GLM-4.5 and DeepSeek-V3, which a
/// model object's state_dict hands over).
fn stacked_plain_experts(
    store: &WeightStore,
    prefix: &str,
    hidden: usize,
    experts: &Experts,
    x_w: bool,
) -> Result<Vec<Mlp>> {
    let (count, inter) = (experts.count, experts.intermediate);
    let (gate_up_shape, down_shape) = match x_w {
        true => ([count, hidden, 2 * inter], [count, inter, hidden]),
        false => ([count, 2 * inter, hidden], [count, hidden, inter]),
    };
    let gate_up = store.get(&format!("{prefix}.experts.gate_up_proj"), &gate_up_shape)?;
    let down = store.get(&format!("{prefix}.experts.down_proj"), &down_shape)?;
    (0..count)
        .map(|e| {
            // rows `start..start + len` of the expert's [out, in] weight, as a Linear holds it
            let part = |t: &Tensor, start: usize, len: usize| -> Result<Linear> {
                let w = match x_w {
                    true => t.get(e)?.narrow(1, start, len)?.t()?,
                    false => t.get(e)?.narrow(0, start, len)?,
                };
                Ok(Linear::new(w.contiguous()?, None))
            };
            Ok(Mlp::new(
                part(&gate_up, 0, inter)?,
                part(&gate_up, inter, inter)?,
                part(&down, 0, hidden)?,
            ))
        })
        .collect()
}

/// One tensor per expert and projection: `{prefix}.experts.{e}.{gate,up,down}` (Mixtral's
/// `w1`, `w3`, `w2`; Qwen's `gate_proj`, `up_proj`, `down_proj`).
fn separate_experts(
    store: &WeightStore,
    prefix: &str,
    hidden: usize,
    experts: &Experts,
) -> Result<Vec<Mlp>> {
    let [gate, up, down] = experts.names.projections();
    let intermediate = experts.intermediate;
    (0..experts.count)
        .map(|e| {
            let proj = |name: &str, in_dim: usize, out_dim: usize| {
                let dims = ProjDims { in_dim, out_dim };
                linear(store, &format!("{prefix}.experts.{e}.{name}"), dims, false)
            };
            Ok(Mlp::new(
                proj(gate, hidden, intermediate)?,
                proj(up, hidden, intermediate)?,
                proj(down, intermediate, hidden)?,
            ))
        })
        .collect()
}

/// GPT-OSS's stacked experts: `{prefix}.experts.gate_up_proj` `[experts, hidden, 2 * inter]`
/// (x W, gate and up columns interleaved: gate at even columns) and `down_proj` `[experts,
/// inter, hidden]`, each with a `_bias`; or the MXFP4 `_blocks` / `_scales` of the same
/// matrices stored `[experts, out, in]`.
fn stacked_experts(
    store: &WeightStore,
    prefix: &str,
    hidden: usize,
    experts: &Experts,
) -> Result<Vec<Mlp>> {
    let (count, inter) = (experts.count, experts.intermediate);
    let name = |what: &str| format!("{prefix}.experts.{what}");
    // [experts, out, in] as a Linear stores its weight
    let matrix = |what: &str, dims: ProjDims| -> Result<Tensor> {
        let ProjDims { in_dim, out_dim } = dims;
        match store.contains(&name(&format!("{what}_blocks"))) {
            true => store.get_mxfp4(&name(what), &[count, out_dim, in_dim]),
            false => Ok(store
                .get(&name(what), &[count, in_dim, out_dim])?
                .transpose(1, 2)?),
        }
    };
    let gate_up = matrix(
        "gate_up_proj",
        ProjDims {
            in_dim: hidden,
            out_dim: 2 * inter,
        },
    )?;
    let gate_up_bias = store.get(&name("gate_up_proj_bias"), &[count, 2 * inter])?;
    let down = matrix(
        "down_proj",
        ProjDims {
            in_dim: inter,
            out_dim: hidden,
        },
    )?;
    let down_bias = store.get(&name("down_proj_bias"), &[count, hidden])?;
    if !store.reads_data() {
        // shapes checked; slicing the broadcast zeros would copy them
        let zeros = |dims: &[usize]| -> Result<Tensor> {
            Ok(Tensor::zeros((), store.dtype(), store.device())?.broadcast_as(dims)?)
        };
        let linear = |out: usize, inp: usize| -> Result<Linear> {
            Ok(Linear::new(zeros(&[out, inp])?, Some(zeros(&[out])?)))
        };
        return (0..count)
            .map(|_| {
                Ok(Mlp::new(
                    linear(inter, hidden)?,
                    linear(inter, hidden)?,
                    linear(hidden, inter)?,
                ))
            })
            .collect();
    }
    (0..count)
        .map(|e| {
            // rows 2i (gate) and 2i + 1 (up) of the expert's [2 * inter, hidden] weight
            let w = gate_up.get(e)?.reshape((inter, 2, hidden))?;
            let b = gate_up_bias.get(e)?.reshape((inter, 2))?;
            let half = |k: usize| -> Result<Linear> {
                Ok(Linear::new(
                    w.narrow(1, k, 1)?.squeeze(1)?.contiguous()?,
                    Some(b.narrow(1, k, 1)?.squeeze(1)?.contiguous()?),
                ))
            };
            let down = Linear::new(
                down.get(e)?.contiguous()?,
                Some(down_bias.get(e)?.contiguous()?),
            );
            Ok(match experts.clamped {
                Some(clamped) => Mlp::clamped_swiglu(half(0)?, half(1)?, down, clamped),
                None => Mlp::new(half(0)?, half(1)?, down),
            })
        })
        .collect()
}
