//! Issue 23: layer streaming. A streamed (layer-major) run gives the in-memory run's tables
//! bit for bit; it holds one layer's weights at a time, so its peak memory stays under a cap
//! the in-memory run passes; a broken tensor in the last layer is refused before any work.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};

use crate::common::{
    copy_fixture, expect_error, expect_success, fixtures, run_cli, GGUF_MODELS, MODEL_FIXTURES,
};

/// Every table of `dir` (CSV files), by name.
fn tables(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "csv"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            (name, std::fs::read(&p).unwrap())
        })
        .collect();
    out.sort();
    out
}

fn run_json(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap()
}

#[test]
fn streamed_runs_give_the_in_memory_tables_bit_for_bit_for_every_variant() {
    let tmp = tempfile::tempdir().unwrap();
    for name in MODEL_FIXTURES {
        let model = format!("{name}={}", fixtures().join("models").join(name).display());
        let mut outs = Vec::new();
        // in memory; streamed; streamed with the residual stream spilled to a scratch file
        for (k, stream) in [&[][..], &["--stream-layers"], &["--memory-budget", "1"]]
            .into_iter()
            .enumerate()
        {
            let out = tmp.path().join(format!("{name}-{k}"));
            // mistral's and phi3's sliding windows are 20 tokens: runs past them are refused
            let seq_len = if ["mistral", "phi3"].contains(&name) {
                "20"
            } else {
                "48"
            };
            let mut args = vec![
                "analyze",
                &model,
                "--seq-len",
                seq_len,
                "--num-seqs",
                "3",
                "--batch-size",
                "2",
                "--block-size",
                "16",
                "--quiet",
                "--out",
                out.to_str().unwrap(),
            ];
            args.extend_from_slice(stream);
            expect_success(&run_cli(tmp.path(), &args));
            outs.push(out);
        }
        let (memory, streamed) = (tables(&outs[0]), tables(&outs[1]));
        assert!(memory.len() >= 7, "{name}: {} tables", memory.len());
        assert_eq!(memory, streamed, "{name}: streamed tables differ");
        assert_eq!(memory, tables(&outs[2]), "{name}: spilled tables differ");
        let spilled = &run_json(&outs[2])["models"][0]["schedule"];
        assert_eq!(spilled["residuals"], "scratch file", "{name}");
        assert_eq!(spilled["taken"], "layer-major (streamed)", "{name}");
        // the scratch file is gone, and nothing else is in the output
        let names: Vec<String> = std::fs::read_dir(&outs[2])
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .collect();
        assert!(
            names.iter().all(|n| !n.starts_with('.')),
            "{name}: {names:?}"
        );
        let schedule = &run_json(&outs[1])["models"][0]["schedule"];
        assert_eq!(schedule["taken"], "layer-major (streamed)", "{name}");
        let layers = schedule["layers"].as_array().unwrap();
        // every layer, then the LM head, each with the bytes it read
        assert!(layers.len() >= 3, "{name}: {layers:?}");
        assert!(layers[0]["bytes_read"].as_u64().unwrap() > 0, "{name}");
        assert_eq!(
            run_json(&outs[0])["models"][0]["schedule"]["taken"],
            "in-memory"
        );
    }
}

