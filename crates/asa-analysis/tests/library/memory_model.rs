//! A model held in memory (its config.json text and its tensors, as a trainer holds them) is
//! analysed as the checkpoint saved from it: the same tables, bit for bit, through the same
//! loader and validation (issue 38, the library's part of "a model in memory").

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use asa_analysis::analysis::{ModelSource, Run, RunInputs, RunOptions, RunSpec, Silent};
use asa_models::safetensors_file::MemoryTensor;
use asa_models::MemoryModel;
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
        spec: RunSpec {
            seq_len: 32,
            num_seqs: 2,
            ..RunSpec::default()
        },
        inputs: RunInputs {
            tokenizer: Some(model_dir("llama_gqa").join("tokenizer.json")),
            ..RunInputs::default()
        },
        ..RunOptions::default()
    }
}

/// The tables of one run of `source`.
fn tables(source: ModelSource) -> Vec<asa_tables::Table> {
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

/// The fixture `name` saved as a bf16 checkpoint (one `model.safetensors`) in `saved`, as
/// `save_pretrained` would write a trainer's bf16 parameters; returns those parameters.
fn save_bf16(name: &str, saved: &Path) -> Vec<MemoryTensor> {
    std::fs::create_dir_all(saved).unwrap();
    let dir = model_dir(name);
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
    bf16
}

#[test]
fn bf16_tensors_in_memory_equal_the_checkpoint_saved_from_them() {
    // the trainer's bf16 parameters as raw 16-bit words, and the folder `save_pretrained`
    // would write of them
    let tmp = tempfile::tempdir().unwrap();
    let saved = tmp.path().join("saved");
    let bf16 = save_bf16("llama_gqa", &saved);
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

#[test]
fn bf16_weights_packed_as_they_are_read_equal_the_loaded_weights_packed() {
    // issue 41: a bf16 matrix is packed for the bf16 GEMM panel by panel straight from the
    // file (WeightStore::packed_rows), never held unpacked; it must be the weight `get`
    // loads, packed, for whole matrices and for row ranges (the LM head's chunks)
    use asa_kernels::cpu::bf16_gemm;
    use asa_kernels::cpu::bf16_panels::PackedWeight;
    use asa_models::weights::WeightStore;
    use candle_core::{DType, Device};
    let tmp = tempfile::tempdir().unwrap();
    let saved = tmp.path().join("saved");
    let tensors = save_bf16("llama_gqa", &saved);
    let store = WeightStore::open(&saved, &Device::Cpu, DType::BF16).unwrap();
    let mut matrices = 0;
    for t in tensors.iter().filter(|t| t.shape.len() == 2) {
        let (n, k) = (t.shape[0], t.shape[1]);
        let rows = 1..n - 1;
        let packed = store.packed_rows(&t.name, &t.shape, rows.clone()).unwrap();
        if !bf16_gemm::available() || k % 2 == 1 {
            assert!(packed.is_none(), "{}", t.name);
            continue;
        }
        let loaded = store
            .get(&t.name, &t.shape)
            .unwrap()
            .narrow(0, 1, n - 2)
            .unwrap();
        let loaded = loaded
            .flatten_all()
            .unwrap()
            .to_vec1::<half::bf16>()
            .unwrap();
        let packed = packed.expect("a bf16 matrix of even width is packed as read");
        assert_eq!((packed.n, packed.k), (n - 2, k));
        assert_eq!(
            packed.unpack(),
            PackedWeight::pack(&loaded, n - 2, k).unpack(),
            "{}",
            t.name
        );
        matrices += 1;
    }
    if bf16_gemm::available() {
        assert!(matrices >= 10, "{matrices}");
    }
    // f32 analyses and f32-stored weights are loaded as before
    let f32_store = WeightStore::open(&saved, &Device::Cpu, DType::F32).unwrap();
    let q = "model.layers.0.self_attn.q_proj.weight";
    let shape = f32_store.shape(q).unwrap();
    assert!(f32_store
        .packed_rows(q, &shape, 0..shape[0])
        .unwrap()
        .is_none());
    let f32_stored = WeightStore::open(&model_dir("llama_gqa"), &Device::Cpu, DType::BF16).unwrap();
    assert!(f32_stored
        .packed_rows(q, &shape, 0..shape[0])
        .unwrap()
        .is_none());
    // a missing weight is the same error as `get` gives
    let err = store
        .packed_rows("model.layers.0.nope.weight", &shape, 0..1)
        .err()
        .unwrap();
    assert!(err.to_string().contains("is missing"), "{err}");
}

#[test]
fn a_nan_in_a_bf16_weight_is_refused_by_name_when_packed_as_read() {
    // the packed read gives up on a non-finite value, and `get` then names it
    use asa_models::weights::WeightStore;
    use candle_core::{DType, Device};
    let tmp = tempfile::tempdir().unwrap();
    let saved = tmp.path().join("saved");
    let mut tensors = save_bf16("llama_gqa", &saved);
    let q = "model.layers.1.mlp.up_proj.weight";
    let t = tensors.iter_mut().find(|t| t.name == q).unwrap();
    let mut bytes = t.bytes.as_ref().as_ref().to_vec();
    bytes[10..12].copy_from_slice(&0x7fc0u16.to_le_bytes()); // value 5: NaN
    t.bytes = Arc::new(bytes);
    let views: BTreeMap<String, safetensors::tensor::TensorView> = tensors
        .iter()
        .map(|t| {
            let bytes = t.bytes.as_ref().as_ref();
            let view = safetensors::tensor::TensorView::new(t.dtype, t.shape.clone(), bytes);
            (t.name.clone(), view.unwrap())
        })
        .collect();
    safetensors::serialize_to_file(&views, None, &saved.join("model.safetensors")).unwrap();
    let store = WeightStore::open(&saved, &Device::Cpu, DType::BF16).unwrap();
    let shape = store.shape(q).unwrap();
    assert!(store.packed_rows(q, &shape, 0..shape[0]).unwrap().is_none());
    let err = Run {
        models: vec![ModelSource::at("m", &saved)],
        options: {
            let mut o = options();
            o.spec.dtype = Some(DType::BF16);
            o
        },
        cancel: Default::default(),
    }
    .execute(&mut Silent)
    .err()
    .expect("refused")
    .to_string();
    assert!(
        err.contains(q) && err.contains("NaN at flat index 5"),
        "{err}"
    );
}
