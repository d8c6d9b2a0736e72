//! The operands every attention kernel takes, CPU or GPU: a layer's q, k and v, and a
//! query block with the keys it sees.

use super::KeyWindow;

/// q, k and v of a layer: `[batch, heads, t, d]` and `[batch, kv, t, d]` tensors, or their
/// host values.
#[derive(Debug)]
pub struct Qkv<'a, T: ?Sized> {
    pub q: &'a T,
    pub k: &'a T,
    pub v: &'a T,
}

// references only: copied whatever `T` is (a derive would ask `T: Copy`)

impl<T: ?Sized> Clone for Qkv<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: ?Sized> Copy for Qkv<'_, T> {}

/// A query block: `n` queries from `q_start`, each seeing the keys `window` allows.
#[derive(Debug, Clone, Copy)]
pub struct QueryBlock {
    pub q_start: usize,
    pub n: usize,
    pub window: KeyWindow,
}
