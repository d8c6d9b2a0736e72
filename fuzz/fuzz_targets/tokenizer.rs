//! tokenizer.json as every command reads one (`read_tokenizer`: capped, the tokenizers
//! crate's panics on a damaged file caught), then used as a run uses it: encoding a text
//! and decoding its ids (not guarded: a panic there is a defect).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let path = asa_fuzz::write("tokenizer.json", data);
    let Ok(tokenizer) = asa_models::tokenizer_file::read_tokenizer(&path) else {
        return;
    };
    if let Ok(encoding) = tokenizer.encode("The cat sat on the mat. 12345 ünïcödé", false) {
        let _ = tokenizer.decode(encoding.get_ids(), false);
    }
});
