//! Query blocks: attention is computed for `block` queries at a time against the keys they
//! can see, so attention memory is O(heads x block x T), never O(heads x T^2).

use candle_core::{DType, Device, Tensor, D};

use super::KeyWindow;
use asa_core::error::Result;

/// The `(q_start, q_len)` blocks covering `0..seq_len`, `block` queries each (last shorter).
pub fn query_blocks(seq_len: usize, block: usize) -> impl Iterator<Item = (usize, usize)> {
    let block = block.max(1);
    (0..seq_len)
        .step_by(block)
        .map(move |start| (start, block.min(seq_len - start)))
}

/// Visibility `[q_len, keys]` (`keys` = [`KeyWindow::block_keys`]: `q_start + q_len` for
/// causal windows): 1.0 where query i sees key j (j <= i, and inside the sliding `window` or
/// the query's chunk where there is one; on both sides in a bidirectional layer), else 0.0
/// (f32).
pub fn visibility(
    q_start: usize,
    q_len: usize,
    window: KeyWindow,
    device: &Device,
) -> Result<Tensor> {
    if let KeyWindow::Around { .. } = window {
        let keys = window.block_keys(q_start, q_len);
        let mut visible = vec![0f32; q_len * keys];
        for (r, row) in visible.chunks_mut(keys.max(1)).enumerate() {
            row[window.keys(q_start + r)].fill(1.0);
        }
        return Ok(Tensor::from_vec(visible, (q_len, keys), device)?);
    }
    let keys = q_start + q_len;
    let queries = Tensor::arange(q_start as u32, keys as u32, device)?.reshape((q_len, 1))?;
    let key_idx = Tensor::arange(0u32, keys as u32, device)?.reshape((1, keys))?;
    let causal = key_idx.broadcast_le(&queries)?.to_dtype(DType::F32)?;
    Ok(match window {
        // j > i - size, i.e. j + size > i
        KeyWindow::Sliding(size) => {
            let shifted =
                Tensor::arange(size as u32, (keys + size) as u32, device)?.reshape((1, keys))?;
            causal.mul(&shifted.broadcast_gt(&queries)?.to_dtype(DType::F32)?)?
        }
        // j >= the first key of query i's chunk
        KeyWindow::Chunked(_) => {
            let first: Vec<u32> = (q_start..keys)
                .map(|i| window.first_key(i) as u32)
                .collect();
            let first = Tensor::from_vec(first, (q_len, 1), device)?;
            causal.mul(&key_idx.broadcast_ge(&first)?.to_dtype(DType::F32)?)?
        }
        KeyWindow::Causal | KeyWindow::Around { .. } => causal,
    })
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

/// Each row's largest logit over its visible keys, `[b, h, n]` f32, of `logits`
/// `[b, h, n, q_start + n]` (queries `q_start ..`; invisible keys are left out whatever they hold).
pub fn row_max_logits(logits: &Tensor, q_start: usize, window: KeyWindow) -> Result<Tensor> {
    let n = logits.dim(2)?;
    let visible = visibility(q_start, n, window, logits.device())?;
    let masked = mask_invisible(&logits.to_dtype(DType::F32)?, &visible)?;
    Ok(masked.max(D::Minus1)?)
}

/// `table` `[rows, width]` with its column `c` replaced by `values` (`rows` values, any shape).
pub fn with_column(table: &Tensor, c: usize, values: &Tensor) -> Result<Tensor> {
    let (rows, width) = table.dims2()?;
    let column = values
        .flatten_all()?
        .to_dtype(table.dtype())?
        .to_device(table.device())?
        .reshape((rows, 1))?;
    let mut parts = vec![table.narrow(1, 0, c)?, column];
    if c + 1 < width {
        parts.push(table.narrow(1, c + 1, width - c - 1)?);
    }
    Ok(Tensor::cat(&parts, 1)?)
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
        let v = visibility(2, 2, KeyWindow::CAUSAL, &Device::Cpu)
            .unwrap()
            .to_vec2::<f32>()
            .unwrap();
        // queries 2 and 3 see keys 0..=2 and 0..=3
        assert_eq!(v, vec![vec![1., 1., 1., 0.], vec![1., 1., 1., 1.]]);
        // a window of 2 keys: queries 2 and 3 see keys 1..=2 and 2..=3
        let v = visibility(2, 2, KeyWindow::sliding(2), &Device::Cpu)
            .unwrap()
            .to_vec2::<f32>()
            .unwrap();
        assert_eq!(v, vec![vec![0., 1., 1., 0.], vec![0., 0., 1., 1.]]);
        // chunks of 2 positions: query 2 starts a chunk, query 3 sees keys 2..=3
        let v = visibility(1, 3, KeyWindow::chunked(2), &Device::Cpu)
            .unwrap()
            .to_vec2::<f32>()
            .unwrap();
        assert_eq!(
            v,
            vec![
                vec![1., 1., 0., 0.],
                vec![0., 0., 1., 0.],
                vec![0., 0., 1., 1.]
            ]
        );
    }

    #[test]
    fn row_maxima_see_only_visible_keys() {
        // queries 1 and 2 of one head: keys 0..=1 and 0..=2; the 9s are invisible
        let logits =
            Tensor::new(&[[[[-1f32, -3.0, 9.0], [0.5, -2.0, -0.25]]]], &Device::Cpu).unwrap();
        let max = row_max_logits(&logits, 1, KeyWindow::CAUSAL)
            .unwrap()
            .flatten_all()
            .unwrap();
        assert_eq!(max.to_vec1::<f32>().unwrap(), [-1.0, 0.5]);
        // column 1 of a 2 x 3 table replaced, then the last column
        let table = Tensor::new(&[[1f32, 2.0, 3.0], [4.0, 5.0, 6.0]], &Device::Cpu).unwrap();
        let t = with_column(&table, 1, &max).unwrap();
        assert_eq!(
            t.to_vec2::<f32>().unwrap(),
            [[1.0, -1.0, 3.0], [4.0, 0.5, 6.0]]
        );
        let t = with_column(&table, 2, &max).unwrap();
        assert_eq!(
            t.to_vec2::<f32>().unwrap(),
            [[1.0, 2.0, -1.0], [4.0, 5.0, 0.5]]
        );
    }
}
