//! A checkpoint folder's `model.safetensors` (its header, shapes, byte ranges and the
//! weights the config asks for), beside the Qwen2 fixture's config.json.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let dir = asa_fuzz::fixture_once("models/qwen2/config.json", "st/config.json");
    asa_fuzz::write("st/model.safetensors", data);
    asa_fuzz::open_checkpoint(dir.parent().unwrap());
});
