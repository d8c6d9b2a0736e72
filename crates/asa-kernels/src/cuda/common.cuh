// What the CUDA modules share (kernels.cu, flash.cu): the distance-band table passed by value
// (BandTable in rows.rs) and the conversions between the model's dtypes and f32.

#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "row_table.h"

// Distance ranges [lo[k], hi[k]) of one call, passed by value (BandTable in rows.rs).
struct BandTable {
    unsigned int lo[MAX_BANDS];
    unsigned int hi[MAX_BANDS];
};

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
