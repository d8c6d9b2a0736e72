//! Query blocks: attention is computed for `block` queries at a time against the keys they
//! can see, so attention memory is O(heads x block x T), never O(heads x T^2).

use candle_core::{DType, Device, Tensor};

use crate::error::Result;

/// The `(q_start, q_len)` blocks covering `0..seq_len`, `block` queries each (last shorter).
pub fn query_blocks(seq_len: usize, block: usize) -> impl Iterator<Item = (usize, usize)> {
    let block = block.max(1);
    (0..seq_len)
        .step_by(block)
        .map(move |start| (start, block.min(seq_len - start)))
}

/// Causal visibility `[q_len, q_start + q_len]`: 1.0 where key j <= query i, else 0.0 (f32).
pub fn visibility(q_start: usize, q_len: usize, device: &Device) -> Result<Tensor> {
    let keys = q_start + q_len;
    let queries = Tensor::arange(q_start as u32, keys as u32, device)?.reshape((q_len, 1))?;
    let key_idx = Tensor::arange(0u32, keys as u32, device)?.reshape((1, keys))?;
    Ok(key_idx.broadcast_le(&queries)?.to_dtype(DType::F32)?)
}

/// Scores with invisible keys set to -inf (`scores` `[b, h, n, k]`, `visible` `[n, k]`).
pub fn mask_invisible(scores: &Tensor, visible: &Tensor) -> Result<Tensor> {
    let shape = scores.shape();
    let mask = visible.ne(0f32)?.broadcast_as(shape)?;
    let neg_inf = Tensor::new(f32::NEG_INFINITY, scores.device())?
        .to_dtype(scores.dtype())?
        .broadcast_as(shape)?;
    Ok(mask.where_cond(scores, &neg_inf)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_cover_every_query_once() {
        let blocks: Vec<_> = query_blocks(10, 4).collect();
        assert_eq!(blocks, vec![(0, 4), (4, 4), (8, 2)]);
        assert_eq!(query_blocks(3, 100).collect::<Vec<_>>(), vec![(0, 3)]);
    }

    #[test]
    fn visibility_is_causal() {
        let v = visibility(2, 2, &Device::Cpu)
            .unwrap()
            .to_vec2::<f32>()
            .unwrap();
        // queries 2 and 3 see keys 0..=2 and 0..=3
        assert_eq!(v, vec![vec![1., 1., 1., 0.], vec![1., 1., 1., 1.]]);
    }
}
