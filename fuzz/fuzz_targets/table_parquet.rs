//! A results table as `report`, `figures` and `merge` read it (`.parquet`): the first byte
//! picks one of the declared schemas (or none: the undeclared reader), the rest is the file.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    asa_fuzz::read_table_input(data, "parquet");
});
