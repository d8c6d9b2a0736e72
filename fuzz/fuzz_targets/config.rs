//! config.json through its family's resolve (every family's keys, defaults and checks;
//! a multimodal config's text model).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let path = asa_fuzz::write("config.json", data);
    let _ = asa_models::ModelConfig::from_dir(path.parent().unwrap());
});
