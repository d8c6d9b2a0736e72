// The attention kernels of the GPU path. A group of threads per attention row (one query
// of one head of one sequence: a warp for rows of up to 4,096 keys, a whole block for
// longer ones) reads the row's visible keys j <= i and writes the row's line of the row
// table (layout: src/probe/row_table.rs):
//   weight_rows_*   reductions of given f32 weights (any variant's effective weights);
//   qk_rows_*       sums of raw q.k;
//   softmax_rows_*  the causal softmax of raw q.k (scale, mask, optional sink logit)
//                   written in the model's dtype for the value product, and the row table
//                   of the f32 weights and of the raw q.k, in the same pass: the maps are
//                   never materialised in f32.
// Accumulation is in double and the thread layout is fixed, so results are the same on
// every run. Compiled to PTX by build.rs (feature `cuda`); launched from src/cuda/rows.rs
// and src/cuda/softmax.rs.

#include <cfloat>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

// Row-table columns (src/probe/row_table.rs).
#define COL_FIRST 0
#define COL_SUM 1
#define COL_ENTROPY 2
#define COL_SINK_MASS 3
#define COL_QK_SUM 4
#define COL_QK_ABS_SUM 5
#define COL_BANDS 6

// Distance ranges a row can split its mass into (more fall back to candle's reductions).
#define MAX_BANDS 16

// Distance ranges [lo[k], hi[k]) of one call, passed by value (BandTable in rows.rs).
struct BandTable {
    unsigned int lo[MAX_BANDS];
    unsigned int hi[MAX_BANDS];
};

// Threads of a block (rows.rs launches THREADS) and threads per row: G = 32 (one warp per
// row, reductions by shuffles alone: short rows) or G = THREADS (one block per row: long
// rows, where a warp alone could not keep enough loads in flight).
#define THREADS 256

// Sum of `v` over the G threads of a row, returned to each of them. `shared` holds one
// double per warp (used when G spans warps).
template <int G>
__device__ double group_sum(double v, double* shared) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, offset);
    }
    if (G == 32) {
        return v;
    }
    __syncthreads();  // the previous call's reads of `shared` are done
    if ((threadIdx.x & 31) == 0) {
        shared[threadIdx.x >> 5] = v;
    }
    __syncthreads();
    double total = 0.0;
    for (int w = 0; w < G / 32; w++) {
        total += shared[w];
    }
    return total;
}

// Maximum of `v` over the G threads of a row, returned to each of them.
template <int G>
__device__ float group_max(float v, double* shared) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    }
    if (G == 32) {
        return v;
    }
    __syncthreads();
    if ((threadIdx.x & 31) == 0) {
        shared[threadIdx.x >> 5] = v;
    }
    __syncthreads();
    float m = -INFINITY;
    for (int w = 0; w < G / 32; w++) {
        m = fmaxf(m, (float)shared[w]);
    }
    return m;
}

// This thread's row (of `rows`) and its rank among the row's G threads; row < 0 past the
// last row (a whole warp, so shuffles stay complete).
template <int G>
__device__ void row_of_thread(int rows, long long* row, int* rank) {
    const long long r = (long long)blockIdx.x * (THREADS / G) + threadIdx.x / G;
    *row = r < rows ? r : -1;
    *rank = threadIdx.x % G;
}

// One thread's share of a row's weight reductions: weight sum, entropy terms, band masses.
struct RowAcc {
    double sum, mass, q_ln_q;
    double band[MAX_BANDS];

    __device__ RowAcc() : sum(0.0), mass(0.0), q_ln_q(0.0) {
#pragma unroll
        for (int k = 0; k < MAX_BANDS; k++) {
            band[k] = 0.0;
        }
    }

    // Adds weight `v` of key j of query i.
    __device__ void add(float v, int i, int j, int want_entropy, const BandTable& bands,
                        int nbands) {
        sum += v;
        if (want_entropy) {
            mass += fmaxf(v, 0.0f);
            // q ln q -> 0 as q -> 0: weights below the normal range contribute nothing
            if (v >= FLT_MIN) {
                q_ln_q += (double)v * (double)logf(v);
            }
        }
        if (nbands > 0 && (i == 0 || j > 0)) {
            const unsigned int t = (unsigned int)(i - j);
#pragma unroll
            for (int k = 0; k < MAX_BANDS; k++) {
                if (k < nbands && t >= bands.lo[k] && t < bands.hi[k]) {
                    band[k] += v;
                }
            }
        }
    }

