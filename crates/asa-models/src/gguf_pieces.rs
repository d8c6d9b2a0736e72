//! Hugging Face tensors that llama.cpp stores differently from one tensor per tensor:
//! mixture-of-experts weights stacked over experts (`blk.N.ffn_gate_exps.weight`, numpy
//! `[experts, rows, cols]`), and fused HF tensors that the converter split in two (Granite's
//! `gate_up_proj` as `ffn_gate_exps` and `ffn_up_exps`). A family names them in its
//! [`GgufRules::assembled`](super::config::family::GgufRules); [`assemble`] turns the file's
//! block tensors into HF entries made of [`Piece`]s, and [`load_pieces`] reads them: one
//! expert of a stacked tensor is one positioned read of its own bytes, never the whole stack.

use std::collections::BTreeMap;
use std::path::Path;

use candle_core::quantized::gguf_file::Content;
use candle_core::{Device, Tensor};

use super::gguf_config::Meta;
use super::root_cause;
use asa_core::checkpoint_problem::CheckpointProblem;
use asa_core::error::{Error, InputKind, Result};

/// How a family's HF tensors are made from llama.cpp's stacked or split block tensors.
#[derive(Debug, Clone, Copy)]
pub enum Assembled {
    /// Expert `e` of the stacked `role` (`ffn_gate_exps`) is `{prefix}.{e}.{suffix}` (Qwen,
    /// DeepSeek and GLM experts: `mlp.experts`, `gate_proj`).
    PerExpert {
        role: &'static str,
        prefix: &'static str,
        suffix: &'static str,
    },
    /// `hf` (`{kind}` standing for `weight` or `bias`) is the `roles`' stored tensors, those
    /// in `transposed` with their last two dimensions swapped, concatenated along `axis`, and
    /// where `merge_heads` the first two dimensions of the result merged (Granite's
    /// `mlp.experts.gate_up_proj` is `ffn_gate_exps` then `ffn_up_exps` along the rows;
    /// DeepSeek's `kv_b_proj` is, per head, `attn_k_b` transposed over `attn_v_b`).
    Join {
        hf: &'static str,
        roles: &'static [&'static str],
        axis: usize,
        transposed: &'static [&'static str],
        merge_heads: bool,
    },
    /// The family's own assembly of `roles` in one layer, with sizes from the metadata
    /// (Qwen3-Next's Gated DeltaNet `in_proj_qkvz`, regrouped per key head from llama.cpp's
    /// `attn_qkv` and `attn_gate`): the HF entries (`model.layers.N.` and the rest) it makes.
    Custom {
        roles: &'static [&'static str],
        build: fn(&Meta, &StoredLayer) -> Result<Vec<(String, Pieces)>>,
    },
}

/// One layer's stored tensors claimed by an [`Assembled`] rule: role -> (gguf name, numpy
/// shape).
pub struct StoredLayer<'a> {
    pub layer: usize,
    /// `weight` or `bias`.
    pub kind: &'a str,
    pub stored: &'a BTreeMap<String, (String, Vec<usize>)>,
}

impl Assembled {
    /// Whether the block tensor `role` is read through this rule.
    fn claims(&self, role: &str) -> bool {
        match self {
            Assembled::PerExpert { role: r, .. } => *r == role,
            Assembled::Join { roles, .. } | Assembled::Custom { roles, .. } => {
                roles.contains(&role)
            }
        }
    }
}

/// One stored tensor (or one expert of it) that an HF tensor is made of.
#[derive(Debug, Clone)]
pub struct Piece {
    /// llama.cpp name, e.g. `blk.0.ffn_gate_exps.weight`.
    pub gguf_name: String,
    /// The expert, for one slice of a stacked `[experts, rows, cols]` tensor.
    pub expert: Option<usize>,
    /// Its last two dimensions swapped on load.
    pub transposed: bool,
    /// Only these rows of it (a part of a fused stored tensor), `start..end`.
    pub rows: Option<(usize, usize)>,
}

impl Piece {
    /// The whole stored tensor `gguf_name`.
    pub fn whole(gguf_name: &str) -> Self {
        Piece {
            gguf_name: gguf_name.to_string(),
            expert: None,
            transposed: false,
            rows: None,
        }
    }
}

