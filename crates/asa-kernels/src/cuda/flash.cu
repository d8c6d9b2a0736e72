// Flash-style causal attention on the GPU: a query block's output and its row table
// (layout: src/hooks/row_table.rs) without the block's [heads, n, keys] weights ever
// existing, the GPU side of src/attention/flash/, which it follows step for step.
//
// A thread block takes WARPS consecutive queries of one (sequence, head); each warp owns
// one query. The keys its queries see are visited in tiles of 32, K and V copied to
// shared memory (converted to f32) once for the whole block. In a tile, lane l takes key
// k0 + l: its logit y (the variant's rule of scale * q.k: plain, LogN, soft cap,
// scale-invariant), then the warp's online softmax (the running maximum m, with every sum
// rescaled when it grows), the lane's share of the row table's sums of e = exp(y - m)
// (f64), and the value product, where lane l holds the output dimensions l, l + 32, ...
// Affine-Scaled weights alpha p + beta need each row's final maximum and denominator:
// their rows take a second pass over the tiles. Each lane keeps its own sums and the warp
// adds them at the end, so the results are the same on every run.
//
// Compiled to PTX by build.rs (feature `cuda`); launched from src/cuda/flash.rs.

#include <cfloat>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "row_table.h"
// BandTable and the dtype conversions.
#include "common.cuh"

// Keys per tile: one per lane.
#define KEY_TILE 32
// Warps (queries) per thread block; flash.rs launches WARPS * 32 threads.
#define WARPS 8

// The logit rules (`TileLogits` in flash/).
#define RULE_PLAIN 0
#define RULE_LOGN 1
#define RULE_SOFTCAP 2
#define RULE_DISTANCE 3

// Shapes and settings of one launch, passed by value (FlashParams in flash.rs).
struct FlashParams {
    int heads, kv, t, d;
    int q_start, n;
    // sliding window size (0: causal, every earlier key)
    int window;
    float scale;
    int rule;
    float cap;
    int has_sink;
    int affine;
    // beta's N: 1 for i + 1 (BetaLength::Visible), else seq_len
    int beta_visible;
    int seq_len;
    // the row table: width, and what it holds (want_rows 0: one column, the sink mass)
    int want_rows, width, want_first, want_sum, want_entropy, nbands, max_logit_col;
};

__device__ __forceinline__ double warp_sum(double v) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, offset);
    }
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    }
    return v;
}

// The first key query i sees.
__device__ __forceinline__ int first_key(const FlashParams& p, int i) {
    return p.window > 0 ? max(i + 1 - p.window, 0) : 0;
}

// Everything that is constant along one query's row.
struct RowRule {
    float factor;          // LogN: s_h ln(i + 1)
    const float* a;        // scale-invariant coefficients, a[len - 1 - (i - j)]
    const float* m;
    int len;
};

// The logit y of raw q.k `raw` of key j for query i (as the CPU tiles' `row_logits`).
__device__ __forceinline__ float logit(const FlashParams& p, const RowRule& r, float raw, int i,
                                       int j) {
    switch (p.rule) {
    case RULE_LOGN:
        return raw * p.scale * r.factor;
    case RULE_SOFTCAP:
        return tanhf(raw * p.scale / p.cap) * p.cap;
    case RULE_DISTANCE: {
        const int at = r.len - 1 - (i - j);
        return raw * p.scale * r.a[at] + r.m[at];
    }
    default:
        return raw * p.scale;
    }
}

// One lane's share of a row's running sums (f64, as the CPU tiles' RowSums and bands).
struct LaneSums {
    double sum, sum_ey, first, qk, qk_abs;
    // Affine-Scaled second pass: the weights' sum, positive mass and sum w ln w
    double weight_sum, mass, w_ln_w;
    double band[MAX_BANDS];

    __device__ LaneSums() : sum(0), sum_ey(0), first(0), qk(0), qk_abs(0), weight_sum(0), mass(0), w_ln_w(0) {
#pragma unroll
        for (int k = 0; k < MAX_BANDS; k++) {
            band[k] = 0.0;
        }
    }

    __device__ void rescale(double c, double shift, int nbands) {
        sum_ey = c * (sum_ey + sum * shift);
        sum *= c;
        first *= c;
#pragma unroll
        for (int k = 0; k < MAX_BANDS; k++) {
            if (k < nbands) {
                band[k] *= c;
            }
        }
    }

