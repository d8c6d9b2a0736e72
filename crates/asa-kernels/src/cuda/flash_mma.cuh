// The tensor-core variant of flash.cu's kernel for bf16 and f16 inputs and head dimensions
// 64 and 128 (included by flash.cu, whose FlashParams, logit rules and bands it shares):
// the same row table and output, with q.k and p.v on the tensor cores
// (mma.sync m16n8k16, f32 accumulation).
//
// A thread block takes MMA_WARPS x 16 consecutive queries of one (sequence, head); each warp
// owns 16 of them. Keys are visited in tiles of MMA_KEYS: K (row-major, rows padded) and V
// (transposed, so that each B fragment is one 32-bit load) are copied to shared memory once
// for the block. A warp's q.k tile is the 16 x MMA_KEYS accumulator of its mma's: lane l holds
// rows g = l / 4 and g + 8 and, in each 8-key slice, keys 2 (l % 4) and 2 (l % 4) + 1. Row
// maxima and sums take the four lanes of a row (shuffles by 1 and 2). The weights, rounded
// to the input's 16-bit type, are the A operand of p.v as they lie (FlashAttention-2's
// layout): the sums and the row table are made from the f32 weights, only the output sees
// the rounding. Each lane keeps its own partial sums in f64; the four lanes of a row add
// theirs at the end, and band sums go through shared memory, each row's owned by the row's
// first lane.

#define MMA_WARPS 4
#define MMA_KEYS 64
#define MMA_ROWS (MMA_WARPS * 16)

template <typename T> struct Mma;

template <> struct Mma<__nv_bfloat16> {
    __device__ __forceinline__ static void run(float (&c)[4], const unsigned (&a)[4],
                                               unsigned b0, unsigned b1) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
            "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    __device__ __forceinline__ static unsigned pack(float lo, float hi) {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<unsigned*>(&v);
    }
};

template <> struct Mma<__half> {
    __device__ __forceinline__ static void run(float (&c)[4], const unsigned (&a)[4],
                                               unsigned b0, unsigned b1) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
            "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    __device__ __forceinline__ static unsigned pack(float lo, float hi) {
        __half2 v = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<unsigned*>(&v);
    }
};

// The two values of the 16-bit array `x` at `at` and `at + 1` as one 32-bit word.
template <typename T>
__device__ __forceinline__ unsigned pair(const T* x, long long at) {
    return *reinterpret_cast<const unsigned*>(x + at);
}

// One row's share (one lane's keys) of the running sums.
struct MmaRowSums {
    float m, uncapped;
    double sum, sum_ey, first, qk, qk_abs;
    double weight_sum, mass, w_ln_w;

    __device__ MmaRowSums()
        : m(-INFINITY), uncapped(-INFINITY), sum(0), sum_ey(0), first(0), qk(0), qk_abs(0),
          weight_sum(0), mass(0), w_ln_w(0) {}
};

// Sum of `v` over the four lanes of a row.
__device__ __forceinline__ double row_sum(double v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    v += __shfl_xor_sync(0xffffffffu, v, 2);
    return v;
}

__device__ __forceinline__ float row_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
    return v;
}

// Adds each row's band sums of this tile's weights `w` (the lane's 2 x (MMA_KEYS / 4)
// values) to the shared per-row band sums `band_s` (owned by the row's first lane).
__device__ __forceinline__ void add_tile_bands(const float (&w)[MMA_KEYS / 8][4], const int (&i)[2],
                                               int k0, const BandTable& bands, int nbands,
                                               double* band_s, const int (&local)[2]) {
    const int tg = threadIdx.x & 3;
    for (int b = 0; b < nbands; b++) {
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float part = 0.0f;
#pragma unroll
            for (int nt = 0; nt < MMA_KEYS / 8; nt++) {
#pragma unroll
                for (int c = 0; c < 2; c++) {
                    const int j = k0 + nt * 8 + tg * 2 + c;
                    const unsigned dist = (unsigned)(i[r] - j);
                    const bool in = (i[r] == 0 || j > 0) && j <= i[r] && dist >= bands.lo[b] &&
                                    dist < bands.hi[b];
                    part += in ? w[nt][2 * r + c] : 0.0f;
                }
            }
            const double total = row_sum((double)part);
            if (tg == 0) {
                band_s[local[r] * MAX_BANDS + b] += total;
            }
        }
    }
}