/// An HF tensor made of pieces: its shape, and the pieces concatenated along `axis`; or,
/// in `groups`, each piece's elements (row-major) split into that many equal blocks and the
/// result block `g` of every piece in turn, for each group `g` (a per-head or per-group
/// interleave of rows, or an element-wise one).
#[derive(Debug, Clone)]
pub struct Pieces {
    pub pieces: Vec<Piece>,
    pub axis: usize,
    pub groups: Option<usize>,
    pub shape: Vec<usize>,
}

/// The rule of `rules` reading block tensor `role`, if any.
pub(crate) fn rule_for<'a>(rules: &'a [Assembled], role: &str) -> Option<&'a Assembled> {
    rules.iter().find(|rule| rule.claims(role))
}

/// The HF entries (name under `model.layers.{layer}.`, pieces) that the stored tensors of
/// one layer claimed by `rules` make, from `stored`: role -> (gguf name, numpy shape), with
/// `kind` `weight` or `bias`. An error names a missing partner or mismatched shapes.
pub(crate) fn assemble(
    meta: &Meta,
    layer: usize,
    kind: &str,
    rules: &[Assembled],
    stored: &BTreeMap<String, (String, Vec<usize>)>,
) -> Result<Vec<(String, Pieces)>> {
    let path = meta.path;
    let mut out = Vec::new();
    for rule in rules {
        match *rule {
            Assembled::Custom { roles, build } => {
                if roles.iter().any(|role| stored.contains_key(*role)) {
                    out.extend(build(
                        meta,
                        &StoredLayer {
                            layer,
                            kind,
                            stored,
                        },
                    )?);
                }
            }
            Assembled::PerExpert {
                role,
                prefix,
                suffix,
            } => {
                let Some((gguf_name, shape)) = stored.get(role) else {
                    continue;
                };
                let experts = stacked_count(path, gguf_name, shape)?;
                for e in 0..experts {
                    let piece = Piece {
                        expert: Some(e),
                        ..Piece::whole(gguf_name)
                    };
                    let pieces = Pieces {
                        pieces: vec![piece],
                        axis: 0,
                        groups: None,
                        shape: shape[1..].to_vec(),
                    };
                    out.push((
                        format!("model.layers.{layer}.{prefix}.{e}.{suffix}.{kind}"),
                        pieces,
                    ));
                }
            }
            Assembled::Join {
                hf,
                roles,
                axis,
                transposed,
                merge_heads,
            } => {
                let name = |role: &str| format!("blk.{layer}.{role}.{kind}");
                if let Some(mut pieces) = join(path, roles, axis, transposed, stored, name)? {
                    if merge_heads {
                        let shape = &mut pieces.shape;
                        if shape.len() < 3 {
                            let detail =
                                format!("has shape {shape:?}, expected [heads, rows, columns]");
                            let problem =
                                CheckpointProblem::tensor_data(&pieces.pieces[0].gguf_name, detail);
                            return Err(Error::checkpoint_problem(path, problem));
                        }
                        let heads = shape.remove(0);
                        shape[0] *= heads;
                        pieces.groups = Some(heads);
                    }
                    let hf = hf.replace("{kind}", kind);
                    out.push((format!("model.layers.{layer}.{hf}"), pieces));
                }
            }
        }
    }
    Ok(out)
}

/// The number of experts of a stacked tensor (its first numpy dimension); an error unless
/// it is 3-D.
fn stacked_count(path: &Path, gguf_name: &str, shape: &[usize]) -> Result<usize> {
    if shape.len() != 3 {
        return Err(Error::checkpoint_problem(
            path,
            CheckpointProblem::tensor_data(
                gguf_name,
                format!("has shape {shape:?}, expected [experts, rows, columns]"),
            ),
        ));
    }
    Ok(shape[0])
}

