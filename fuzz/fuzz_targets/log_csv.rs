//! A training log in CSV (TSV, W&B exports, attention series: the reader picks by header).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    asa_fuzz::read_log_input("log.csv", data);
});
