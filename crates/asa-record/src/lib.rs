//! run.json as types ([`record`]: what a run writes, and what `figures`, `merge` and the
//! Python package read back), with the shard a partial run covers ([`shard`]), a captured
//! model's modules ([`capture_record`]) and the built-in probes ([`probe_kind`]). Below the
//! runs (asa-analysis) and the figures, and above no model code: a figure reads a record
//! without the families.

pub mod capture_record;
pub mod checkpoint_facts;
pub mod probe_kind;
pub mod record;
pub mod shard;