    // Adds weight w of key j to the distance bands of query i (key 0 left out for i > 0).
    __device__ void add_bands(float w, int i, int j, const BandTable& bands, int nbands) {
        if (nbands > 0 && (i == 0 || j > 0)) {
            const unsigned int dist = (unsigned int)(i - j);
#pragma unroll
            for (int k = 0; k < MAX_BANDS; k++) {
                if (k < nbands && dist >= bands.lo[k] && dist < bands.hi[k]) {
                    band[k] += w;
                }
            }
        }
    }
};

// The K and V tile from key k0 (up to `count` keys) into shared memory, f32: k_s rows
// padded to DMAX + 1 floats (lane l reads row l: no two lanes in one bank), v_s rows of
// DMAX.
template <typename T, int DMAX>
__device__ void load_tile(const T* __restrict__ k, const T* __restrict__ v, float* k_s,
                          float* v_s, int k0, int count, int d) {
    const long long base = (long long)k0 * d;
    for (int idx = threadIdx.x; idx < KEY_TILE * d; idx += WARPS * 32) {
        const int key = idx / d, c = idx - key * d;
        const bool in = key < count;
        k_s[key * (DMAX + 1) + c] = in ? to_f32(k[base + idx]) : 0.0f;
        v_s[key * DMAX + c] = in ? to_f32(v[base + idx]) : 0.0f;
    }
}

// Raw q.k of the warp's query (q_s, d floats) and key row `lane` of the tile.
template <int DMAX>
__device__ __forceinline__ float dot_key(const float* q_s, const float* k_s, int d) {
    const float* kr = k_s + (threadIdx.x & 31) * (DMAX + 1);
    float acc = 0.0f;
#pragma unroll 8
    for (int c = 0; c < d; c++) {
        acc = fmaf(q_s[c], kr[c], acc);
    }
    return acc;
}

// out[c] += w_j v_j over the tile's keys, w_j the weight lane j holds.
template <int DMAX>
__device__ __forceinline__ void add_values(float (&o)[DMAX / 32], float w, const float* v_s) {
    const int lane = threadIdx.x & 31;
#pragma unroll 4
    for (int jj = 0; jj < KEY_TILE; jj++) {
        const float wj = __shfl_sync(0xffffffffu, w, jj);
        const float* vr = v_s + jj * DMAX + lane;
#pragma unroll
        for (int c = 0; c < DMAX / 32; c++) {
            o[c] = fmaf(wj, vr[32 * c], o[c]);
        }
    }
}

