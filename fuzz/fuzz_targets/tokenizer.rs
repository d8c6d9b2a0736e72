//! tokenizer.json as a checkpoint's tokenizer is read (capped read, the tokenizers
//! crate), then used to encode and decode a text.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let path = asa_fuzz::write("tokenizer.json", data);
    let Ok(bytes) = asa_core::input::read_bytes(&path, asa_core::input::TOKENIZER) else {
        return;
    };
    let Ok(tokenizer) = tokenizers::Tokenizer::from_bytes(bytes) else {
        return;
    };
    if let Ok(encoding) = tokenizer.encode("The cat sat on the mat. 12345 ünïcödé", false) {
        let _ = tokenizer.decode(encoding.get_ids(), false);
    }
});