    // Sums the row's shares and writes them (rank 0) into the row's `cell`, with a_i0 =
    // `first`.
    template <int G>
    __device__ void write(float* cell, float first, int i, int want_entropy, int nbands,
                          int rank, double* shared) {
        const double total = group_sum<G>(sum, shared);
        if (rank == 0) {
            cell[COL_FIRST] = first;
            cell[COL_SUM] = (float)total;
        }
        if (want_entropy) {
            const double m = group_sum<G>(mass, shared);
            const double h = group_sum<G>(q_ln_q, shared);
            if (rank == 0) {
                cell[COL_ENTROPY] = m > 0.0 ? (float)(log(m) - h / m) : __int_as_float(0x7fc00000);
            }
        }
        if (nbands > 0 && rank == 0) {
            cell[COL_BANDS] = i > 0 ? first : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < MAX_BANDS; k++) {
            if (k < nbands) {
                const double b = group_sum<G>(band[k], shared);
                if (rank == 0) {
                    cell[COL_BANDS + 1 + k] = (float)b;
                }
            }
        }
    }
};

// Rows of causal weights `w` [rows, keys] (rows = batch * heads * n, queries q_start ..
// q_start + n): their row table `out` [rows, width] (sink and q.k columns left as they are).
template <int G>
__device__ void weight_rows(const float* __restrict__ w, float* __restrict__ out, int rows,
                            int n, int keys, int q_start, int width, int want_entropy,
                            const BandTable& bands, int nbands) {
    __shared__ double shared[THREADS / 32];
    long long row;
    int rank;
    row_of_thread<G>(rows, &row, &rank);
    if (row < 0) {
        return;
    }
    const int i = q_start + (int)(row % n);
    const float* x = w + row * (long long)keys;
    RowAcc acc;
    for (int j = rank; j <= i; j += G) {
        acc.add(x[j], i, j, want_entropy, bands, nbands);
    }
    acc.write<G>(out + row * (long long)width, x[0], i, want_entropy, nbands, rank, shared);
}

#define WEIGHT_ROWS(NAME, G)                                                                \
    extern "C" __global__ void NAME(const float* __restrict__ w, float* __restrict__ out,   \
                                    int rows, int n, int keys, int q_start, int width,      \
                                    int want_entropy, BandTable bands, int nbands) {        \
        weight_rows<G>(w, out, rows, n, keys, q_start, width, want_entropy, bands, nbands); \
    }

WEIGHT_ROWS(weight_rows_f32_g32, 32)
WEIGHT_ROWS(weight_rows_f32_g256, THREADS)

// Rows of raw causal q.k `raw` [rows, keys]: writes `out` [rows, 2] with the sum and the
// absolute sum of each row's visible entries j <= i.
template <int G>
__device__ void qk_rows(const float* __restrict__ raw, double* __restrict__ out, int rows,
                        int n, int keys, int q_start) {
    __shared__ double shared[THREADS / 32];
    long long row;
    int rank;
    row_of_thread<G>(rows, &row, &rank);
    if (row < 0) {
        return;
    }
    const int i = q_start + (int)(row % n);
    const float* x = raw + row * (long long)keys;
    double sum = 0.0, abs_sum = 0.0;
    for (int j = rank; j <= i; j += G) {
        const float v = x[j];
        sum += v;
        abs_sum += fabsf(v);
    }
    sum = group_sum<G>(sum, shared);
    abs_sum = group_sum<G>(abs_sum, shared);
    if (rank == 0) {
        out[2 * row] = sum;
        out[2 * row + 1] = abs_sum;
    }
}

#define QK_ROWS(NAME, G)                                                                  \
    extern "C" __global__ void NAME(const float* __restrict__ raw, double* __restrict__ out, \
                                    int rows, int n, int keys, int q_start) {              \
        qk_rows<G>(raw, out, rows, n, keys, q_start);                                      \
    }

QK_ROWS(qk_rows_f32_g32, 32)
QK_ROWS(qk_rows_f32_g256, THREADS)

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
    return __float2bfloat16(v);
}
template <> __device__ __forceinline__ __half from_f32<__half>(float v) {
    return __float2half(v);
}