template <typename T, int DMAX>
__device__ void flash_rows(const T* __restrict__ q, const T* __restrict__ k,
                           const T* __restrict__ v, T* __restrict__ out,
                           float* __restrict__ table, const float* __restrict__ sinks,
                           const float* __restrict__ head_scale,
                           const float* __restrict__ dist_a, const float* __restrict__ dist_m,
                           const float* __restrict__ alpha, const float* __restrict__ alpha_ma,
                           const FlashParams& p, const BandTable& bands) {
    extern __shared__ float shared[];
    float* k_s = shared;
    float* v_s = k_s + KEY_TILE * (DMAX + 1);
    float* q_s = v_s + KEY_TILE * DMAX;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int seq = blockIdx.z, head = blockIdx.y;
    const int kv_head = head / (p.heads / p.kv);
    const int block_first = p.q_start + blockIdx.x * WARPS;
    const int block_last = min(block_first + WARPS, p.q_start + p.n) - 1;
    const int qi = block_first + warp - p.q_start;  // the warp's row in the block
    const bool active = block_first + warp <= block_last;
    const int i = active ? block_first + warp : block_last;
    const long long head_row = (long long)(seq * p.heads + head) * p.t;
    const T* kh = k + (long long)(seq * p.kv + kv_head) * p.t * p.d;
    const T* vh = v + (long long)(seq * p.kv + kv_head) * p.t * p.d;
    float* qw = q_s + warp * DMAX;
    for (int c = lane; c < p.d; c += 32) {
        qw[c] = to_f32(q[(head_row + i) * p.d + c]);
    }
    RowRule rule;
    rule.factor = p.rule == RULE_LOGN ? head_scale[head] * (float)log((double)(i + 1)) : 1.0f;
    rule.a = dist_a;
    rule.m = dist_m;
    rule.len = p.t;
    const int keys_from = first_key(p, block_first), keys_end = block_last + 1;
    const int my_first = first_key(p, i);

    // pass 1: the online softmax (with plain weights also the sums, bands and output)
    const bool final_weights = !p.affine;
    float o[DMAX / 32];
#pragma unroll
    for (int c = 0; c < DMAX / 32; c++) {
        o[c] = 0.0f;
    }
    LaneSums s;
    float m = -INFINITY, uncapped = -INFINITY;
    for (int k0 = keys_from; k0 < keys_end; k0 += KEY_TILE) {
        __syncthreads();
        load_tile<T, DMAX>(kh, vh, k_s, v_s, k0, min(KEY_TILE, keys_end - k0), p.d);
        __syncthreads();
        const int j = k0 + lane;
        const bool visible = j >= my_first && j <= i;
        const float raw = dot_key<DMAX>(qw, k_s, p.d);
        const float y = visible ? logit(p, rule, raw, i, j) : -INFINITY;
        const float tile_max = warp_max(y);
        if (tile_max == -INFINITY) {
            continue;  // no key of this tile visible to this warp's query (warp-uniform)
        }
        if (visible) {
            s.qk += raw;
            s.qk_abs += fabsf(raw);
            if (p.rule == RULE_SOFTCAP) {
                uncapped = fmaxf(uncapped, raw * p.scale);
            }
        }
        const float grown = fmaxf(m, tile_max);
        if (grown > m && m > -INFINITY) {
            const double shift = (double)m - (double)grown;
            const double c = exp(shift);
            s.rescale(c, shift, final_weights ? p.nbands : 0);
            if (final_weights) {
#pragma unroll
                for (int cc = 0; cc < DMAX / 32; cc++) {
                    o[cc] *= (float)c;
                }
            }
        }
        m = grown;
        const float e = visible ? expf(y - m) : 0.0f;
        s.sum += e;
        if (final_weights) {
            if (p.want_entropy && visible) {
                s.sum_ey += (double)(e * (y - m));
            }
            if (j == 0 && visible) {
                s.first += e;
            }
            if (visible) {
                s.add_bands(e, i, j, bands, p.nbands);
            }
            add_values<DMAX>(o, e, v_s);
        }
    }
    const double sum = warp_sum(s.sum);
    const double qk = warp_sum(s.qk), qk_abs = warp_sum(s.qk_abs);
    const float max_logit = warp_max(uncapped) > -INFINITY ? warp_max(uncapped) : m;

    // pass 2 (Affine-Scaled): the weights alpha p + beta from the final softmax
    float a_alpha = 0.0f, a_beta = 0.0f;
    if (p.affine) {
        a_alpha = alpha[head_row + i];
        const float diff = alpha_ma[head] - a_alpha;
        a_beta = p.beta_visible ? diff / (float)(i + 1) : diff * (float)(1.0 / (double)p.seq_len);
        const float inv = (float)(1.0 / sum);
        for (int k0 = keys_from; k0 < keys_end; k0 += KEY_TILE) {
            __syncthreads();
            load_tile<T, DMAX>(kh, vh, k_s, v_s, k0, min(KEY_TILE, keys_end - k0), p.d);
            __syncthreads();
            const int j = k0 + lane;
            const bool visible = j >= my_first && j <= i;
            const float raw = dot_key<DMAX>(qw, k_s, p.d);
            float w = 0.0f;
            if (visible) {
                const float y = logit(p, rule, raw, i, j);
                w = a_alpha * (expf(y - m) * inv) + a_beta;
                s.first += j == 0 ? (double)w : 0.0;
                s.mass += fmaxf(w, 0.0f);
                if (w >= FLT_MIN) {
                    s.w_ln_w += (double)(w * logf(w));
                }
                s.add_bands(w, i, j, bands, p.nbands);
            }
            s.weight_sum += w;
            add_values<DMAX>(o, w, v_s);
        }
    }

    // the row's line and output
    const long long row = (long long)(seq * p.heads + head) * p.n + qi;
    double weight, line_sum, entropy_t, entropy_x, sink_mass;
    if (p.affine) {
        weight = 1.0;
        line_sum = warp_sum(s.weight_sum);
        entropy_t = warp_sum(s.mass);
        entropy_x = warp_sum(s.w_ln_w);
        sink_mass = 0.0;
    } else {
        // shifted by max(m, sink) so that neither term overflows (the CPU tiles' finish_row)
        const float sink = p.has_sink ? sinks[head] : -INFINITY;
        const double top = p.has_sink ? (double)fmaxf(m, sink) : (double)m;
        const double c = exp((double)m - top);
        const double sink_e = p.has_sink ? exp((double)sink - top) : 0.0;
        const double inv = 1.0 / (sum * c + sink_e);
        weight = c * inv;
        line_sum = sum * weight;
        entropy_t = sum;
        entropy_x = warp_sum(s.sum_ey);
        sink_mass = sink_e * inv;
    }
    const double first = warp_sum(s.first) * (p.affine ? 1.0 : weight);
    double band_total[MAX_BANDS];
#pragma unroll
    for (int b = 0; b < MAX_BANDS; b++) {
        band_total[b] = b < p.nbands ? warp_sum(s.band[b]) : 0.0;
    }
    if (!active) {
        return;
    }
    T* orow = out + row * p.d;
#pragma unroll
    for (int c = 0; c < DMAX / 32; c++) {
        const int dim = lane + 32 * c;
        if (dim < p.d) {
            orow[dim] = from_f32<T>((float)((double)o[c] * weight));
        }
    }
    if (lane != 0) {
        return;
    }
    float* cell = table + row * p.width;
    if (!p.want_rows) {
        cell[0] = (float)sink_mass;
        return;
    }
    if (p.want_first) {
        cell[COL_FIRST] = (float)first;
    }
    if (p.want_sum) {
        cell[COL_SUM] = (float)line_sum;
    }
    if (p.want_entropy) {
        cell[COL_ENTROPY] =
            entropy_t > 0.0 ? (float)(log(entropy_t) - entropy_x / entropy_t) : __int_as_float(0x7fc00000);
    }
    cell[COL_SINK_MASS] = (float)sink_mass;
    cell[COL_QK_SUM] = (float)qk;
    cell[COL_QK_ABS_SUM] = (float)qk_abs;
    if (p.nbands > 0) {
        cell[COL_BANDS] = i > 0 ? (float)first : 0.0f;
        for (int b = 0; b < p.nbands; b++) {
            cell[COL_BANDS + 1 + b] = (float)(band_total[b] * (p.affine ? 1.0 : weight));
        }
    }
    if (p.max_logit_col >= 0) {
        cell[p.max_logit_col] = max_logit;
    }
}