/// A random Llama checkpoint of `layers` layers (hidden 1024, 4096 intermediate, 32000
/// vocabulary: 61 MiB of bf16 per layer... about 15 M parameters a layer), as one bf16 file.
fn random_checkpoint(dir: &Path, layers: usize) {
    let (h, i, v, heads, kv) = (1024usize, 4096usize, 32000usize, 16usize, 4usize);
    let kv_dim = kv * (h / heads);
    let dev = Device::Cpu;
    let random = |shape: &[usize]| {
        Tensor::randn(0f32, 0.02, shape, &dev)
            .unwrap()
            .to_dtype(DType::BF16)
            .unwrap()
    };
    let ones = |n: usize| Tensor::ones(n, DType::BF16, &dev).unwrap();
    let mut t: HashMap<String, Tensor> = HashMap::new();
    t.insert("model.embed_tokens.weight".into(), random(&[v, h]));
    t.insert("lm_head.weight".into(), random(&[v, h]));
    t.insert("model.norm.weight".into(), ones(h));
    for l in 0..layers {
        let p = format!("model.layers.{l}");
        for (name, shape) in [
            ("self_attn.q_proj", [h, h]),
            ("self_attn.k_proj", [kv_dim, h]),
            ("self_attn.v_proj", [kv_dim, h]),
            ("self_attn.o_proj", [h, h]),
            ("mlp.gate_proj", [i, h]),
            ("mlp.up_proj", [i, h]),
            ("mlp.down_proj", [h, i]),
        ] {
            t.insert(format!("{p}.{name}.weight"), random(&shape));
        }
        t.insert(format!("{p}.input_layernorm.weight"), ones(h));
        t.insert(format!("{p}.post_attention_layernorm.weight"), ones(h));
    }
    std::fs::create_dir_all(dir).unwrap();
    candle_core::safetensors::save(&t, dir.join("model.safetensors")).unwrap();
    let config = serde_json::json!({
        "model_type": "llama", "hidden_size": h, "intermediate_size": i,
        "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv,
        "vocab_size": v, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "max_position_embeddings": 2048, "tie_word_embeddings": false, "hidden_act": "silu"
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
}

/// Peak RSS (run.json's `peak_rss_bytes`, the CLI process's VmHWM) of an analysis of `ckpt`.
fn peak_rss(ckpt: &Path, out: &Path, stream: bool) -> u64 {
    let ckpt = ckpt.to_str().unwrap();
    let mut args = vec![
        "analyze",
        ckpt,
        "--corpus",
        "ids.json",
        "--seq-len",
        "64",
        "--num-seqs",
        "1",
        "--quiet",
        "--out",
        out.to_str().unwrap(),
    ];
    if stream {
        args.push("--stream-layers");
    }
    expect_success(&run_cli(out.parent().unwrap(), &args));
    run_json(out)["models"][0]["peak_rss_bytes"]
        .as_u64()
        .unwrap()
}

#[test]
fn a_streamed_model_stays_under_a_memory_cap_the_in_memory_run_passes() {
    // 8 layers of 15 M parameters + embedding and head of 33 M each: 380 MB of bf16 on
    // disk, 760 MB in f32 in memory; streamed, one layer (60 MB in f32) at a time
    let tmp = tempfile::tempdir().unwrap();
    let ckpt = tmp.path().join("ckpt");
    random_checkpoint(&ckpt, 8);
    let ids: Vec<u32> = (0..64).map(|k| (k * 389 % 32000) as u32).collect();
    std::fs::write(
        tmp.path().join("ids.json"),
        serde_json::to_string(&[ids]).unwrap(),
    )
    .unwrap();
    let cap: u64 = 400 << 20;
    let streamed = peak_rss(&ckpt, &tmp.path().join("streamed"), true);
    let resident = peak_rss(&ckpt, &tmp.path().join("resident"), false);
    eprintln!(
        "peak RSS: streamed {} MiB, in memory {} MiB",
        streamed >> 20,
        resident >> 20
    );
    assert!(
        streamed < cap,
        "streamed peak RSS {} MiB over the {} MiB cap",
        streamed >> 20,
        cap >> 20
    );
    assert!(
        resident > cap,
        "the in-memory run's peak RSS {} MiB does not pass the cap: the test proves nothing",
        resident >> 20
    );
    let (a, b) = (
        tables(&tmp.path().join("streamed")),
        tables(&tmp.path().join("resident")),
    );
    assert_eq!(a, b, "streamed tables differ from the in-memory ones");
}

#[test]
fn a_broken_last_layer_is_refused_before_any_work_and_nothing_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    // the last layer's MLP tensor with a wrong shape, in the last shard
    let dir = tmp.path().join("wrong_shape");
    copy_fixture("llama_gqa", &dir);
    let index: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("model.safetensors.index.json")).unwrap(),
    )
    .unwrap();
    let layers = 2;
    let name = format!("model.layers.{}.mlp.down_proj.weight", layers - 1);
    let shard = dir.join(
        index["weight_map"][&name]
            .as_str()
            .expect("tensor in the index"),
    );
    let mut tensors = candle_core::safetensors::load(&shard, &Device::Cpu).unwrap();
    let wrong = tensors[&name]
        .narrow(1, 0, 3)
        .unwrap()
        .contiguous()
        .unwrap();
    tensors.insert(name.clone(), wrong);
    candle_core::safetensors::save(&tensors, &shard).unwrap();
    // a truncated shard holding the last layer
    let truncated = tmp.path().join("truncated");
    copy_fixture("llama_gqa", &truncated);
    let shard_t = truncated.join(index["weight_map"][&name].as_str().unwrap());
    let bytes = std::fs::read(&shard_t).unwrap();
    std::fs::write(&shard_t, &bytes[..bytes.len() - 16]).unwrap();
    for (ckpt, says) in [(&dir, name.as_str()), (&truncated, "truncated")] {
        let out = tmp.path().join("out");
        let stderr = expect_error(&run_cli(
            tmp.path(),
            &[
                "analyze",
                ckpt.to_str().unwrap(),
                "--stream-layers",
                "--seq-len",
                "16",
                "--num-seqs",
                "1",
                "--out",
                out.to_str().unwrap(),
            ],
        ));
        assert!(stderr.contains(says), "{stderr}");
        assert!(!out.exists(), "output written for a broken checkpoint");
    }
    // the wrong shape is the typed problem, found before a layer streams
    let problem = crate::common::expect_problem(&dir, "shape", &name);
    assert!(
        matches!(&problem, asa_core::CheckpointProblem::Shape { expected, got, .. }
            if got[1] == 3 && expected[1] != 3),
        "{problem:?}"
    );
}

#[test]
fn streamed_gguf_runs_give_the_in_memory_tables_bit_for_bit() {
    let tmp = tempfile::tempdir().unwrap();
    for name in GGUF_MODELS {
        let model = format!(
            "m={}",
            fixtures()
                .join("gguf")
                .join(format!("{name}.gguf"))
                .display()
        );
        let tokenizer = fixtures().join("models").join(name).join("tokenizer.json");
        let outs: Vec<_> = [&[][..], &["--stream-layers"]]
            .into_iter()
            .enumerate()
            .map(|(k, stream)| {
                let out = tmp.path().join(format!("{name}-{k}"));
                let mut args = vec![
                    "analyze",
                    &model,
                    "--seq-len",
                    "20",
                    "--num-seqs",
                    "3",
                    "--batch-size",
                    "2",
                    "--block-size",
                    "8",
                    "--quiet",
                    "--out",
                    out.to_str().unwrap(),
                    "--tokenizer",
                    tokenizer.to_str().unwrap(),
                ];
                args.extend_from_slice(stream);
                expect_success(&run_cli(tmp.path(), &args));
                out
            })
            .collect();
        let memory = tables(&outs[0]);
        assert!(memory.len() >= 7, "{name}: {} tables", memory.len());
        assert_eq!(memory, tables(&outs[1]), "{name}: streamed tables differ");
        let schedule = &run_json(&outs[1])["models"][0]["schedule"];
        assert_eq!(schedule["taken"], "layer-major (streamed)", "{name}");
    }
}