template <typename T, int D>
__device__ void flash_mma_rows(const T* __restrict__ q, const T* __restrict__ k,
                               const T* __restrict__ v, T* __restrict__ out,
                               float* __restrict__ table, const float* __restrict__ sinks,
                               const float* __restrict__ head_scale,
                               const float* __restrict__ dist_a,
                               const float* __restrict__ dist_m,
                               const float* __restrict__ alpha,
                               const float* __restrict__ alpha_ma, const FlashParams& p,
                               const BandTable& bands) {
    constexpr int KS = D + 8;            // K row stride (halves): conflict-free fragments
    constexpr int VS = MMA_KEYS + 8;     // transposed V row stride
    __shared__ __align__(16) T k_s[MMA_KEYS * KS];
    __shared__ __align__(16) T v_t[D * VS];
    __shared__ double band_s[MMA_ROWS * MAX_BANDS];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, tg = lane & 3;
    const int seq = blockIdx.z, head = blockIdx.y;
    const int kv_head = head / (p.heads / p.kv);
    const int block_first = p.q_start + blockIdx.x * MMA_ROWS;
    const int block_last = min(block_first + MMA_ROWS, p.q_start + p.n) - 1;
    const long long head_row = (long long)(seq * p.heads + head) * p.t;
    const T* kh = k + (long long)(seq * p.kv + kv_head) * p.t * D;
    const T* vh = v + (long long)(seq * p.kv + kv_head) * p.t * D;

    // the lane's two rows: local index in the block, query (clamped to the block's last)
    int local[2], i[2];
    bool active[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        local[r] = warp * 16 + g + 8 * r;
        active[r] = block_first + local[r] <= block_last;
        i[r] = active[r] ? block_first + local[r] : block_last;
    }
    for (int idx = threadIdx.x; idx < MMA_ROWS * MAX_BANDS; idx += blockDim.x) {
        band_s[idx] = 0.0;
    }
    // the warp's q rows as A fragments, one per 16 dimensions
    unsigned qa[D / 16][4];
#pragma unroll
    for (int ks = 0; ks < D / 16; ks++) {
        const int col = ks * 16 + tg * 2;
        qa[ks][0] = pair(q, (head_row + i[0]) * D + col);
        qa[ks][1] = pair(q, (head_row + i[1]) * D + col);
        qa[ks][2] = pair(q, (head_row + i[0]) * D + col + 8);
        qa[ks][3] = pair(q, (head_row + i[1]) * D + col + 8);
    }
    RowRule rule[2];
    MmaRowSums s[2];
    int my_first[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        rule[r].factor =
            p.rule == RULE_LOGN ? head_scale[head] * (float)log((double)(i[r] + 1)) : 1.0f;
        rule[r].a = dist_a;
        rule[r].m = dist_m;
        rule[r].len = p.t;
        my_first[r] = first_key(p, i[r]);
    }
    const int warp_first = first_key(p, min(block_first + warp * 16, block_last));
    const int warp_last = min(block_first + warp * 16 + 15, block_last);
    const int keys_from = first_key(p, block_first), keys_end = block_last + 1;
    float o[D / 8][4];
#pragma unroll
    for (int nt = 0; nt < D / 8; nt++) {
#pragma unroll
        for (int c = 0; c < 4; c++) {
            o[nt][c] = 0.0f;
        }
    }
    float a_alpha[2] = {0.0f, 0.0f}, a_beta[2] = {0.0f, 0.0f}, inv[2] = {0.0f, 0.0f};
    const bool final_weights = !p.affine;
    // pass 0: the online softmax (with plain weights also the sums, bands and output);
    // pass 1 (Affine-Scaled): the weights alpha p + beta from the final softmax
    for (int pass = 0; pass < (p.affine ? 2 : 1); pass++) {
        const bool weights_pass = pass == 1 || final_weights;
        for (int k0 = keys_from; k0 < keys_end; k0 += MMA_KEYS) {
            __syncthreads();
            // K rows and V transposed into shared memory (zeros past the keys)
            for (int idx = threadIdx.x; idx < MMA_KEYS * (D / 8); idx += blockDim.x) {
                const int key = idx / (D / 8), c8 = (idx - key * (D / 8)) * 8;
                uint4 val = make_uint4(0, 0, 0, 0);
                if (k0 + key < keys_end) {
                    val = *reinterpret_cast<const uint4*>(kh + (long long)(k0 + key) * D + c8);
                }
                *reinterpret_cast<uint4*>(k_s + key * KS + c8) = val;
            }
            for (int idx = threadIdx.x; idx < (MMA_KEYS / 2) * D; idx += blockDim.x) {
                const int kp = idx / D, dim = idx - kp * D;
                const int key = k0 + 2 * kp;
                const T zero = from_f32<T>(0.0f);
                const T lo = key < keys_end ? vh[(long long)key * D + dim] : zero;
                const T hi = key + 1 < keys_end ? vh[(long long)(key + 1) * D + dim] : zero;
                v_t[dim * VS + 2 * kp] = lo;
                v_t[dim * VS + 2 * kp + 1] = hi;
            }
            __syncthreads();
            // no key of the tile visible to any of the warp's queries (warp-uniform)
            if (k0 > warp_last || k0 + MMA_KEYS <= warp_first) {
                continue;
            }
            // raw q.k of the tile
            float x[MMA_KEYS / 8][4];
#pragma unroll
            for (int nt = 0; nt < MMA_KEYS / 8; nt++) {
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    x[nt][c] = 0.0f;
                }
#pragma unroll
                for (int ks = 0; ks < D / 16; ks++) {
                    const T* kr = k_s + (nt * 8 + g) * KS + ks * 16 + tg * 2;
                    Mma<T>::run(x[nt], qa[ks], pair(kr, 0), pair(kr, 8));
                }
            }
            // the weights (e, or alpha p + beta), in place of x
#pragma unroll
            for (int r = 0; r < 2; r++) {
                float tile_max = -INFINITY;
#pragma unroll
                for (int nt = 0; nt < MMA_KEYS / 8; nt++) {
#pragma unroll
                    for (int c = 0; c < 2; c++) {
                        const int j = k0 + nt * 8 + tg * 2 + c;
                        const bool visible = j >= my_first[r] && j <= i[r];
                        const float raw = x[nt][2 * r + c];
                        const float y = visible ? logit(p, rule[r], raw, i[r], j) : -INFINITY;
                        if (visible && pass == 0) {
                            s[r].qk += raw;
                            s[r].qk_abs += fabsf(raw);
                            if (p.rule == RULE_SOFTCAP) {
                                s[r].uncapped = fmaxf(s[r].uncapped, raw * p.scale);
                            }
                        }
                        x[nt][2 * r + c] = y;
                        tile_max = fmaxf(tile_max, y);
                    }
                }
                tile_max = row_max(tile_max);
                if (pass == 0 && tile_max > s[r].m) {
                    if (s[r].m > -INFINITY) {
                        const double shift = (double)s[r].m - (double)tile_max;
                        const double cf = exp(shift);
                        s[r].sum_ey = cf * (s[r].sum_ey + s[r].sum * shift);
                        s[r].sum *= cf;
                        s[r].first *= cf;
                        if (final_weights) {
#pragma unroll
                            for (int nt = 0; nt < D / 8; nt++) {
                                o[nt][2 * r] *= (float)cf;
                                o[nt][2 * r + 1] *= (float)cf;
                            }
                            if (tg == 0) {
                                for (int b = 0; b < p.nbands; b++) {
                                    band_s[local[r] * MAX_BANDS + b] *= cf;
                                }
                            }
                        }
                    }
                    s[r].m = tile_max;
                }
                const float m = s[r].m;
#pragma unroll
                for (int nt = 0; nt < MMA_KEYS / 8; nt++) {
#pragma unroll
                    for (int c = 0; c < 2; c++) {
                        const float y = x[nt][2 * r + c];
                        const int j = k0 + nt * 8 + tg * 2 + c;
                        float w = 0.0f;
                        if (y > -INFINITY) {
                            const float e = expf(y - m);
                            if (pass == 0) {
                                s[r].sum += e;
                                if (final_weights && p.want_entropy) {
                                    s[r].sum_ey += (double)(e * (y - m));
                                }
                            }
                            if (final_weights) {
                                w = e;
                            } else if (pass == 1) {
                                w = a_alpha[r] * (e * inv[r]) + a_beta[r];
                                s[r].weight_sum += w;
                                s[r].mass += fmaxf(w, 0.0f);
                                if (w >= FLT_MIN) {
                                    s[r].w_ln_w += (double)(w * logf(w));
                                }
                            }
                            if (j == 0 && weights_pass) {
                                s[r].first += w;
                            }
                        }
                        x[nt][2 * r + c] = w;
                    }
                }
            }
            if (!weights_pass) {
                continue;
            }
            if (p.nbands > 0) {
                add_tile_bands(x, i, k0, bands, p.nbands, band_s, local);
            }
            // output += weights x V, 16 keys per step
#pragma unroll
            for (int kk = 0; kk < MMA_KEYS / 16; kk++) {
                unsigned pa[4];
                pa[0] = Mma<T>::pack(x[2 * kk][0], x[2 * kk][1]);
                pa[1] = Mma<T>::pack(x[2 * kk][2], x[2 * kk][3]);
                pa[2] = Mma<T>::pack(x[2 * kk + 1][0], x[2 * kk + 1][1]);
                pa[3] = Mma<T>::pack(x[2 * kk + 1][2], x[2 * kk + 1][3]);
#pragma unroll
                for (int nt = 0; nt < D / 8; nt++) {
                    const T* vr = v_t + (nt * 8 + g) * VS + kk * 16 + tg * 2;
                    Mma<T>::run(o[nt], pa, pair(vr, 0), pair(vr, 8));
                }
            }
        }
        if (pass == 0 && p.affine) {
            // the final softmax of each row, and its alpha and beta
#pragma unroll
            for (int r = 0; r < 2; r++) {
                inv[r] = (float)(1.0 / row_sum(s[r].sum));
                a_alpha[r] = alpha[head_row + i[r]];
                const float diff = alpha_ma[head] - a_alpha[r];
                a_beta[r] = p.beta_visible ? diff / (float)(i[r] + 1)
                                           : diff * (float)(1.0 / (double)p.seq_len);
            }
        }
    }
    __syncthreads();  // every band sum is in

    // each row's line and output
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const double sum = row_sum(s[r].sum);
        const double qk = row_sum(s[r].qk), qk_abs = row_sum(s[r].qk_abs);
        const float uncapped = row_max(s[r].uncapped);
        const float m = s[r].m;
        const float max_logit = uncapped > -INFINITY ? uncapped : m;
        double weight, line_sum, entropy_t, entropy_x, sink_mass;
        if (p.affine) {
            weight = 1.0;
            line_sum = row_sum(s[r].weight_sum);
            entropy_t = row_sum(s[r].mass);
            entropy_x = row_sum(s[r].w_ln_w);
            sink_mass = 0.0;
        } else {
            const float sink = p.has_sink ? sinks[head] : -INFINITY;
            const double top = p.has_sink ? (double)fmaxf(m, sink) : (double)m;
            const double c = exp((double)m - top);
            const double sink_e = p.has_sink ? exp((double)sink - top) : 0.0;
            const double inv_z = 1.0 / (sum * c + sink_e);
            weight = c * inv_z;
            line_sum = sum * weight;
            entropy_t = sum;
            entropy_x = row_sum(s[r].sum_ey);
            sink_mass = sink_e * inv_z;
        }
        const double first = row_sum(s[r].first) * weight;
        if (!active[r]) {
            continue;
        }
        const long long row = (long long)(seq * p.heads + head) * p.n + (i[r] - p.q_start);
        T* orow = out + row * D;
