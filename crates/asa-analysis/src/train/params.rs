//! The trained architecture: its config.json (SPEC section 3 names the variant) and the
//! initial parameters, drawn from a seeded generator per tensor name so that every variant
//! starts from the same shared weights.

use std::collections::BTreeMap;
use std::path::Path;

use candle_core::{Device, Tensor};
use serde_json::{json, Value};

use asa_core::error::{Error, Result};
use asa_engine::attention::VariantKind;
use asa_models::config::RawConfig;
use asa_models::ModelConfig;

/// Shape of the Llama-style model to train.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Arch {
    pub hidden_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub intermediate_size: usize,
    pub vocab_size: usize,
    /// Longest window trained (config.json `max_position_embeddings`).
    pub max_position_embeddings: usize,
    pub rope_theta: f64,
}

impl Default for Arch {
    /// The demo's model: 4 layers, 4 heads of 16, hidden 64, vocab 512.
    fn default() -> Self {
        Arch {
            hidden_size: 64,
            num_layers: 4,
            num_heads: 4,
            num_kv_heads: 4,
            intermediate_size: 176,
            vocab_size: 512,
            max_position_embeddings: 128,
            rope_theta: 10000.0,
        }
    }
}

impl Arch {
    /// Checks the shape is buildable.
    pub fn validate(&self) -> Result<()> {
        let a = self;
        for (name, size) in [
            ("--hidden-size", a.hidden_size),
            ("--layers", a.num_layers),
            ("--heads", a.num_heads),
            ("--kv-heads", a.num_kv_heads),
            ("--intermediate-size", a.intermediate_size),
            ("--vocab-size", a.vocab_size),
        ] {
            if size == 0 {
                return Err(Error::option(name, "must be at least 1"));
            }
        }
        if !a.hidden_size.is_multiple_of(a.num_heads)
            || !(a.hidden_size / a.num_heads).is_multiple_of(2)
        {
            return Err(Error::option(
                "--hidden-size",
                format!(
                    "{} must split into {} heads of an even dimension",
                    a.hidden_size, a.num_heads
                ),
            ));
        }
        if !a.num_heads.is_multiple_of(a.num_kv_heads) {
            return Err(Error::option(
                "--heads",
                format!(
                    "{} is not a multiple of --kv-heads {}",
                    a.num_heads, a.num_kv_heads
                ),
            ));
        }
        Ok(())
    }

    /// Per-head dimension.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_heads
    }
}

/// config.json of a trained checkpoint (Llama layout that transformers loads; the variant
/// in `attention_variant` with its `affine_scaled` block).
pub fn config_json(arch: &Arch, variant: VariantKind, bos: u32, eos: u32) -> Value {
    let mut cfg = json!({
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": arch.hidden_size,
        "intermediate_size": arch.intermediate_size,
        "num_hidden_layers": arch.num_layers,
        "num_attention_heads": arch.num_heads,
        "num_key_value_heads": arch.num_kv_heads,
        "head_dim": arch.head_dim(),
        "vocab_size": arch.vocab_size,
        "max_position_embeddings": arch.max_position_embeddings,
        "rms_norm_eps": 1e-5,
        "rope_theta": arch.rope_theta,
        "hidden_act": "silu",
        "attention_bias": false,
        "mlp_bias": false,
        "tie_word_embeddings": false,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "torch_dtype": "float32",
        "attention_variant": variant.name(),
    });
    if variant == VariantKind::ScaleInvariant {
        cfg["scale_invariant"] = json!({ "tau": 10.0 });
    }
    if variant == VariantKind::Logn {
        // s_h starts at this scale and is learned per head (self_attn.logn_scale)
        cfg["logn"] = json!({ "scale": 1.0 });
    }
    if variant.is_affine() {
        cfg["affine_scaled"] = json!({
            "activation": "linear_clipping",
            "beta_length": "full",
            "momentum": 0.9,
        });
    }
    cfg
}

/// Resolves [`config_json`] the way the analyzer reads it.
pub fn resolve(config: &Value) -> Result<ModelConfig> {
    let raw: RawConfig = serde_json::from_value(config.clone())
        .map_err(|e| Error::failed("internal config.json", e))?;
    raw.resolve(Path::new("config.json"))
}

/// How a tensor starts.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Init {
    Normal(f64),
    Ones,
    Zeros,
}

/// Standard deviation of the normal initialisation.
const STD: f64 = 0.02;

/// One trainable parameter: its name, shape and initialisation.
struct ParamSpec {
    name: String,
    shape: Vec<usize>,
    init: Init,
}

