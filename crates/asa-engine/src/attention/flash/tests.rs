//! The flash tiles against the materialised path and float64 references.

use super::*;
use crate::attention::variant::BetaLength;
use asa_hooks::KeyWindow;
use asa_kernels::row_table::{
    KeyBlocks, RowWants, BANDS, ENTROPY, FIRST, QK_ABS_SUM, QK_SUM, SINK_MASS, SUM,
};

/// Deterministic values in [-scale, scale).
fn values(len: usize, seed: usize, scale: f32) -> Vec<f32> {
    (0..len)
        .map(|k| (((k + seed) * 7919 + seed * 104_729) % 2003) as f32 / 1001.5 * scale - scale)
        .collect()
}

/// A case's sizes: q `[b, heads, t, d]`, k and v `[b, kv, t, d]`.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    b: usize,
    heads: usize,
    kv: usize,
    t: usize,
    d: usize,
}

/// Deterministic q, k, v as host vectors and CPU tensors.
struct Inputs {
    host: [Vec<f32>; 3],
    tensors: [Tensor; 3],
}

impl Inputs {
    fn host(&self) -> Qkv<'_, [f32]> {
        let [q, k, v] = &self.host;
        Qkv { q, k, v }
    }

    fn tensors(&self) -> Qkv<'_, Tensor> {
        let [q, k, v] = &self.tensors;
        Qkv { q, k, v }
    }
}

/// q, k and v of `sizes` from `seed`: q and k within ±`qk`, v within ±1.
fn inputs(sizes: Sizes, seed: usize, qk: f32) -> Inputs {
    let Sizes { b, heads, kv, t, d } = sizes;
    let q = values(b * heads * t * d, seed, qk);
    let k = values(b * kv * t * d, seed + 1, qk);
    let v = values(b * kv * t * d, seed + 2, 1.0);
    let tensor =
        |x: &Vec<f32>, h: usize| Tensor::from_vec(x.clone(), (b, h, t, d), &Device::Cpu).unwrap();
    let tensors = [tensor(&q, heads), tensor(&k, kv), tensor(&v, kv)];
    Inputs {
        host: [q, k, v],
        tensors,
    }
}

/// The reference, in f64 by hand: for each query row, softmax over the visible keys (and
/// the sink), its weights' reductions and the weighted sum of values.
struct Expected {
    out: Vec<f64>,
    cells: Vec<Vec<f64>>,
}

/// The logit rules, in f64 from their papers' formulas.
#[derive(Debug, Clone, Copy)]
enum Rule<'a> {
    Plain,
    /// s * s_h ln(i + 1)
    Logn(&'a [f32]),
    /// a_t s + m_t, a_t = sqrt(1 + 2 ln(1 + t / tau)), m_t = -2 ln(1 + t / tau)
    ScaleInvariant(f64),
}

impl Rule<'_> {
    fn logit(self, s: f64, head: usize, i: usize, j: usize) -> f64 {
        match self {
            Rule::Plain => s,
            Rule::Logn(scale) => s * scale[head] as f64 * ((i + 1) as f64).ln(),
            Rule::ScaleInvariant(tau) => {
                let log = (1.0 + (i - j) as f64 / tau).ln();
                (1.0 + 2.0 * log).sqrt() * s - 2.0 * log
            }
        }
    }

    fn tiles(self, t: usize) -> TileLogits {
        match self {
            Rule::Plain => TileLogits::Plain,
            Rule::Logn(scale) => TileLogits::Logn {
                head_scale: scale.to_vec(),
            },
            Rule::ScaleInvariant(tau) => {
                let (a, m) = crate::attention::reversed_coefficients(tau, t);
                TileLogits::Distance { a, m }
            }
        }
    }
}