#define FLASH_ROWS(NAME, T, DMAX)                                                              \
    extern "C" __global__ void __launch_bounds__(WARPS * 32)                                   \
        NAME(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,        \
             T* __restrict__ out, float* __restrict__ table, const float* __restrict__ sinks,  \
             const float* __restrict__ head_scale, const float* __restrict__ dist_a,           \
             const float* __restrict__ dist_m, const float* __restrict__ alpha,                \
             const float* __restrict__ alpha_ma, FlashParams p, BandTable bands) {             \
        flash_rows<T, DMAX>(q, k, v, out, table, sinks, head_scale, dist_a, dist_m, alpha,     \
                            alpha_ma, p, bands);                                               \
    }

FLASH_ROWS(flash_rows_f32_d64, float, 64)
FLASH_ROWS(flash_rows_bf16_d64, __nv_bfloat16, 64)
FLASH_ROWS(flash_rows_f16_d64, __half, 64)
FLASH_ROWS(flash_rows_f32_d128, float, 128)
FLASH_ROWS(flash_rows_bf16_d128, __nv_bfloat16, 128)
FLASH_ROWS(flash_rows_f16_d128, __half, 128)
FLASH_ROWS(flash_rows_f32_d256, float, 256)
FLASH_ROWS(flash_rows_bf16_d256, __nv_bfloat16, 256)
FLASH_ROWS(flash_rows_f16_d256, __half, 256)

// The tensor-core kernels (bf16 and f16, head dimensions 64 and 128).
#include "flash_mma.cuh"
