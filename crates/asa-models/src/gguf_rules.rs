//! [`GgufRules`]: how a family reads llama.cpp's GGUF files (its `general.architecture`, its
//! tensor names, what the converter changed in a tensor, its config.json keys), defined here
//! beside the GGUF reader (`crate::gguf`, `crate::gguf_config`), which matches on no
//! architecture. A family fills one in, in its own file under `config/families/`, starting
//! from Llama's (`..llama::gguf_rules("<arch>")`).

use crate::gguf_config::{Dims, Meta, TensorFacts};
pub use crate::gguf_pieces::{Assembled, Piece, Pieces, StoredLayer};
use asa_core::error::Result;

/// llama.cpp tensor names and the loader's: (llama.cpp's, the loader's or `None` where the
/// loader reads no such tensor).
pub type NameTable = &'static [(&'static str, Option<&'static str>)];

/// Adds the family's config.json keys to (or changes Llama's in) the GGUF metadata's
/// config.json mirror, from the metadata, the tensor table and the sizes.
pub(crate) type GgufConfigFn = fn(&Meta, &TensorFacts, &Dims, &mut serde_json::Value) -> Result<()>;

/// How a family reads GGUF files (llama.cpp's `convert_hf_to_gguf.py` conventions).
pub struct GgufRules {
    /// llama.cpp's `general.architecture`, also the prefix of the metadata keys.
    pub arch: &'static str,
    /// The tensors outside the blocks by full name (`output_norm.bias`), the first table
    /// naming one deciding.
    pub globals: &'static [NameTable],
    /// A block's tensors by role, the part between `blk.N.` and `.weight` / `.bias`
    /// (`attn_q`), as the loader names them under `model.layers.N.` (`self_attn.q_proj`);
    /// the first table naming one deciding.
    pub blocks: &'static [NameTable],
    /// Block tensors by their whole name after `blk.N.` (a name without `.weight`, as
    /// Mamba's `ssm_a`, or a bias that is an HF tensor of its own, as `ssm_dt.bias`), as
    /// the loader's whole name under `model.layers.N.`; looked up before `blocks`.
    pub whole: &'static [NameTable],
    /// The HF tensors made of several stored ones or of one expert of a stacked one; their
    /// block roles are read only through these.
    pub assembled: &'static [Assembled],
    /// What llama.cpp's converter changed in a tensor, undone on load.
    pub undo: fn(&StoredTensor) -> Undo,
    /// The family's config.json keys beyond (or instead of) Llama's.
    pub config: GgufConfigFn,
    /// The original context the converter computes `rope_freqs.weight` with when the file
    /// has no `rope.scaling.original_context_length` (`None`: the context length).
    pub rope_freqs_original_context: Option<usize>,
}

impl GgufRules {
    /// The loader's name of the tensor `gguf` outside the blocks, if it reads one.
    pub fn global_name(&self, gguf: &str) -> Option<&'static str> {
        first_name(self.globals, gguf)
    }

    /// The loader's whole name (under `model.layers.N.`) of the block tensor named `tail`
    /// after `blk.N.`, where the family names it whole.
    pub fn whole_name(&self, tail: &str) -> Option<&'static str> {
        first_name(self.whole, tail)
    }

    /// The loader's name (under `model.layers.N.`) of a block tensor's `role`, if it reads
    /// one.
    pub fn block_name(&self, role: &str) -> Option<&'static str> {
        first_name(self.blocks, role)
    }
}

/// The loader's name of `key` in the first of `tables` naming it.
fn first_name(tables: &[NameTable], key: &str) -> Option<&'static str> {
    tables
        .iter()
        .flat_map(|table| table.iter())
        .find(|(gguf, _)| *gguf == key)
        .and_then(|(_, name)| *name)
}

/// One tensor of a GGUF file as [`GgufRules::undo`] sees it.
#[derive(Debug, Clone, Copy)]
pub struct StoredTensor<'a> {
    /// The loader's name, e.g. `model.layers.0.self_attn.q_proj.weight`.
    pub name: &'a str,
    /// The module it belongs to, e.g. `q_proj`.
    pub module: Option<&'a str>,
    /// Its number of dimensions.
    pub rank: usize,
    /// The model's attention heads and key/value heads.
    pub heads: usize,
    pub kv_heads: usize,
}

/// A converter's change to one tensor, undone on load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Undo {
    Nothing,
    /// llama's q/k row permutation, with this many heads.
    Permutation(usize),
    /// GPT-2's Conv1D weight stored `[out, in]`: transpose back to `[in, out]`.
    Transpose,
    /// GPT-NeoX's fused q/k/v rows regrouped `[q; k; v]`: back to per-head `[q, k, v]`
    /// groups, with this many heads.
    QkvGrouping(usize),
    /// Gemma's norm scale stored as 1 + w: subtract 1.
    MinusOne,
    /// A dimension of size 1 squeezed out at this index (LFM2's and Mamba's conv weights
    /// `[channels, 1, kernel]` stored `[channels, kernel]`): put back.
    Unsqueeze(usize),
    /// A vector stored as a matrix (Mamba's `D` as `[heads, 1]`, its norm as `[groups,
    /// inner / groups]`): flattened.
    Flatten,
    /// Mamba's `A_log` stored as `A = -exp(A_log)`, `[heads, 1]`: `ln(-A)`, flattened.
    LogOfNegated,
}

impl Undo {
    /// The HF shape of a tensor stored with `shape`.
    pub fn hf_shape(self, shape: &mut Vec<usize>) {
        match self {
            Undo::Transpose => shape.reverse(),
            Undo::Unsqueeze(dim) if dim <= shape.len() => shape.insert(dim, 1),
            Undo::Flatten | Undo::LogOfNegated => *shape = vec![shape.iter().product()],
            _ => {}
        }
    }
}

/// Nothing changed: the tensor is stored as the loader uses it.
pub(crate) fn nothing_undone(_: &StoredTensor) -> Undo {
    Undo::Nothing
}

/// No config.json keys beyond Llama's.
pub(crate) fn no_config_keys(
    _: &Meta,
    _: &TensorFacts,
    _: &Dims,
    _: &mut serde_json::Value,
) -> Result<()> {
    Ok(())
}