/// What the reference computes: the queries `q_start..q_start + n`, each seeing the
/// keys of its `window` (w keys: i - w < j <= i; all j <= i without), logits `rule` of
/// `scale` * q.k, per-head `sinks`, distance `bands` and key `blocks` (each row's cells
/// end with the sums, then the maxima, of its visible weights in each key block, 0
/// where it sees none), and Affine-Scaled weights with `affine`.
#[derive(Debug, Clone, Copy)]
struct Case<'a> {
    q_start: usize,
    n: usize,
    window: Option<usize>,
    scale: f64,
    rule: Rule<'a>,
    sinks: Option<&'a [f32]>,
    bands: &'a [(usize, usize)],
    blocks: Option<KeyBlocks>,
    affine: Option<AffineCase<'a>>,
}

impl Default for Case<'_> {
    /// No queries, plain logits, no window, sinks, bands, blocks or affine weights.
    fn default() -> Self {
        Case {
            q_start: 0,
            n: 0,
            window: None,
            scale: 1.0,
            rule: Rule::Plain,
            sinks: None,
            bands: &[],
            blocks: None,
            affine: None,
        }
    }
}

/// Affine-Scaled weights a = alpha p + beta, beta = (alpha_ma - alpha) / N, N = t
/// (`full`) or i + 1, from `alpha` `[b, heads, t]` and `alpha_ma` `[heads]`; their
/// entropy is that of max(a, 0) renormalised.
#[derive(Debug, Clone, Copy)]
struct AffineCase<'a> {
    alpha: &'a [f32],
    alpha_ma: &'a [f32],
    full: bool,
}

/// The reference of `case` over `qkv` of `sizes`.
fn expected(qkv: Qkv<[f32]>, sizes: Sizes, case: &Case) -> Expected {
    let Qkv { q, k, v } = qkv;
    let Sizes { b, heads, kv, t, d } = sizes;
    let Case {
        q_start,
        n,
        window,
        scale,
        rule,
        sinks,
        bands,
        blocks,
        affine,
    } = *case;
    let groups = heads / kv;
    let mut out = Vec::new();
    let mut cells = Vec::new();
    for s in 0..b {
        for h in 0..heads {
            let kvh = h / groups;
            for i in q_start..q_start + n {
                let qi = &q[((s * heads + h) * t + i) * d..][..d];
                let key = |j: usize| &k[((s * kv + kvh) * t + j) * d..][..d];
                let value = |j: usize| &v[((s * kv + kvh) * t + j) * d..][..d];
                // the visible keys lo..=i; q.k summed in f32, as the gemm does, then widened
                let lo = window.map_or(0, |w| (i + 1).saturating_sub(w));
                let raw: Vec<f64> = (lo..=i)
                    .map(|j| qi.iter().zip(key(j)).map(|(a, b)| a * b).sum::<f32>() as f64)
                    .collect();
                let y: Vec<f64> = (lo..=i)
                    .map(|j| rule.logit(raw[j - lo] * scale, h, i, j))
                    .collect();
                let sink = sinks.map(|s| s[h] as f64);
                let m = y.iter().cloned().chain(sink).fold(f64::MIN, f64::max);
                // e of every key 0..=i, 0 outside the window
                let e: Vec<f64> = (0..=i)
                    .map(|j| if j < lo { 0.0 } else { (y[j - lo] - m).exp() })
                    .collect();
                let sink_e = sink.map_or(0.0, |s| (s - m).exp());
                let real: f64 = e.iter().sum();
                let z = real + sink_e;
                let mut w: Vec<f64> = e.iter().map(|e| e / z).collect();
                let mut entropy: f64 = e[lo..].iter().map(|e| e / real).map(|p| -p * p.ln()).sum();
                if let Some(AffineCase {
                    alpha,
                    alpha_ma,
                    full,
                }) = affine
                {
                    let a = alpha[(s * heads + h) * t + i] as f64;
                    let len = if full { t } else { i + 1 } as f64;
                    let beta = (alpha_ma[h] as f64 - a) / len;
                    w = e.iter().map(|e| a * e / real + beta).collect();
                    let mass: f64 = w.iter().map(|w| w.max(0.0)).sum();
                    entropy = w
                        .iter()
                        .filter(|&&w| w > 0.0)
                        .map(|w| -(w / mass) * (w / mass).ln())
                        .sum();
                    if mass <= 0.0 {
                        entropy = f64::NAN;
                    }
                }
                for c in 0..d {
                    out.push((0..=i).map(|j| w[j] * value(j)[c] as f64).sum());
                }
                let mut cell = vec![0.0; BANDS + 1 + bands.len()];
                cell[FIRST] = w[0];
                cell[SUM] = w.iter().sum();
                cell[ENTROPY] = entropy;
                cell[SINK_MASS] = if affine.is_some() { 0.0 } else { sink_e / z };
                cell[QK_SUM] = raw.iter().sum();
                cell[QK_ABS_SUM] = raw.iter().map(|x| x.abs()).sum();
                cell[BANDS] = if i > 0 { w[0] } else { 0.0 };
                for (c, &(lo, hi)) in bands.iter().enumerate() {
                    // key 0 of a later query is `first`, not its distance's band
                    cell[BANDS + 1 + c] = (usize::from(i > 0)..=i)
                        .filter(|&j| (lo..hi).contains(&(i - j)))
                        .map(|j| w[j])
                        .sum();
                }
                // the row's largest logit over its real keys (never the sink)
                cell.push(y.iter().cloned().fold(f64::MIN, f64::max));
                if let Some(blocks) = blocks {
                    // block c holds keys floor(c t / G) .. floor((c + 1) t / G)
                    let g = blocks.blocks;
                    let in_block =
                        |c: usize| (c * t / g..(c + 1) * t / g).filter(|&j| j >= lo && j <= i);
                    let sums = (0..g).map(|c| in_block(c).map(|j| w[j]).sum::<f64>());
                    let maxima = (0..g).map(|c| {
                        let m = in_block(c).map(|j| w[j]).fold(f64::NEG_INFINITY, f64::max);
                        if m == f64::NEG_INFINITY {
                            0.0
                        } else {
                            m
                        }
                    });
                    let (sums, maxima): (Vec<f64>, Vec<f64>) = (sums.collect(), maxima.collect());
                    cell.extend(sums);
                    cell.extend(maxima);
                }
                cells.push(cell);
            }
        }
    }
    Expected { out, cells }
}