/// The join of `roles`' stored tensors (named by `gguf_name_of` in errors), `None` when none of them is stored; an error when
/// only some are, or their shapes do not line up along `axis`.
fn join(
    path: &Path,
    roles: &[&str],
    axis: usize,
    transposed: &[&str],
    stored: &BTreeMap<String, (String, Vec<usize>)>,
    gguf_name_of: impl Fn(&str) -> String,
) -> Result<Option<Pieces>> {
    let found: Vec<_> = roles.iter().map(|role| stored.get(*role)).collect();
    let Some(present) = found.iter().flatten().next() else {
        return Ok(None);
    };
    let mut pieces = Vec::with_capacity(roles.len());
    let mut shape: Option<Vec<usize>> = None;
    for (role, entry) in roles.iter().zip(&found) {
        let Some((gguf_name, stored_shape)) = entry else {
            let tensor = gguf_name_of(role);
            return Err(Error::checkpoint_problem(
                path,
                CheckpointProblem::MissingTensor { tensor },
            )
            .with_note(format!("beside {}", present.0)));
        };
        let mut s = stored_shape.clone();
        let rank = s.len();
        let transposed = transposed.contains(role);
        if transposed && rank >= 2 {
            s.swap(rank - 2, rank - 1);
        }
        shape = Some(match shape {
            None => s,
            Some(mut total) => {
                let fits = total.len() == s.len()
                    && axis < s.len()
                    && (0..s.len()).all(|d| d == axis || total[d] == s[d]);
                if !fits {
                    return Err(Error::checkpoint_problem(
                        path,
                        CheckpointProblem::tensor_data(
                            gguf_name.as_str(),
                            format!("has shape {stored_shape:?}, which does not line up with {} (shape {total:?} so far)", present.0),
                        ),
                    ));
                }
                total[axis] += s[axis];
                total
            }
        });
        pieces.push(Piece {
            transposed,
            ..Piece::whole(gguf_name)
        });
    }
    Ok(Some(Pieces {
        pieces,
        axis,
        groups: None,
        shape: shape.expect("at least one role"),
    }))
}

/// Reads and dequantizes the pieces to f32 on the CPU and joins them.
pub(crate) fn load_pieces(path: &Path, content: &Content, pieces: &Pieces) -> Result<Tensor> {
    let first = &pieces.pieces[0].gguf_name;
    let mut parts = Vec::with_capacity(pieces.pieces.len());
    for piece in &pieces.pieces {
        let xs = match piece.expert {
            Some(e) => load_expert(path, content, &piece.gguf_name, e)?,
            None => load_whole(path, content, &piece.gguf_name)?,
        };
        let shaped = shape_piece(xs, piece).map_err(|e| {
            Error::invalid(path, &piece.gguf_name, root_cause(e)).about(InputKind::Checkpoint)
        })?;
        parts.push(shaped);
    }
    let joined = match pieces.groups {
        Some(groups) => join_groups(&parts, groups, &pieces.shape),
        None if parts.len() == 1 => Ok(parts.pop().expect("one part")),
        None => Tensor::cat(&parts, pieces.axis),
    };
    joined.map_err(|e| Error::invalid(path, first, root_cause(e)).about(InputKind::Checkpoint))
}

/// A loaded piece's rows and orientation.
fn shape_piece(xs: Tensor, piece: &Piece) -> candle_core::Result<Tensor> {
    let xs = match piece.rows {
        Some((start, end)) => xs.narrow(0, start, end.saturating_sub(start))?,
        None => xs,
    };
    match piece.transposed {
        true => {
            let rank = xs.rank();
            xs.transpose(rank - 2, rank - 1)?.contiguous()
        }
        false => Ok(xs),
    }
}

/// Block `g` of every part in turn, for each of `groups` groups, as a tensor of `shape`
/// (a part's block: its `g`-th of `groups` equal runs of elements in row-major order, whole
/// rows for a per-head interleave, single elements for GPT-OSS's gate and up columns).
fn join_groups(parts: &[Tensor], groups: usize, shape: &[usize]) -> candle_core::Result<Tensor> {
    let grouped = parts
        .iter()
        .map(|p| p.reshape((groups, ())))
        .collect::<candle_core::Result<Vec<_>>>()?;
    Tensor::cat(&grouped, 1)?.reshape(shape)
}

/// A whole stored tensor, dequantized.
fn load_whole(path: &Path, content: &Content, gguf_name: &str) -> Result<Tensor> {
    let mut file = asa_core::input::open(path)?;
    let q = content
        .tensor(&mut file, gguf_name, &Device::Cpu)
        .map_err(|e| {
            Error::invalid(
                path,
                format!("cannot read tensor {gguf_name}"),
                root_cause(e),
            )
            .about(InputKind::Checkpoint)
        })?;
    Ok(q.dequantize(&Device::Cpu)?)
}

