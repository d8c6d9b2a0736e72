//! A GGUF file (header, metadata, tensor table, each family's rules, the tokenizer built
//! from its metadata, every tensor loaded and dequantized).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    asa_fuzz::open_checkpoint(&asa_fuzz::write("model.gguf", data));
});
