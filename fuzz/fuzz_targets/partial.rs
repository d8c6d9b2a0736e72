//! A shard's partial result (`analyze --shard K/N`): its run.json and its states table
//! (`partial.parquet`), cut from one input by `asa_fuzz::split`, opened and merged.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let (run_json, states) = asa_fuzz::split(data);
    asa_fuzz::write("partial/run.json", run_json);
    asa_fuzz::write("partial/partial.parquet", states);
    let dir = asa_fuzz::write("partial/partial.complete", b"complete\n");
    let dir = dir.parent().unwrap();
    if asa_analysis::analysis::partial::open_partial(dir).is_ok() {
        let _ = asa_analysis::analysis::partial::merge_partials(&[dir.to_path_buf()], false);
    }
});
