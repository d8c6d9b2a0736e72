//! A training log in JSON Lines (or a JSON list: HF's trainer_state.json `log_history`).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    asa_fuzz::read_log_input("log.jsonl", data);
});
