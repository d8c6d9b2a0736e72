//! The trainer (issue 6): gradients against PyTorch autograd (tools/train_check.py grads),
//! the alpha_ma update, a loss that drops, checkpoints that reload with identical logits in
//! the analyzer and the softmax checkpoint that transformers loads with the same logits
//! (tools/train_check.py hf).

use std::collections::BTreeMap;
use std::path::PathBuf;

use asa_analysis::train::data::TextSource;
use asa_analysis::train::params::{config_json, init_params, resolve};
use asa_analysis::train::{self, Arch, OptimConfig, TrainOptions, Trainer};
use asa_engine::attention::VariantKind;
use asa_hooks::{BlockCtx, Hook, Probe};
use asa_models::{Checkpoint, Model, WeightStore};
use candle_core::{DType, Device, Tensor};

use crate::common::fixtures;

fn fixture(name: &str) -> PathBuf {
    fixtures().join("train").join(name)
}

/// The shapes of tools/train_check.py.
fn grad_arch() -> Arch {
    Arch {
        hidden_size: 16,
        num_layers: 2,
        num_heads: 2,
        num_kv_heads: 2,
        intermediate_size: 24,
        vocab_size: 40,
        max_position_embeddings: 64,
        rope_theta: 10000.0,
    }
}

fn tiny_arch() -> Arch {
    Arch {
        hidden_size: 32,
        num_layers: 2,
        num_heads: 2,
        num_kv_heads: 2,
        intermediate_size: 64,
        vocab_size: 300,
        max_position_embeddings: 32,
        rope_theta: 10000.0,
    }
}

fn trainer_for(arch: &Arch, variant: VariantKind, params: BTreeMap<String, Tensor>) -> Trainer {
    let config = resolve(&config_json(arch, variant, 0, 1)).unwrap();
    Trainer::new(
        config,
        variant,
        params,
        OptimConfig::default(),
        &Device::Cpu,
    )
    .unwrap()
}

fn max_abs(t: &Tensor) -> f64 {
    t.to_dtype(DType::F64)
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar::<f64>()
        .unwrap()
}

