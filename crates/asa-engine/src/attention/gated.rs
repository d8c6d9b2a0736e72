//! Gated attention (Qiu et al.), Qwen3-Next layout: `q_proj` emits `heads x 2 x head_dim`,
//! viewed `[heads, 2 * head_dim]`; the first half of each head is the query, the second the
//! gate; the attention output is multiplied by sigmoid(gate) before `o_proj`.

use candle_core::{Tensor, D};

use asa_core::error::Result;

/// Splits `q_proj` output `[b, t, heads * 2 * head_dim]` into queries `[b, t, heads, head_dim]`
/// and gate logits `[b, t, heads * head_dim]`.
pub fn split_query_gate(q_out: &Tensor, heads: usize, head_dim: usize) -> Result<(Tensor, Tensor)> {
    let (b, t, _) = q_out.dims3()?;
    let per_head = q_out.reshape((b, t, heads, 2 * head_dim))?;
    let query = per_head.narrow(D::Minus1, 0, head_dim)?;
    let gate = per_head
        .narrow(D::Minus1, head_dim, head_dim)?
        .reshape((b, t, heads * head_dim))?;
    Ok((query, gate))
}