// Causal softmax of raw q.k `raw` [rows, keys] (rows = batch * heads * n, row r is query
// q_start + r % n of head (r / n) % heads): p_ij = exp(scale q.k_ij - m) / Z over the
// visible keys j <= i, Z including exp(sinks[head] - m) when has_sink (m the maximum of the
// scaled logits and the sink logit). Writes p to `weights` [rows, keys] in the input's dtype
// (0 for invisible keys) and the row table `out` [rows, width] of the f32 weights, the sink
// mass and the raw q.k.
template <typename T, int G>
__device__ void softmax_rows(const T* __restrict__ raw, T* __restrict__ weights,
                             float* __restrict__ out, int rows, int n, int heads, int keys,
                             int q_start, float scale, const float* __restrict__ sinks,
                             int has_sink, int width, int want_entropy, const BandTable& bands,
                             int nbands) {
    __shared__ double shared[THREADS / 32];
    long long row;
    int rank;
    row_of_thread<G>(rows, &row, &rank);
    if (row < 0) {
        return;
    }
    const int i = q_start + (int)(row % n);
    const int head = (int)((row / n) % heads);
    const T* x = raw + row * (long long)keys;
    T* p = weights + row * (long long)keys;
    // pass 1: the largest scaled logit, and the raw q.k sums
    float m = -INFINITY;
    double qk = 0.0, qk_abs = 0.0;
    for (int j = rank; j <= i; j += G) {
        const float r = to_f32(x[j]);
        qk += r;
        qk_abs += fabsf(r);
        m = fmaxf(m, r * scale);
    }
    m = group_max<G>(m, shared);
    const float sink = has_sink ? sinks[head] : -INFINITY;
    if (has_sink) {
        m = fmaxf(m, sink);
    }
    // pass 2: the normaliser
    double z = 0.0;
    for (int j = rank; j <= i; j += G) {
        z += expf(to_f32(x[j]) * scale - m);
    }
    const double sink_exp = has_sink ? (double)expf(sink - m) : 0.0;
    z = group_sum<G>(z, shared) + sink_exp;
    const float inv = (float)(1.0 / z);
    // pass 3: the weights, written and reduced
    RowAcc acc;
    for (int j = rank; j < keys; j += G) {
        if (j <= i) {
            const float v = expf(to_f32(x[j]) * scale - m) * inv;
            p[j] = from_f32<T>(v);
            acc.add(v, i, j, want_entropy, bands, nbands);
        } else {
            p[j] = from_f32<T>(0.0f);
        }
    }
    const float first = expf(to_f32(x[0]) * scale - m) * inv;
    float* cell = out + row * (long long)width;
    acc.write<G>(cell, first, i, want_entropy, nbands, rank, shared);
    qk = group_sum<G>(qk, shared);
    qk_abs = group_sum<G>(qk_abs, shared);
    if (rank == 0) {
        cell[COL_SINK_MASS] = (float)(sink_exp * (double)inv);
        cell[COL_QK_SUM] = (float)qk;
        cell[COL_QK_ABS_SUM] = (float)qk_abs;
    }
}

#define SOFTMAX_ROWS(NAME, T, G)                                                               \
    extern "C" __global__ void NAME(const T* __restrict__ raw, T* __restrict__ weights,        \
                                    float* __restrict__ out, int rows, int n, int heads,       \
                                    int keys, int q_start, float scale,                        \
                                    const float* __restrict__ sinks, int has_sink, int width,  \
                                    int want_entropy, BandTable bands, int nbands) {           \
        softmax_rows<T, G>(raw, weights, out, rows, n, heads, keys, q_start, scale, sinks,    \
                           has_sink, width, want_entropy, bands, nbands);                      \
    }

SOFTMAX_ROWS(softmax_rows_f32_g32, float, 32)
SOFTMAX_ROWS(softmax_rows_bf16_g32, __nv_bfloat16, 32)
SOFTMAX_ROWS(softmax_rows_f16_g32, __half, 32)
SOFTMAX_ROWS(softmax_rows_f32_g256, float, THREADS)
SOFTMAX_ROWS(softmax_rows_bf16_g256, __nv_bfloat16, THREADS)
SOFTMAX_ROWS(softmax_rows_f16_g256, __half, THREADS)

// Rows of next-token logits `logits` [rows, vocab] (in the model's dtype, read as f32) with
// their target ids `targets` [rows]: writes `out` [rows], each row's negative
// log-likelihood log sum_v exp(x_v) - x_target. One block per row.
template <typename T>
__device__ void nll_rows(const T* __restrict__ logits, const unsigned int* __restrict__ targets,
                         float* __restrict__ out, int rows, int vocab) {
    __shared__ double shared[THREADS / 32];
    long long row;
    int rank;
    row_of_thread<THREADS>(rows, &row, &rank);
    if (row < 0) {
        return;
    }
    const T* x = logits + row * (long long)vocab;
    float m = -INFINITY;
    for (int v = rank; v < vocab; v += THREADS) {
        m = fmaxf(m, to_f32(x[v]));
    }
    m = group_max<THREADS>(m, shared);
    double z = 0.0;
    for (int v = rank; v < vocab; v += THREADS) {
        z += expf(to_f32(x[v]) - m);
    }
    z = group_sum<THREADS>(z, shared);
    if (rank == 0) {
        out[row] = (float)(log(z) + (double)m - (double)to_f32(x[targets[row]]));
    }
}

#define NLL_ROWS(NAME, T)                                                                      \
    extern "C" __global__ void NAME(const T* __restrict__ logits,                              \
                                    const unsigned int* __restrict__ targets,                  \
                                    float* __restrict__ out, int rows, int vocab) {            \
        nll_rows<T>(logits, targets, out, rows, vocab);                                        \
    }

NLL_ROWS(nll_rows_f32, float)
NLL_ROWS(nll_rows_bf16, __nv_bfloat16)
NLL_ROWS(nll_rows_f16, __half)
