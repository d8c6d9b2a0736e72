//! MXFP4 weights (OCP microscaling FP4, as GPT-OSS stores its experts): groups of 32 FP4
//! (E2M1) values packed two to a byte, low nibble first, in `_blocks` `[..., groups, 16]`,
//! each group scaled by 2^(s - 127) from its byte in `_scales` `[..., groups]` (E8M0).
//! transformers' `convert_moe_packed_tensors` reads them the same way.

/// The 16 values of an E2M1 nibble.
const FP4_VALUES: [f32; 16] = [
    0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0,
];

/// Bytes per group of 32 values.
pub(crate) const GROUP_BYTES: usize = 16;

/// The values of `blocks` (16 bytes a group), group g times 2^(scales[g] - 127).
pub fn dequantize(blocks: &[u8], scales: &[u8]) -> Vec<f32> {
    let mut out = Vec::with_capacity(blocks.len() * 2);
    for (group, &scale) in blocks.chunks_exact(GROUP_BYTES).zip(scales) {
        // a power of two, exact in f64 and (as a subnormal at worst) in f32
        let factor = 2f64.powi(i32::from(scale) - 127) as f32;
        for &byte in group {
            out.push(FP4_VALUES[usize::from(byte & 0x0f)] * factor);
            out.push(FP4_VALUES[usize::from(byte >> 4)] * factor);
        }
    }
    out
}

/// The values a stored tensor holds: two per byte of an MXFP4 `_blocks` tensor, none in
/// its `_scales` (they scale the blocks' values), one per element elsewhere.
pub fn values_stored(name: &str, shape: &[usize]) -> usize {
    let elements = shape.iter().product::<usize>();
    match (name.ends_with("_blocks"), name.ends_with("_scales")) {
        (true, _) => 2 * elements,
        (_, true) => 0,
        _ => elements,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nibbles_low_first_scaled_by_a_power_of_two() {
        // byte 0x9_2: low nibble 2 (1.0) then high nibble 9 (-0.5); scale 128 doubles
        let mut blocks = vec![0u8; GROUP_BYTES];
        blocks[0] = 0x92;
        blocks[15] = 0x7f; // -6.0 then 6.0
        let out = dequantize(&blocks, &[128]);
        assert_eq!(out.len(), 32);
        assert_eq!((out[0], out[1]), (2.0, -1.0));
        assert_eq!((out[30], out[31]), (-12.0, 12.0));
        assert!(out[2..30].iter().all(|&v| v == 0.0));
        // scale 127 is 1; scale 0 is 2^-127 (subnormal, not 0)
        assert_eq!(dequantize(&blocks, &[127])[0], 1.0);
        assert_eq!(dequantize(&blocks, &[0])[0], 2f32.powi(-127));
        assert!(dequantize(&blocks, &[0])[0] > 0.0);
    }

    #[test]
    fn blocks_hold_two_values_a_byte_and_scales_none() {
        let blocks = "model.layers.0.mlp.experts.down_proj_blocks";
        assert_eq!(values_stored(blocks, &[4, 32, 1, 16]), 4 * 32 * 32);
        assert_eq!(values_stored("x.down_proj_scales", &[4, 32, 1]), 0);
        assert_eq!(values_stored("x.down_proj", &[4, 32, 32]), 4 * 32 * 32);
    }
}