/// Every row-table column: first, sum, entropy, `bands`, key `blocks` and max logit.
fn every_column(bands: &[(usize, usize)], blocks: KeyBlocks) -> RowWants {
    RowWants {
        first: true,
        sum: true,
        entropy: true,
        bands: bands.to_vec(),
        key_blocks: Some(blocks),
        max_logit: true,
        key_sums_from: None,
    }
}

#[test]
fn tiles_give_the_attention_and_row_table_of_a_float64_softmax() {
    // 2 sequences, 6 query heads on 2 kv heads, 45 positions, head dim 8; logits up to
    // ~±18 (LogN ~±70) so the running maximum moves across tiles; tasks of 3-4 queries
    // (x 3 heads) against tiles of 5-7 keys cross every boundary: diagonal tiles, partial
    // last tiles, rows with no visible key in a tile; 1 x 1 tiles; and one tile
    let sizes = Sizes {
        b: 2,
        heads: 6,
        kv: 2,
        t: 45,
        d: 8,
    };
    let Sizes { heads, t, d, .. } = sizes;
    let inputs = inputs(sizes, 1, 2.5);
    let bands = vec![(0, 1), (1, 10), (10, usize::MAX)];
    // block_map's key blocks: 7 of the 45 keys (6 or 7 keys each), across the tiles
    let blocks = KeyBlocks::new(7, t);
    let wants = every_column(&bands, blocks);
    let sinks = values(heads, 4, 3.0);
    let scale = 1.0 / (d as f64).sqrt();
    let logn_scale = [0.5f32, 0.8, 1.1, 0.3, 0.6, 0.9];
    let rules = [
        Rule::Plain,
        Rule::Logn(&logn_scale),
        Rule::ScaleInvariant(10.0),
    ];
    // sliding windows: one key, shorter than a tile, across tiles, and longer than t
    let windows = [None, Some(1), Some(4), Some(17), Some(60)];
    for ((q_start, n), rule, window) in [(0, 45), (0, 13), (30, 15), (44, 1)]
        .into_iter()
        .flat_map(|block| rules.iter().map(move |&rule| (block, rule)))
        .flat_map(|(block, rule)| windows.iter().map(move |&w| (block, rule, w)))
    {
        for sink in [None, Some(&sinks[..])] {
            for tiles in [
                Tiles { rows: 12, keys: 7 },
                Tiles { rows: 9, keys: 5 },
                Tiles { rows: 1, keys: 1 },
                Tiles::default(),
            ] {
                let TileOutput { out, table, .. } = causal_attention(
                    inputs.tensors(),
                    QueryBlock {
                        q_start,
                        n,
                        window: window.map_or(KeyWindow::CAUSAL, KeyWindow::sliding),
                    },
                    Logits {
                        scale: scale as f32,
                        rule: &rule.tiles(t),
                        affine: None,
                    },
                    sink,
                    Some(&wants),
                    tiles,
                    None,
                )
                .unwrap()
                .unwrap();
                let case = Case {
                    q_start,
                    n,
                    window,
                    scale,
                    rule,
                    sinks: sink,
                    bands: &bands,
                    blocks: Some(blocks),
                    affine: None,
                };
                let want = expected(inputs.host(), sizes, &case);
                let close =
                    |got: f32, want: f64| (got as f64 - want).abs() <= 1e-6 + 1e-5 * want.abs();
                let out = out.flatten_all().unwrap().to_vec1::<f32>().unwrap();
                assert_eq!(out.len(), want.out.len());
                for (at, (&g, &w)) in out.iter().zip(&want.out).enumerate() {
                    assert!(
                        close(g, w),
                        "output {at}: {g} vs {w} ({q_start}, {n}, {rule:?}, {window:?}, {tiles:?})"
                    );
                }
                let table = table.to_vec2::<f32>().unwrap();
                assert_eq!(table.len(), want.cells.len());
                for (row, (got, want)) in table.iter().zip(&want.cells).enumerate() {
                    assert_eq!(got.len(), want.len());
                    for (c, (&g, &w)) in got.iter().zip(want).enumerate() {
                        // q.k sums are sums of up to 45 values of ~25: f32 rounding
                        let w_tol = if c == QK_SUM || c == QK_ABS_SUM {
                            1e-4
                        } else {
                            0.0
                        };
                        assert!(
                            close(g, w) || (g as f64 - w).abs() <= w_tol * w.abs().max(1.0),
                            "row {row} column {c}: {g} vs {w} ({q_start}, {n}, {rule:?}, window {window:?}, sink {}, {tiles:?})",
                            sink.is_some()
                        );
                    }
                }
            }
        }
    }
}

