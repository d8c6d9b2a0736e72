//! The one place that decides how a layer's query blocks are computed: from the variant,
//! the device and dtype, whether anything trains, and what the probe asked for, [`plan`]
//! picks one [`Kernel`], and `Attention::forward` matches it once. A kernel is only ever
//! asked to compute what it can: none of them falls back to another. The plan is made for
//! the run's metrics alone: probes attached beside them (`probe::ProbeSet` observers, a
//! `CaptureProbe`) never change it; the attention tensors they want are materialised for
//! them with candle ops in a pass of their own after the layer's kernel ran (the phase
//! "attention: blocks materialised for observers" of `--profile`).
//!
//! `block_map`'s key-block columns ([`RowWants::key_blocks`]) are filled by the CPU's
//! kernels only (the flash tiles, the fused softmax and the row pass over a materialised
//! block): the CUDA kernels do not compute them, so on a GPU such a layer runs the
//! materialised blocks (candle ops) and the CPU row pass reads a host copy of each block's
//! weights (run.json's `kernels` shows it, and a note says why).

pub use asa_hooks::Kernel;
use asa_kernels::row_table::{RowWants, MAX_BANDS};

pub use asa_kernels::GPU_FLASH_HEAD_DIM;

/// The device a layer runs on, as far as the kernels care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceKind {
    Cpu,
    /// A GPU with the `cuda` feature's kernels.
    Cuda,
    /// Any other device (Metal, a GPU without the kernels): candle ops only.
    Other,
}

/// Everything [`plan`] decides from, known once per layer before its first block.
#[derive(Debug, Clone)]
pub struct Facts {
    pub device: DeviceKind,
    /// q, k and v are f32 (the analysis dtype).
    pub f32: bool,
    /// q, k and v are bf16 or f16: the CPU's tiles take f32 copies of them (with bf16
    /// products for bf16 where the CPU has AVX-512 BF16).
    pub half: bool,
    /// q or k takes part in autograd (the q.k product tracks gradients).
    pub qk_tracks: bool,
    /// v, the sink logits, alpha or the LogN scale take part in autograd.
    pub others_track: bool,
    /// The layer has sink logits (sink, off_by_one), and a host copy of them (CPU, not
    /// trained).
    pub sinks: bool,
    pub host_sinks: bool,
    /// The sink logits are f32 (what the CUDA kernel reads).
    pub sinks_f32: bool,
    /// The logits are q.k scaled, nothing else (no LogN, no scale-invariant rule).
    pub plain_logits: bool,
    /// A sliding window hides some earlier keys from some queries (only the flash tiles
    /// and candle ops mask by window).
    pub windowed: bool,
    /// The window is a chunk (Llama 4): the GPU's tiles mask sliding windows only.
    pub chunked: bool,
    /// The logits are soft-capped (the CPU's fused softmax reports the capped maximum, not
    /// the raw one max_logit wants).
    pub softcapped: bool,
    /// The per-head dimension of q and k.
    pub head_dim: usize,
    /// Affine-Scaled weights (alpha), and whether the stored alpha_ma is there.
    pub affine: bool,
    pub alpha_ma: bool,
    /// The probe's row table for the layer, if it takes its attention as rows.
    pub rows: Option<RowWants>,
    /// The probe wants any per-block attention tensor of the layer.
    pub wants_attention: bool,
    /// The probe wants `hook_attn_scores` / `hook_softmax` tensors.
    pub wants_scores: bool,
    pub wants_softmax: bool,
}