/// Expert `e` of the stacked tensor `gguf_name` (`[experts, rows, cols]`), its bytes alone.
fn load_expert(path: &Path, content: &Content, gguf_name: &str, e: usize) -> Result<Tensor> {
    let info = &content.tensor_infos[gguf_name];
    let dims = info.shape.dims();
    let (rows, cols) = (dims[1], dims[2]);
    let block = info.ggml_dtype.block_size();
    if !cols.is_multiple_of(block) {
        // a row that is not whole blocks: the expert's bytes do not start on a block
        let all = load_whole(path, content, gguf_name)?;
        return all.get(e).map_err(|err| {
            Error::invalid(path, gguf_name, root_cause(err)).about(InputKind::Checkpoint)
        });
    }
    let row_bytes = (cols / block * info.ggml_dtype.type_size()) as u64;
    let start = content.tensor_data_offset + info.offset + (e * rows) as u64 * row_bytes;
    let mut raw = vec![0u8; rows * row_bytes as usize];
    let file = asa_core::input::open(path)?;
    std::os::unix::fs::FileExt::read_exact_at(&file, &mut raw, start)
        .map_err(|err| Error::io(path, err))?;
    let q = candle_core::quantized::ggml_file::qtensor_from_ggml(
        info.ggml_dtype,
        &raw,
        vec![rows, cols],
        &Device::Cpu,
    )
    .map_err(|err| Error::invalid(path, gguf_name, root_cause(err)).about(InputKind::Checkpoint))?;
    Ok(q.dequantize(&Device::Cpu)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(values: &[f32], cols: usize) -> Tensor {
        Tensor::new(values, &Device::Cpu)
            .unwrap()
            .reshape((values.len() / cols, cols))
            .unwrap()
    }

    #[test]
    fn groups_take_each_pieces_block_in_turn() {
        // two groups; q rows [q0 q1], z rows [z0 z0' z1 z1']: per group q_g then z_g
        let q = rows(&[0., 1.], 1);
        let z = rows(&[10., 11., 20., 21.], 1);
        let joined = join_groups(&[q, z], 2, &[6, 1]).unwrap();
        let got: Vec<f32> = joined.flatten_all().unwrap().to_vec1().unwrap();
        assert_eq!(got, [0., 10., 11., 1., 20., 21.]);
    }

    #[test]
    fn groups_of_single_elements_interleave_columns() {
        // GPT-OSS: gate [[g00 g01] [g10 g11]] and up alike -> [[g00 u00 g01 u01] [g10 u10 g11 u11]]
        let gate = rows(&[0., 1., 2., 3.], 2);
        let up = rows(&[10., 11., 12., 13.], 2);
        let joined = join_groups(&[gate, up], 4, &[2, 4]).unwrap();
        let got: Vec<Vec<f32>> = joined.to_vec2().unwrap();
        assert_eq!(got, [[0., 10., 1., 11.], [2., 12., 3., 13.]]);
    }

    #[test]
    fn a_piece_keeps_its_rows_and_is_transposed() {
        let xs = rows(&[0., 1., 2., 3., 4., 5.], 2);
        let piece = Piece {
            rows: Some((1, 3)),
            transposed: true,
            ..Piece::whole("t")
        };
        let got: Vec<Vec<f32>> = shape_piece(xs, &piece).unwrap().to_vec2().unwrap();
        assert_eq!(got, [[2., 4.], [3., 5.]]);
    }

    #[test]
    fn a_join_with_a_missing_partner_names_it() {
        let meta_free = BTreeMap::from([(
            "ffn_gate_exps".to_string(),
            ("blk.0.ffn_gate_exps.weight".to_string(), vec![4, 2, 3]),
        )]);
        let err = join(
            Path::new("m.gguf"),
            &["ffn_gate_exps", "ffn_up_exps"],
            1,
            &[],
            &meta_free,
            |role| format!("blk.0.{role}.weight"),
        )
        .unwrap_err();
        assert_eq!(
            err.problem().and_then(|p| p.tensor()),
            Some("blk.0.ffn_up_exps.weight")
        );
        assert_eq!(err.problem().map(|p| p.name()), Some("missing_tensor"));
        assert!(
            err.to_string()
                .ends_with("(beside blk.0.ffn_gate_exps.weight)"),
            "{err}"
        );
    }
}
