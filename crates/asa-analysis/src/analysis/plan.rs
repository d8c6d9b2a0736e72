//! The block planner: how many queries per attention block fit a memory budget
//! (`--max-memory`), so attention memory is O(heads x block x T), never O(heads x T^2).

use candle_core::Device;

use asa_core::error::{Error, Result};
use asa_core::host_memory::available_memory;
use asa_core::parse_error::ParseError;
use asa_engine::device::free_device_memory;

/// f32 tensors of `[batch, heads, block, T]` alive at once at the peak of one block:
/// raw q.k, scaled scores, masked scores, exp, weights, softmax, the probe's reduction
/// temporaries (products with masks), and one spare.
pub const LIVE_MAPS: usize = 8;

/// The most queries per block the planner chooses: larger blocks buy no speed, they only
/// cost cache misses and page faults (SmolLM2 at 2k tokens on 2 cores: blocks of 64-256
/// queries 10.8-11.6 s, 1,820 queries 24 s; BENCHMARKS.md).
pub const FAST_BLOCK: usize = 128;

/// Queries per block so that `LIVE_MAPS` maps of `[batch, heads, block, seq_len]` f32 fit
/// in `budget` bytes; at least 1, at most `FAST_BLOCK` and `seq_len`.
pub fn block_size(budget: u64, batch: usize, heads: usize, seq_len: usize) -> usize {
    let per_query = (LIVE_MAPS * batch * heads * seq_len * 4) as u64;
    let block = (budget / per_query.max(1)) as usize;
    block.clamp(1, FAST_BLOCK.min(seq_len.max(1)))
}

/// Sequences per forward pass: `batch`, or fewer when one query row of `LIVE_MAPS` maps
/// for the whole batch would not fit in `budget` bytes (then even blocks of one query would
/// break the budget); at least 1.
pub fn batch_chunk(budget: u64, batch: usize, heads: usize, seq_len: usize) -> usize {
    let per_sequence = (LIVE_MAPS * heads * seq_len * 4) as u64;
    let fits = (budget / per_sequence.max(1)) as usize;
    batch.min(fits).max(1)
}

/// Parses a memory size: `512M`, `4G`, `2GiB`, `1500000000`.
pub fn parse_bytes(s: &str) -> std::result::Result<u64, ParseError> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| ParseError::not_a("a memory size", s, "e.g. 512M, 4G"))?;
    let scale = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" | "kib" => 1024.0,
        "m" | "mb" | "mib" => 1024.0 * 1024.0,
        "g" | "gb" | "gib" => 1024.0 * 1024.0 * 1024.0,
        other => {
            return Err(ParseError::UnknownIn {
                what: "memory unit",
                given: other.to_string(),
                within: s.to_string(),
                choices: "use K, M or G",
            })
        }
    };
    Ok((value * scale) as u64)
}

/// The default attention budget on `device`: a quarter of the memory free there now (a
/// GPU's free device memory; on the CPU, Linux `/proc/meminfo` MemAvailable), at most 1 GiB
/// (larger blocks buy no speed), and 1 GiB when it cannot be read.
pub fn default_budget(device: &Device) -> u64 {
    let free = if device.is_cpu() {
        available_memory()
    } else {
        free_device_memory(device)
    };
    free.map_or(1 << 30, |free| (free / 4).min(1 << 30))
}

/// Checks an explicit `--block-size`.
pub fn check_block(block: usize) -> Result<usize> {
    if block == 0 {
        return Err(Error::option("--block-size", "must be at least 1"));
    }
    Ok(block)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_fit_the_budget() {
        // 1 seq, 9 heads, T = 32768: one query row of 8 maps = 8 * 9 * 32768 * 4 B = 9 MiB
        let per_row = 8 * 9 * 32768 * 4;
        assert_eq!(block_size(64 * per_row as u64, 1, 9, 32768), 64);
        assert_eq!(block_size(1, 1, 9, 32768), 1);
        assert_eq!(block_size(u64::MAX / 2, 1, 9, 100), 100);
        assert_eq!(block_size(u64::MAX / 2, 1, 9, 2048), FAST_BLOCK);
        // 10 sequences whose query rows need 9 MiB each, in a 40 MiB budget: 4 at a time
        assert_eq!(batch_chunk(40 << 20, 10, 9, 32768), 4);
        assert_eq!(batch_chunk(1, 10, 9, 32768), 1);
        assert_eq!(batch_chunk(u64::MAX / 2, 10, 9, 32768), 10);
        assert_eq!(parse_bytes("4G").unwrap(), 4 << 30);
        assert_eq!(parse_bytes("512MiB").unwrap(), 512 << 20);
        assert!(parse_bytes("12 parsecs").is_err());
        let says = |s: &str| parse_bytes(s).unwrap_err().to_string();
        assert_eq!(says("lots"), "`lots` is not a memory size (e.g. 512M, 4G)");
        assert_eq!(
            says("12 parsecs"),
            "unknown memory unit `parsecs` in `12 parsecs` (use K, M or G)"
        );
    }
}
