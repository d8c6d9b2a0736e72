//! A TensorBoard event file (records, CRCs, protobuf events and summaries).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    asa_fuzz::read_log_input("tb/events.out.tfevents.1.fuzz", data);
});
