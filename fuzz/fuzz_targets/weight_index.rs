//! The weight map of a sharded checkpoint (`model.safetensors.index.json` beside the
//! sharded Llama fixture's config and shards), and the same text as a `--weight-map` file.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let config = asa_fuzz::fixture_once("models/llama_gqa/config.json", "wi/config.json");
    for k in 1..=3 {
        let shard = format!("model-0000{k}-of-00003.safetensors");
        asa_fuzz::fixture_once(&format!("models/llama_gqa/{shard}"), &format!("wi/{shard}"));
    }
    let index = asa_fuzz::write("wi/model.safetensors.index.json", data);
    asa_fuzz::open_checkpoint(config.parent().unwrap());
    let _ = asa_models::WeightMap::load(&index);
});