/// A [`ParamSpec`].
fn spec(name: impl Into<String>, shape: Vec<usize>, init: Init) -> ParamSpec {
    ParamSpec {
        name: name.into(),
        shape,
        init,
    }
}

/// Every trainable parameter of `variant` with its shape and initialisation.
fn parameter_specs(arch: &Arch, variant: VariantKind) -> Vec<ParamSpec> {
    let (h, vocab) = (arch.hidden_size, arch.vocab_size);
    let mut specs = vec![spec(
        "model.embed_tokens.weight",
        vec![vocab, h],
        Init::Normal(STD),
    )];
    for l in 0..arch.num_layers {
        let p = format!("model.layers.{l}");
        specs.extend(layer_specs(arch, variant, &p));
        specs.extend(variant_specs(arch, variant, &p));
    }
    specs.push(spec("model.norm.weight", vec![h], Init::Ones));
    specs.push(spec("lm_head.weight", vec![vocab, h], Init::Normal(STD)));
    specs
}

/// The weights of the layer under `p` that every variant has: norms, attention and MLP
/// projections (q wider for a gated variant).
fn layer_specs(arch: &Arch, variant: VariantKind, p: &str) -> Vec<ParamSpec> {
    let (h, d) = (arch.hidden_size, arch.head_dim());
    let (heads, kv, ff) = (arch.num_heads, arch.num_kv_heads, arch.intermediate_size);
    let q_out = if variant.is_gated() { 2 } else { 1 } * heads * d;
    let (normal, ones) = (Init::Normal(STD), Init::Ones);
    // residual projections scaled down with depth (GPT-2)
    let resid = Init::Normal(STD / (2.0 * arch.num_layers as f64).sqrt());
    let a = format!("{p}.self_attn");
    vec![
        spec(format!("{p}.input_layernorm.weight"), vec![h], ones),
        spec(format!("{a}.q_proj.weight"), vec![q_out, h], normal),
        spec(format!("{a}.k_proj.weight"), vec![kv * d, h], normal),
        spec(format!("{a}.v_proj.weight"), vec![kv * d, h], normal),
        spec(format!("{a}.o_proj.weight"), vec![h, heads * d], resid),
        spec(
            format!("{p}.post_attention_layernorm.weight"),
            vec![h],
            ones,
        ),
        spec(format!("{p}.mlp.gate_proj.weight"), vec![ff, h], normal),
        spec(format!("{p}.mlp.up_proj.weight"), vec![ff, h], normal),
        spec(format!("{p}.mlp.down_proj.weight"), vec![h, ff], resid),
    ]
}

/// The weights only `variant` has in the layer under `p`: sink logits, LogN scales,
/// Affine-Scaled alpha projection.
fn variant_specs(arch: &Arch, variant: VariantKind, p: &str) -> Vec<ParamSpec> {
    let (h, heads) = (arch.hidden_size, arch.num_heads);
    let mut specs = Vec::new();
    if variant == VariantKind::Sink {
        specs.push(spec(
            format!("{p}.self_attn.sinks"),
            vec![heads],
            Init::Zeros,
        ));
    }
    if variant == VariantKind::Logn {
        // learnable s_h, initialised from the config scale (1.0)
        specs.push(spec(
            format!("{p}.self_attn.logn_scale"),
            vec![heads],
            Init::Ones,
        ));
    }
    if variant.is_affine() {
        specs.push(spec(
            format!("{p}.self_attn.alpha_proj.weight"),
            vec![heads, h],
            Init::Normal(STD),
        ));
    }
    specs
}

/// The initial parameters (f32) for `variant`, deterministic for `seed`: each tensor has
/// its own stream keyed by its name, so variants share every common weight.
pub fn init_params(
    arch: &Arch,
    variant: VariantKind,
    seed: u64,
    device: &Device,
) -> Result<BTreeMap<String, Tensor>> {
    let mut map = BTreeMap::new();
    for ParamSpec { name, shape, init } in parameter_specs(arch, variant) {
        let n: usize = shape.iter().product();
        let values: Vec<f32> = match init {
            Init::Ones => vec![1.0; n],
            Init::Zeros => vec![0.0; n],
            Init::Normal(std) => {
                let mut rng = SplitMix64::new(seed ^ fnv1a(&name));
                (0..n).map(|_| (rng.normal() * std) as f32).collect()
            }
        };
        map.insert(name, Tensor::from_vec(values, shape, device)?);
    }
    Ok(map)
}

fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf29ce484222325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    })
}

/// SplitMix64: small, seedable, identical on every platform.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e3779b97f4a7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform integer in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.uniform() * n as f64) as usize % n.max(1)
    }

    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.uniform().max(1e-300);
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}