#[test]
fn gradients_match_pytorch_autograd() {
    // every parameter of every variant (sink logits, alpha_proj, the gate half of q_proj and
    // LogN's s_h included) against float64 autograd: max |g - ref| <= 1e-4 * max |ref|
    for &variant in VariantKind::ALL {
        let path = fixture(&format!("grads_{}.safetensors", variant.name()));
        let fx = candle_core::safetensors::load(&path, &Device::Cpu).unwrap();
        let params: BTreeMap<String, Tensor> = fx
            .iter()
            .filter(|(k, _)| k.starts_with("model.") || k.starts_with("lm_head"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let trainer = trainer_for(&grad_arch(), variant, params);
        let ids = fx["ids"].to_dtype(DType::U32).unwrap();
        let fwd = trainer.forward(&ids).unwrap();
        let loss = fwd
            .loss
            .to_dtype(DType::F64)
            .unwrap()
            .to_scalar::<f64>()
            .unwrap();
        let want = fx["loss"].to_vec1::<f64>().unwrap()[0];
        assert!(
            (loss - want).abs() <= 1e-5 * want,
            "{variant:?} loss {loss} vs {want}"
        );
        let grads = fwd.loss.backward().unwrap();
        let mut checked = 0;
        for (key, reference) in &fx {
            let Some(name) = key.strip_prefix("grad.") else {
                continue;
            };
            let var = trainer
                .var(name)
                .unwrap_or_else(|| panic!("{name} is not trained"));
            let got = grads
                .get(var.as_tensor())
                .unwrap_or_else(|| panic!("no gradient for {name}"));
            let diff = max_abs(&(got.to_dtype(DType::F64).unwrap() - reference).unwrap());
            let scale = max_abs(reference);
            assert!(scale > 0.0, "{variant:?} {name}: zero reference gradient");
            assert!(
                diff <= 1e-4 * scale,
                "{variant:?} {name}: max diff {diff:e}, max |ref| {scale:e}"
            );
            checked += 1;
        }
        let extra = match variant {
            VariantKind::Sink
            | VariantKind::AffineScaled
            | VariantKind::AffineScaledGated
            | VariantKind::Logn => 2,
            VariantKind::Softmax
            | VariantKind::OffByOne
            | VariantKind::Gated
            | VariantKind::ScaleInvariant => 0,
        };
        // embed, norm, lm_head + 9 per layer (+ sinks / alpha_proj / logn_scale per layer)
        assert_eq!(checked, 3 + 2 * 9 + extra, "{variant:?}");
    }
}

#[test]
fn alpha_ma_moves_after_a_step_and_is_left_alone_in_analysis() {
    // alpha_proj = 0 gives z = 0 and alpha = phi(0) = 0.1 * 0 + 0.5 = 0.5 for every token, so
    // the batch mean is 0.5: from alpha_ma = 0.3, one step gives 0.9 * 0.3 + 0.1 * 0.5 = 0.32
    let arch = tiny_arch();
    let variant = VariantKind::AffineScaled;
    let mut params = init_params(&arch, variant, 3, &Device::Cpu).unwrap();
    for l in 0..arch.num_layers {
        let w = format!("model.layers.{l}.self_attn.alpha_proj.weight");
        params.insert(
            w,
            Tensor::zeros((arch.num_heads, arch.hidden_size), DType::F32, &Device::Cpu).unwrap(),
        );
        let ma = format!("model.layers.{l}.self_attn.alpha_ma");
        params.insert(
            ma,
            Tensor::full(0.3f32, arch.num_heads, &Device::Cpu).unwrap(),
        );
    }
    let mut trainer = trainer_for(&arch, variant, params);
    let ids = Tensor::arange(0u32, 2 * 17, &Device::Cpu)
        .unwrap()
        .reshape((2, 17))
        .unwrap();
    trainer.step(&ids, 1e-3).unwrap();
    for l in 0..arch.num_layers {
        for &v in trainer.alpha_ma(l).unwrap() {
            assert!((v - 0.32).abs() < 1e-6, "layer {l}: {v}");
        }
    }
    // analysis reads the stored buffer and never changes it
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("step-1");
    let tok = fixture("softmax_ckpt/tokenizer.json");
    let cfg = config_json(&arch, variant, 0, 1);
    train::checkpoint::save(&trainer, &cfg, &tok, &dir).unwrap();
    let ckpt = Checkpoint::open(&dir, &Device::Cpu, DType::F32).unwrap();
    let name = "model.layers.1.self_attn.alpha_ma";
    let before = ckpt
        .store
        .get(name, &[2])
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    let model = ckpt.load_model().unwrap();
    for _ in 0..2 {
        model.forward(&ids, 5, &mut asa_hooks::NoProbe).unwrap();
    }
    let again = Checkpoint::open(&dir, &Device::Cpu, DType::F32).unwrap();
    assert_eq!(
        again
            .store
            .get(name, &[2])
            .unwrap()
            .to_vec1::<f32>()
            .unwrap(),
        before
    );
    assert!(before.iter().all(|v| (v - 0.32).abs() < 1e-6));
}

#[test]
fn a_few_hundred_steps_lower_the_loss() {
    let tmp = tempfile::tempdir().unwrap();
    let opts = TrainOptions {
        variant: VariantKind::AffineScaled,
        arch: tiny_arch(),
        text: TextSource::BuiltIn {
            seed: 5,
            chars: 60_000,
        },
        tokenizer: None,
        steps: 200,
        batch_size: 8,
        seq_len: 32,
        warmup: 20,
        decay_frac: 0.2,
        min_lr_ratio: 0.1,
        optim: OptimConfig::default(),
        seed: 0,
        save_every: 100,
        out: tmp.path().to_path_buf(),
        device: Device::Cpu,
    };
    let summary = train::train(&opts, &Default::default(), &mut |_| {}).unwrap();
    // uniform over 300 tokens is ln 300 = 5.70 nats; the generated prose is easy to learn
    assert!(summary.first_loss > 5.0, "{summary:?}");
    assert!(summary.final_loss < summary.first_loss - 1.5, "{summary:?}");
    let log = std::fs::read_to_string(tmp.path().join("log.csv")).unwrap();
    assert_eq!(log.lines().next(), Some("step,loss,grad_norm,lr,qk_mean"));
    assert_eq!(log.lines().count(), 201);
    for step in [100, 200] {
        assert!(tmp
            .path()
            .join(format!("checkpoints/step-{step}/model.safetensors"))
            .is_file());
    }
    assert!(train::run::finished_run(&opts).is_some());
}

/// Captures logits `[batch, T, vocab]`.
struct Logits(Vec<Tensor>);

impl Probe for Logits {
    fn wants(&self, hook: Hook, _layer: usize) -> bool {
        hook == Hook::Logits
    }
    fn on_tensor(&mut self, _hook: Hook, _ctx: &BlockCtx, xs: &Tensor) -> asa_core::Result<()> {
        self.0.push(xs.detach());
        Ok(())
    }
}

fn logits(model: &Model, ids: &Tensor, block: usize) -> Tensor {
    let mut probe = Logits(Vec::new());
    model.forward(ids, block, &mut probe).unwrap();
    Tensor::cat(&probe.0, 1).unwrap()
}

#[test]
fn saved_checkpoints_reload_with_identical_logits() {
    let arch = tiny_arch();
    let tmp = tempfile::tempdir().unwrap();
    let ids = Tensor::arange(0u32, 2 * 21, &Device::Cpu)
        .unwrap()
        .reshape((2, 21))
        .unwrap();
    for &variant in VariantKind::ALL {
        let params = init_params(&arch, variant, 11, &Device::Cpu).unwrap();
        let mut trainer = trainer_for(&arch, variant, params);
        for _ in 0..3 {
            trainer.step(&ids, 1e-2).unwrap();
        }
        let dir = tmp.path().join(variant.name()).join("step-3");
        let cfg = config_json(&arch, variant, 0, 1);
        train::checkpoint::save(
            &trainer,
            &cfg,
            &fixture("softmax_ckpt/tokenizer.json"),
            &dir,
        )
        .unwrap();
        let ckpt = Checkpoint::open(&dir, &Device::Cpu, DType::F32).unwrap();
        assert_eq!(ckpt.variant.kind, variant);
        let input = ids.narrow(1, 0, 20).unwrap();
        let reloaded = logits(&ckpt.load_model().unwrap(), &input, 7);
        // the same weights in memory, untracked: the analysis path, bit for bit
        let detached: BTreeMap<String, Tensor> = trainer
            .tensors()
            .unwrap()
            .into_iter()
            .map(|(k, v)| (k, v.detach()))
            .collect();
        let store = WeightStore::from_tensors(detached, &Device::Cpu, DType::F32);
        let memory = Model::load(&store, trainer.config(), variant).unwrap();
        let direct = logits(&memory, &input, 7);
        let diff = max_abs(&(&reloaded - &direct).unwrap());
        assert_eq!(diff, 0.0, "{variant:?}: reloaded logits differ by {diff}");
        // the training model (tracked: differentiable RMSNorm, RoPE and softmax) agrees
        let trained = logits(&trainer.model().unwrap(), &input, 20);
        let diff = max_abs(&(&reloaded - &trained).unwrap());
        assert!(
            diff < 1e-4,
            "{variant:?}: training forward differs by {diff}"
        );
    }
}

#[test]
fn long_context_variants_train_and_reload() {
    // issue 10 item 6: scale_invariant (no parameters) and logn (learnable s_h per head)
    let arch = tiny_arch();
    let tmp = tempfile::tempdir().unwrap();
    let ids = Tensor::arange(0u32, 2 * 21, &Device::Cpu)
        .unwrap()
        .reshape((2, 21))
        .unwrap();
    for variant in [VariantKind::ScaleInvariant, VariantKind::Logn] {
        let params = init_params(&arch, variant, 11, &Device::Cpu).unwrap();
        let mut trainer = trainer_for(&arch, variant, params);
        for _ in 0..3 {
            trainer.step(&ids, 1e-2).unwrap();
        }
        let tensors = trainer.tensors().unwrap();
        if variant == VariantKind::Logn {
            // the scale moved away from its initial 1.0: it received gradients
            let s = tensors["model.layers.0.self_attn.logn_scale"]
                .to_vec1::<f32>()
                .unwrap();
            assert!(
                s.iter().any(|v| (v - 1.0).abs() > 1e-4),
                "logn_scale did not train: {s:?}"
            );
        }
        let dir = tmp.path().join(variant.name()).join("step-3");
        let cfg = config_json(&arch, variant, 0, 1);
        train::checkpoint::save(
            &trainer,
            &cfg,
            &fixture("softmax_ckpt/tokenizer.json"),
            &dir,
        )
        .unwrap();
        let ckpt = Checkpoint::open(&dir, &Device::Cpu, DType::F32).unwrap();
        assert_eq!(ckpt.variant.kind, variant);
        let input = ids.narrow(1, 0, 20).unwrap();
        let reloaded = logits(&ckpt.load_model().unwrap(), &input, 7);
        let trained = logits(&trainer.model().unwrap(), &input, 20);
        let diff = max_abs(&(&reloaded - &trained).unwrap());
        assert!(
            diff < 1e-4,
            "{variant:?}: training forward differs by {diff}"
        );
    }
}

#[test]
fn softmax_checkpoint_matches_transformers() {
    // tests/fixtures/train/softmax_ckpt was written by `asa-analyze train --variant softmax`;
    // tools/train_check.py hf recorded transformers' logits for it (atol 1e-4, SPEC 4)
    let fx = candle_core::safetensors::load(fixture("softmax_hf_logits.safetensors"), &Device::Cpu)
        .unwrap();
    let ckpt = Checkpoint::open(&fixture("softmax_ckpt"), &Device::Cpu, DType::F32).unwrap();
    assert_eq!(ckpt.variant.kind, VariantKind::Softmax);
    let ids = fx["ids"].to_dtype(DType::U32).unwrap();
    let got = logits(&ckpt.load_model().unwrap(), &ids, 8);
    let diff = max_abs(&(&got - &fx["logits"]).unwrap());
    assert!(diff <= 1e-4, "logits differ from transformers by {diff}");
}
