//! A `tables --manifest` file: the first byte picks TOML or JSON, the rest is the file.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let (name, body) = match data.split_first() {
        Some((b, rest)) if b % 2 == 1 => ("runs.json", rest),
        Some((_, rest)) => ("runs.toml", rest),
        None => return,
    };
    let path = asa_fuzz::write(name, body);
    let checkpoints = asa_analysis::analysis::checkpoint_facts::ModelCheckpoints;
    let _ = asa_figures::paper::runs::RunSet::from_manifest(&path, &checkpoints);
});