#pragma unroll
        for (int nt = 0; nt < D / 8; nt++) {
            const float lo = (float)((double)o[nt][2 * r] * weight);
            const float hi = (float)((double)o[nt][2 * r + 1] * weight);
            *reinterpret_cast<unsigned*>(orow + nt * 8 + tg * 2) = Mma<T>::pack(lo, hi);
        }
        if (tg != 0) {
            continue;
        }
        float* cell = table + row * p.width;
        if (!p.want_rows) {
            cell[0] = (float)sink_mass;
            continue;
        }
        if (p.want_first) {
            cell[COL_FIRST] = (float)first;
        }
        if (p.want_sum) {
            cell[COL_SUM] = (float)line_sum;
        }
        if (p.want_entropy) {
            cell[COL_ENTROPY] = entropy_t > 0.0 ? (float)(log(entropy_t) - entropy_x / entropy_t)
                                                : __int_as_float(0x7fc00000);
        }
        cell[COL_SINK_MASS] = (float)sink_mass;
        cell[COL_QK_SUM] = (float)qk;
        cell[COL_QK_ABS_SUM] = (float)qk_abs;
        if (p.nbands > 0) {
            cell[COL_BANDS] = i[r] > 0 ? (float)first : 0.0f;
            for (int b = 0; b < p.nbands; b++) {
                cell[COL_BANDS + 1 + b] = (float)(band_s[local[r] * MAX_BANDS + b] * weight);
            }
        }
        if (p.max_logit_col >= 0) {
            cell[p.max_logit_col] = max_logit;
        }
    }
}

#define FLASH_MMA_ROWS(NAME, T, D)                                                             \
    extern "C" __global__ void __launch_bounds__(MMA_WARPS * 32)                               \
        NAME(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,        \
             T* __restrict__ out, float* __restrict__ table, const float* __restrict__ sinks,  \
             const float* __restrict__ head_scale, const float* __restrict__ dist_a,           \
             const float* __restrict__ dist_m, const float* __restrict__ alpha,                \
             const float* __restrict__ alpha_ma, FlashParams p, BandTable bands) {             \
        flash_mma_rows<T, D>(q, k, v, out, table, sinks, head_scale, dist_a, dist_m, alpha,    \
                             alpha_ma, p, bands);                                              \
    }

FLASH_MMA_ROWS(flash_mma_bf16_d64, __nv_bfloat16, 64)
FLASH_MMA_ROWS(flash_mma_f16_d64, __half, 64)
FLASH_MMA_ROWS(flash_mma_bf16_d128, __nv_bfloat16, 128)
FLASH_MMA_ROWS(flash_mma_f16_d128, __half, 128)