/// The kernel for a layer with these `facts`.
pub fn plan(f: &Facts) -> Kernel {
    let training = f.qk_tracks || f.others_track;
    let reads_maps = f.wants_scores || f.wants_softmax;
    // the tiles hand the probe row tables, or nothing
    let tiles_serve_probe = !reads_maps && (f.rows.is_some() || !f.wants_attention);
    let flash_serves = f.device == DeviceKind::Cpu
        && (f.f32 || f.half)
        && !training
        && (!f.sinks || f.host_sinks)
        && (!f.affine || f.alpha_ma)
        && tiles_serve_probe;
    // the GPU's tiles (cuda/flash.cu): any of its dtypes, sinks read on the device; no
    // key-block columns
    let gpu_flash_serves = f.device == DeviceKind::Cuda
        && !training
        && !f.chunked
        && (!f.affine || (f.alpha_ma && !f.sinks))
        && f.head_dim <= GPU_FLASH_HEAD_DIM
        && f.rows.as_ref().is_none_or(|r| r.bands.len() <= MAX_BANDS)
        && f.rows
            .as_ref()
            .is_none_or(|r| r.key_blocks.is_none() && r.key_sums_from.is_none())
        && tiles_serve_probe;
    if flash_serves || gpu_flash_serves {
        return Kernel::FlashTiles;
    }
    if let Some(rows) = &f.rows {
        // the fused rows hand no key sums
        let plain =
            f.plain_logits && !f.affine && !reads_maps && !training && rows.key_sums_from.is_none();
        let device = match f.device {
            DeviceKind::Cpu => f.f32 && (!f.sinks || f.host_sinks),
            DeviceKind::Cuda => {
                rows.bands.len() <= MAX_BANDS
                    && (!f.sinks || f.sinks_f32)
                    && rows.key_blocks.is_none()
            }
            DeviceKind::Other => false,
        };
        if plain && device && !f.windowed {
            return Kernel::FusedRows;
        }
    }
    // the CPU's fused softmax reads host sinks and pushes no scores or plain softmax
    let sinks_unfused = f.sinks && (!f.host_sinks || f.wants_softmax);
    let fused_serves =
        !f.qk_tracks && !sinks_unfused && !f.wants_scores && !f.windowed && !f.softcapped;
    if f.device == DeviceKind::Cpu && fused_serves {
        Kernel::MaterialisedFused
    } else {
        Kernel::Materialised
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use asa_kernels::row_table::KeyBlocks;

    /// CPU f32 inference of a softmax layer whose probe takes rows.
    fn cpu_rows() -> Facts {
        Facts {
            device: DeviceKind::Cpu,
            f32: true,
            half: false,
            qk_tracks: false,
            others_track: false,
            sinks: false,
            host_sinks: false,
            sinks_f32: true,
            plain_logits: true,
            windowed: false,
            chunked: false,
            softcapped: false,
            head_dim: 64,
            affine: false,
            alpha_ma: false,
            rows: Some(RowWants::default()),
            wants_attention: true,
            wants_scores: false,
            wants_softmax: false,
        }
    }

    #[test]
    fn each_case_gets_the_kernel_that_serves_it() {
        let f = cpu_rows();
        assert_eq!(plan(&f), Kernel::FlashTiles);
        // nothing wanted: tiles too; maps wanted (heatmap layer): the fused softmax
        assert_eq!(
            plan(&Facts {
                rows: None,
                wants_attention: false,
                ..f.clone()
            }),
            Kernel::FlashTiles
        );
        assert_eq!(
            plan(&Facts {
                rows: None,
                ..f.clone()
            }),
            Kernel::MaterialisedFused
        );
        // scores asked for: only candle ops push them
        let scores = Facts {
            wants_scores: true,
            ..f.clone()
        };
        assert_eq!(plan(&scores), Kernel::Materialised);
        // training: candle ops (autograd)
        assert_eq!(
            plan(&Facts {
                qk_tracks: true,
                ..f.clone()
            }),
            Kernel::Materialised
        );
        // bf16 and f16 on the CPU: the tiles (on f32 copies); another dtype (f64): neither
        // the tiles nor the fused rows, the fused softmax takes the f32 logits of a
        // materialised block
        let half = Facts {
            f32: false,
            half: true,
            ..f.clone()
        };
        assert_eq!(plan(&half), Kernel::FlashTiles);
        let other = Facts {
            f32: false,
            ..f.clone()
        };
        assert_eq!(plan(&other), Kernel::MaterialisedFused);
        // CUDA: the GPU's tiles for every logit rule and dtype, up to 16 bands and head
        // dimension 256; then fused rows for plain logits, else candle ops
        let cuda = Facts {
            device: DeviceKind::Cuda,
            ..f.clone()
        };
        assert_eq!(plan(&cuda), Kernel::FlashTiles);
        for facts in [
            Facts {
                f32: false,
                ..cuda.clone()
            },
            Facts {
                plain_logits: false,
                ..cuda.clone()
            },
            Facts {
                windowed: true,
                ..cuda.clone()
            },
            Facts {
                sinks: true,
                ..cuda.clone()
            },
            Facts {
                affine: true,
                alpha_ma: true,
                ..cuda.clone()
            },
        ] {
            assert_eq!(plan(&facts), Kernel::FlashTiles, "{facts:?}");
        }
        let cuda = Facts {
            head_dim: 512,
            ..cuda
        };
        assert_eq!(plan(&cuda), Kernel::FusedRows);
        let many = RowWants {
            bands: vec![(0, 1); 17],
            ..RowWants::default()
        };
        assert_eq!(
            plan(&Facts {
                rows: Some(many),
                ..cuda.clone()
            }),
            Kernel::Materialised
        );
        let logn = Facts {
            plain_logits: false,
            ..cuda
        };
        assert_eq!(plan(&logn), Kernel::Materialised);
        // sinks whose host copy is missing (trained sinks) never reach the CPU kernels
        let sinks = Facts {
            sinks: true,
            host_sinks: false,
            ..f.clone()
        };
        assert_eq!(plan(&sinks), Kernel::Materialised);
        // Affine-Scaled without its stored alpha_ma: candle ops say what is missing
        let affine = Facts {
            affine: true,
            alpha_ma: false,
            ..f
        };
        assert_eq!(plan(&affine), Kernel::MaterialisedFused);
    }

    #[test]
    fn windowed_layers_get_the_tiles_or_candle_ops() {
        let windowed = Facts {
            windowed: true,
            ..cpu_rows()
        };
        assert_eq!(plan(&windowed), Kernel::FlashTiles);
        // the fused softmaxes (CPU and CUDA) mask causally only
        let maps = Facts {
            rows: None,
            ..windowed.clone()
        };
        assert_eq!(plan(&maps), Kernel::Materialised);
        let cuda = Facts {
            device: DeviceKind::Cuda,
            head_dim: 512,
            ..windowed.clone()
        };
        assert_eq!(plan(&cuda), Kernel::Materialised);
        // a chunked layer: the CPU's tiles, never the GPU's (they mask sliding windows only)
        let chunked = Facts {
            chunked: true,
            ..windowed
        };
        assert_eq!(plan(&chunked), Kernel::FlashTiles);
        let gpu = Facts {
            device: DeviceKind::Cuda,
            ..chunked
        };
        assert_eq!(plan(&gpu), Kernel::Materialised);
    }

    #[test]
    fn key_blocks_take_the_cpu_kernels_and_the_materialised_blocks_on_a_gpu() {
        let blocks = RowWants {
            key_blocks: Some(KeyBlocks::new(8, 64)),
            ..RowWants::default()
        };
        let f = Facts {
            rows: Some(blocks),
            ..cpu_rows()
        };
        assert_eq!(plan(&f), Kernel::FlashTiles);
        // no CUDA kernel fills them: neither the GPU's tiles nor its fused rows
        for head_dim in [64, 512] {
            let cuda = Facts {
                device: DeviceKind::Cuda,
                head_dim,
                ..f.clone()
            };
            assert_eq!(plan(&cuda), Kernel::Materialised, "head dim {head_dim}");
        }
    }
}