/// bf16 products (`PackedKv`): with q, k, v already bf16 values and a power-of-two scale
/// (so q times it rounds exactly), the only rounding left is the tile's weights for the
/// value product: every row-table cell matches the float64 reference as the f32 tiles'
/// do, and each output is within 2^-8 max|v| of it (a relative 2^-9 per weight). Tiles
/// of 7 and 40 keys become whole panels (32, 64); windows start tiles mid-panel.
#[test]
fn bf16_products_round_only_the_weights_of_the_value_product() {
    let sizes = Sizes {
        b: 2,
        heads: 6,
        kv: 2,
        t: 100,
        d: 16,
    };
    let Sizes { b, heads, kv, t, d } = sizes;
    let rounded = |x: Vec<f32>| -> Vec<f32> {
        x.into_iter()
            .map(|v| half::bf16::from_f32(v).to_f32())
            .collect()
    };
    let raw = inputs(sizes, 3, 2.5);
    let [q, k, v] = raw.host.clone().map(rounded);
    let tensor =
        |x: &Vec<f32>, h: usize| Tensor::from_vec(x.clone(), (b, h, t, d), &Device::Cpu).unwrap();
    let inputs = Inputs {
        tensors: [tensor(&q, heads), tensor(&k, kv), tensor(&v, kv)],
        host: [q, k, v],
    };
    let packed = PackedKv::pack(inputs.tensors().k, inputs.tensors().v)
        .unwrap()
        .unwrap();
    let bands = vec![(0, 1), (1, 10), (10, usize::MAX)];
    let blocks = KeyBlocks::new(7, t);
    let wants = every_column(&bands, blocks);
    let sinks = values(heads, 4, 3.0);
    let scale = 0.25;
    let logn_scale = [0.5f32, 0.8, 1.1, 0.3, 0.6, 0.9];
    let rules = [
        Rule::Plain,
        Rule::Logn(&logn_scale),
        Rule::ScaleInvariant(10.0),
    ];
    for (q_start, n) in [(0, 100), (37, 63)] {
        for rule in rules {
            for window in [None, Some(5), Some(45)] {
                for (tiles, sink) in [
                    (Tiles { rows: 12, keys: 7 }, None),
                    (Tiles { rows: 5, keys: 40 }, Some(&sinks[..])),
                    (Tiles::default(), None),
                ] {
                    let block = QueryBlock {
                        q_start,
                        n,
                        window: window.map_or(KeyWindow::CAUSAL, KeyWindow::sliding),
                    };
                    let logits = Logits {
                        scale,
                        rule: &rule.tiles(t),
                        affine: None,
                    };
                    let qkv = inputs.tensors();
                    let TileOutput { out, table, .. } = causal_attention(
                        qkv,
                        block,
                        logits,
                        sink,
                        Some(&wants),
                        tiles,
                        Some(&packed),
                    )
                    .unwrap()
                    .unwrap();
                    let case = Case {
                        q_start,
                        n,
                        window,
                        scale: scale as f64,
                        rule,
                        sinks: sink,
                        bands: &bands,
                        blocks: Some(blocks),
                        affine: None,
                    };
                    let want = expected(inputs.host(), sizes, &case);
                    let what = format!("({q_start}, {n}, {rule:?}, {window:?}, {tiles:?})");
                    let out = out.flatten_all().unwrap().to_vec1::<f32>().unwrap();
                    for (at, (&g, &w)) in out.iter().zip(&want.out).enumerate() {
                        let err = (g as f64 - w).abs();
                        assert!(err <= 2f64.powi(-8), "output {at}: {g} vs {w} {what}");
                    }
                    let table = table.to_vec2::<f32>().unwrap();
                    assert_eq!(table.len(), want.cells.len());
                    for (row, (got, want)) in table.iter().zip(&want.cells).enumerate() {
                        for (c, (&g, &w)) in got.iter().zip(want).enumerate() {
                            let err = (g as f64 - w).abs();
                            let tol = match c {
                                QK_SUM | QK_ABS_SUM => 1e-4 * w.abs().max(1.0),
                                _ => 1e-6 + 1e-5 * w.abs(),
                            };
                            assert!(err <= tol, "row {row} column {c}: {g} vs {w} {what}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn without_wants_the_one_column_is_the_sink_mass() {
    let sizes = Sizes {
        b: 1,
        heads: 2,
        kv: 1,
        t: 9,
        d: 4,
    };
    let t = sizes.t;
    let inputs = inputs(sizes, 5, 1.0);
    let sinks = [0.5f32, -2.0];
    let TileOutput { table, .. } = causal_attention(
        inputs.tensors(),
        QueryBlock {
            q_start: 0,
            n: t,
            window: KeyWindow::CAUSAL,
        },
        Logits {
            scale: 0.5,
            rule: &TileLogits::Plain,
            affine: None,
        },
        Some(&sinks),
        None,
        Tiles { rows: 2, keys: 3 },
        None,
    )
    .unwrap()
    .unwrap();
    let case = Case {
        n: t,
        scale: 0.5,
        sinks: Some(&sinks),
        ..Case::default()
    };
    let want = expected(inputs.host(), sizes, &case);
    let table = table.to_vec2::<f32>().unwrap();
    for (got, want) in table.iter().zip(&want.cells) {
        assert_eq!(got.len(), 1);
        assert!(
            (got[0] as f64 - want[SINK_MASS]).abs() < 1e-6,
            "{} vs {}",
            got[0],
            want[SINK_MASS]
        );
    }
}

#[test]
fn columns_nobody_asked_for_stay_zero() {
    let sizes = Sizes {
        b: 1,
        heads: 4,
        kv: 2,
        t: 20,
        d: 4,
    };
    let inputs = inputs(sizes, 8, 1.5);
    let wants = RowWants {
        first: true,
        ..RowWants::default()
    };
    let TileOutput { table, .. } = causal_attention(
        inputs.tensors(),
        QueryBlock {
            q_start: 3,
            n: 17,
            window: KeyWindow::CAUSAL,
        },
        Logits {
            scale: 0.5,
            rule: &TileLogits::Plain,
            affine: None,
        },
        None,
        Some(&wants),
        Tiles { rows: 6, keys: 4 },
        None,
    )
    .unwrap()
    .unwrap();
    let case = Case {
        q_start: 3,
        n: 17,
        scale: 0.5,
        ..Case::default()
    };
    let want = expected(inputs.host(), sizes, &case);
    for (got, want) in table.to_vec2::<f32>().unwrap().iter().zip(&want.cells) {
        assert_eq!(got.len(), BANDS);
        assert!((got[FIRST] as f64 - want[FIRST]).abs() < 1e-6);
        assert_eq!((got[SUM], got[ENTROPY]), (0.0, 0.0));
    }
}

#[test]
fn a_sink_far_above_every_logit_takes_all_the_mass_without_overflow() {
    // exp(1000 - max) overflows f64: the denominator is shifted by the sink instead
    let sizes = Sizes {
        b: 1,
        heads: 2,
        kv: 1,
        t: 12,
        d: 4,
    };
    let t = sizes.t;
    let inputs = inputs(sizes, 11, 1.0);
    let wants = RowWants {
        first: true,
        sum: true,
        entropy: true,
        bands: vec![(0, 1), (1, usize::MAX)],
        max_logit: false,
        key_blocks: None,
        key_sums_from: None,
    };
    let sinks = [1000f32, 1000.0];
    let TileOutput { out, table, .. } = causal_attention(
        inputs.tensors(),
        QueryBlock {
            q_start: 0,
            n: t,
            window: KeyWindow::CAUSAL,
        },
        Logits {
            scale: 0.5,
            rule: &TileLogits::Plain,
            affine: None,
        },
        Some(&sinks),
        Some(&wants),
        Tiles { rows: 2, keys: 5 },
        None,
    )
    .unwrap()
    .unwrap();
    // the real keys' softmax (without the sink) keeps its entropy
    let case = Case {
        n: t,
        scale: 0.5,
        ..Case::default()
    };
    let want = expected(inputs.host(), sizes, &case);
    for (got, want) in table.to_vec2::<f32>().unwrap().iter().zip(&want.cells) {
        assert_eq!(got[SINK_MASS], 1.0);
        assert_eq!((got[FIRST], got[SUM]), (0.0, 0.0));
        assert!(got[BANDS..].iter().all(|&w| w == 0.0));
        assert!(
            (got[ENTROPY] as f64 - want[ENTROPY]).abs() < 1e-5,
            "{:?}",
            got
        );
    }
    let out = out.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    assert!(out.iter().all(|&o| o == 0.0));
}

#[test]
fn affine_tiles_give_the_weights_and_row_table_of_a_float64_affine_softmax() {
    // alpha from -0.2 to 1.2 (clipped activations stay in [0, 1]; the kernel takes any),
    // alpha_ma of both signs: some rows carry negative weights, and with alpha 0 and a
    // negative alpha_ma every weight of the row is negative (entropy NaN)
    let sizes = Sizes {
        b: 2,
        heads: 6,
        kv: 2,
        t: 33,
        d: 8,
    };
    let Sizes { b, heads, t, .. } = sizes;
    let inputs = inputs(sizes, 21, 2.0);
    let mut alpha: Vec<f32> = values(b * heads * t, 24, 0.7)
        .iter()
        .map(|a| a + 0.5)
        .collect();
    alpha[t + 5] = 0.0; // sequence 0, head 1 (alpha_ma -0.4), query 5
    let alpha_ma = [0.6f32, -0.4, 0.9, 0.2, -0.1, 1.0];
    let bands = vec![(0, 1), (1, 10), (10, usize::MAX)];
    // key blocks of 6 or 7 of the 33 keys; negative weights make negative maxima
    let blocks = KeyBlocks::new(5, t);
    let wants = RowWants {
        first: true,
        sum: true,
        entropy: true,
        bands: bands.clone(),
        key_blocks: Some(blocks),
        max_logit: true,
        key_sums_from: None,
    };
    let scale = 0.35f64;
    for (full, beta_length) in [(true, BetaLength::Full), (false, BetaLength::Visible)] {
        let affine = AffineTile {
            alpha: alpha.clone(),
            alpha_ma: alpha_ma.to_vec(),
            beta_length,
            seq_len: t,
        };
        for (q_start, n) in [(0, 33), (5, 20)] {
            for tiles in [
                Tiles { rows: 12, keys: 7 },
                Tiles { rows: 1, keys: 1 },
                Tiles::default(),
            ] {
                let TileOutput { out, table, .. } = causal_attention(
                    inputs.tensors(),
                    QueryBlock {
                        q_start,
                        n,
                        window: KeyWindow::CAUSAL,
                    },
                    Logits {
                        scale: scale as f32,
                        rule: &TileLogits::Plain,
                        affine: Some(&affine),
                    },
                    None,
                    Some(&wants),
                    tiles,
                    None,
                )
                .unwrap()
                .unwrap();
                let case = Case {
                    q_start,
                    n,
                    scale,
                    bands: &bands,
                    blocks: Some(blocks),
                    affine: Some(AffineCase {
                        alpha: &alpha,
                        alpha_ma: &alpha_ma,
                        full,
                    }),
                    ..Case::default()
                };
                let want = expected(inputs.host(), sizes, &case);
                let close = |got: f32, want: f64| {
                    (got.is_nan() && want.is_nan())
                        || (got as f64 - want).abs() <= 1e-6 + 1e-5 * want.abs()
                };
                let out = out.flatten_all().unwrap().to_vec1::<f32>().unwrap();
                for (at, (&g, &w)) in out.iter().zip(&want.out).enumerate() {
                    assert!(
                        close(g, w),
                        "output {at}: {g} vs {w} ({full}, {q_start}, {tiles:?})"
                    );
                }
                let table = table.to_vec2::<f32>().unwrap();
                let mut nan_rows = 0;
                for (row, (got, want)) in table.iter().zip(&want.cells).enumerate() {
                    nan_rows += usize::from(want[ENTROPY].is_nan());
                    for (c, (&g, &w)) in got.iter().zip(want).enumerate() {
                        let qk = c == QK_SUM || c == QK_ABS_SUM;
                        assert!(
                            close(g, w) || (qk && (g as f64 - w).abs() <= 1e-4 * w.abs().max(1.0)),
                            "row {row} column {c}: {g} vs {w} ({full}, {q_start}, {tiles:?})"
                        );
                    }
                }
                if q_start == 0 {
                    assert!(nan_rows > 0, "the all-negative row is in the block");
                }
            }
        }
    }
}
