//! A model held in memory (its config.json text and its tensors, as a trainer holds them) is
//! analysed as the checkpoint saved from it: the same tables, bit for bit, through the same
//! loader and validation (issue 38, the library's part of "a model in memory").

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use asa_analyze::analysis::{ModelSource, Run, RunOptions, Silent};
use asa_analyze::model::safetensors_file::MemoryTensor;
use asa_analyze::model::MemoryModel;
use safetensors::{Dtype, SafeTensors};

use crate::common::model_dir;

/// Every tensor of the checkpoint folder `dir` (one file or shards), in memory.
fn tensors_of(dir: &Path) -> Vec<MemoryTensor> {
    let mut out = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    files.sort();
    for file in files {
        let bytes = std::fs::read(&file).unwrap();
        let st = SafeTensors::deserialize(&bytes).unwrap();
        for (name, view) in st.tensors() {
            out.push(MemoryTensor {
                name,
                dtype: view.dtype(),
                shape: view.shape().to_vec(),
                bytes: Arc::new(view.data().to_vec()),
            });
        }
    }
    out
}

/// f32 tensors rounded to bf16, as their raw 16-bit words.
fn to_bf16(tensors: &[MemoryTensor]) -> Vec<MemoryTensor> {
    tensors
        .iter()
        .map(|t| {
            assert_eq!(t.dtype, Dtype::F32, "{}", t.name);
            let words: Vec<u8> = t
                .bytes
                .as_ref()
                .as_ref()
                .chunks_exact(4)
                .flat_map(|b| {
                    // round to nearest even (the weights are finite)
                    let bits = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                    let rounded = (bits + 0x7fff + ((bits >> 16) & 1)) >> 16;
                    (rounded as u16).to_le_bytes()
                })
                .collect();
            MemoryTensor {
                dtype: Dtype::BF16,
                bytes: Arc::new(words),
                ..t.clone()
            }
        })
        .collect()
}

/// The model `name`'s in-memory twin with `tensors`.
fn memory(name: &str, tensors: Vec<MemoryTensor>) -> MemoryModel {
    MemoryModel {
        origin: format!("<memory>/{name}").into(),
        config_json: std::fs::read_to_string(model_dir(name).join("config.json")).unwrap(),
        tensors,
        host_copy: None,
    }
}

fn options() -> RunOptions {
    RunOptions {
        tokenizer: Some(model_dir("llama_gqa").join("tokenizer.json")),
        seq_len: 32,
        num_seqs: 2,
        ..RunOptions::default()
    }
}

/// The tables of one run of `source`.
fn tables(source: ModelSource) -> Vec<asa_analyze::export::Table> {
    let run = Run {
        models: vec![source],
        options: options(),
        cancel: Default::default(),
    };
    run.execute(&mut Silent).unwrap().tables()
}

fn in_memory(label: &str, model: MemoryModel) -> ModelSource {
    ModelSource {
        memory: Some(Arc::new(model)),
        ..ModelSource::at(label, "")
    }
}

#[test]
fn a_model_in_memory_gives_the_tables_of_its_checkpoint_bit_for_bit() {
    // sharded softmax with grouped kv heads, learnable sinks, Affine-Scaled (alpha_ma)
    for name in ["llama_gqa", "sink", "affine_scaled"] {
        let dir = model_dir(name);
        let from_folder = tables(ModelSource::at("m", &dir));
        let from_memory = tables(in_memory("m", memory(name, tensors_of(&dir))));
        assert_eq!(from_memory, from_folder, "{name}");
    }
}

#[test]
fn bf16_tensors_in_memory_equal_the_checkpoint_saved_from_them() {
    // the trainer's bf16 parameters as raw 16-bit words, and the folder `save_pretrained`
    // would write of them
    let tmp = tempfile::tempdir().unwrap();
    let saved = tmp.path().join("saved");
    std::fs::create_dir(&saved).unwrap();
    let dir = model_dir("llama_gqa");
    std::fs::copy(dir.join("config.json"), saved.join("config.json")).unwrap();
    let bf16 = to_bf16(&tensors_of(&dir));
    let views: BTreeMap<String, safetensors::tensor::TensorView> = bf16
        .iter()
        .map(|t| {
            let view = safetensors::tensor::TensorView::new(
                t.dtype,
                t.shape.clone(),
                t.bytes.as_ref().as_ref(),
            )
            .unwrap();
            (t.name.clone(), view)
        })
        .collect();
    safetensors::serialize_to_file(&views, None, &saved.join("model.safetensors")).unwrap();
    let from_folder = tables(ModelSource::at("m", &saved));
    let from_memory = tables(in_memory("m", memory("llama_gqa", bf16)));
    assert_eq!(from_memory, from_folder);
}

#[test]
fn a_state_dict_that_does_not_fit_its_config_is_refused_by_name() {
    let dir = model_dir("llama_gqa");
    let run = |tensors: Vec<MemoryTensor>| {
        Run {
            models: vec![in_memory("m", memory("llama_gqa", tensors))],
            options: options(),
            cancel: Default::default(),
        }
        .execute(&mut Silent)
        .err()
        .expect("refused")
        .to_string()
    };
    let all = tensors_of(&dir);
    // a missing tensor
    let missing = "model.layers.1.self_attn.k_proj.weight";
    let err = run(all.iter().filter(|t| t.name != missing).cloned().collect());
    assert!(
        err.contains(missing) && err.contains("<memory>/llama_gqa"),
        "{err}"
    );
    // bytes that do not match dtype x shape
    let mut short = all.clone();
    let t = short.iter_mut().find(|t| t.name == missing).unwrap();
    t.bytes = Arc::new(vec![0u8; 12]);
    let err = run(short);
    assert!(
        err.contains(missing) && err.contains("holds 12 bytes"),
        "{err}"
    );
    // a wrong shape
    let mut wrong = all;
    let t = wrong.iter_mut().find(|t| t.name == missing).unwrap();
    let n: usize = t.shape.iter().product();
    t.shape = vec![n];
    let err = run(wrong);
    assert!(err.contains(missing) && err.contains("shape"), "{err}");
}
