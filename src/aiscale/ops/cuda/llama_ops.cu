// The Llama family's memory-bound ops: rotary position embedding on Q and K in place in
// the fused QKV activations, SwiGLU over the fused gate/up activations, and the grouped-query
// expansion of K and V for the attention kernels that take one KV head per query head (with
// the matching sum of dK and dV over each group). RMSNorm shares LayerNorm's kernels
// (layernorm.cu). Each thread moves 16-byte packs (8 values in bf16 / fp16, 4 in fp32), math
// in fp32.
#include <algorithm>

#include "aiscale/ops/cuda/common.cuh"
#include "aiscale/ops/cuda/cuda_ops.cuh"

namespace aiscale::cuda {
namespace {

constexpr int kThreads = 256;

int grid_for(int64_t items) {
  return static_cast<int>(std::min<int64_t>(ceil_div(items, kThreads), int64_t(1) << 30));
}

// --------------------------------------------------------------------------------------
// rotary embedding

// One thread: one pack of pair indices [i, i + V) of one head of one row, i.e. a pack of
// the head's first half and the matching pack of its second half. Heads [0, heads) of a
// row: the query heads, then the key heads (they lie side by side at the row's start).
// cos_sin: (positions, half) cosines, then (positions, half) sines (fp32).
template <typename T>
__global__ void rotary_kernel(T* __restrict__ qkv, const float* __restrict__ cos_sin,
                              int64_t N, int T_, int heads, int D, int64_t row_stride,
                              int64_t table_rows, float sign) {
  constexpr int V = Pack<T>::N;
  const int half = D / 2, packs = half / V;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t per_row = int64_t(heads) * packs;
  if (i >= N * per_row) return;
  const int64_t row = i / per_row;
  const int r = static_cast<int>(i % per_row);
  const int h = r / packs, c = (r % packs) * V;
  const int pos = static_cast<int>(row % T_);
  T* x = qkv + row * row_stride + int64_t(h) * D + c;
  const float* cs = cos_sin + int64_t(pos) * half + c;
  const float* sn = cs + table_rows * half;
  const Pack<T> a = load_pack(x), b = load_pack(x + half);
  Pack<T> oa, ob;
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const float co = cs[k], si = sign * sn[k];
    const float x1 = a.get(k), x2 = b.get(k);
    oa.set(k, x1 * co - x2 * si);
    ob.set(k, x2 * co + x1 * si);
  }
  store_pack(x, oa);
  store_pack(x + half, ob);
}

// --------------------------------------------------------------------------------------
// SwiGLU

__device__ __forceinline__ float sigmoid_f(float x) { return 1.0f / (1.0f + __expf(-x)); }

// One thread per 16-byte pack of an (N, F) half of gate_up (N, 2F), which holds gate in
// [0, F) and up in [F, 2F) of each row: f(row, c, gate, up) with the pack at column c.
template <typename T, typename Fn>
__device__ __forceinline__ void swiglu_pack(const T* __restrict__ gate_up, int64_t N, int64_t F,
                                            Fn&& f) {
  constexpr int V = Pack<T>::N;
  const int64_t packs = F / V;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= N * packs) return;
  const int64_t row = i / packs, c = (i % packs) * V;
  const T* in = gate_up + row * 2 * F + c;
  f(row, c, load_pack(in), load_pack(in + F));
}

// out (N, F) = silu(gate) * up.
template <typename T>
__global__ void swiglu_forward_kernel(T* __restrict__ out, const T* __restrict__ gate_up,
                                      int64_t N, int64_t F) {
  swiglu_pack(gate_up, N, F, [&](int64_t row, int64_t c, const Pack<T>& g, const Pack<T>& u) {
    Pack<T> o;
#pragma unroll
    for (int k = 0; k < Pack<T>::N; ++k) {
      const float x = g.get(k);
      o.set(k, x * sigmoid_f(x) * u.get(k));
    }
    store_pack(out + row * F + c, o);
  });
}

// dgate_up (N, 2F) = (dh * up * silu'(gate), dh * silu(gate)); may not alias gate_up.
template <typename T>
__global__ void swiglu_backward_kernel(T* __restrict__ dgate_up, const T* __restrict__ dh,
                                       const T* __restrict__ gate_up, int64_t N, int64_t F) {
  swiglu_pack(gate_up, N, F, [&](int64_t row, int64_t c, const Pack<T>& g, const Pack<T>& u) {
    const Pack<T> d = load_pack(dh + row * F + c);
    Pack<T> dg, du;
#pragma unroll
    for (int k = 0; k < Pack<T>::N; ++k) {
      const float x = g.get(k), s = sigmoid_f(x), dy = d.get(k);
      du.set(k, dy * x * s);
      dg.set(k, dy * u.get(k) * s * (1.0f + x * (1.0f - s)));
    }
    T* out = dgate_up + row * 2 * F + c;
    store_pack(out, dg);
    store_pack(out + F, du);
  });
}

// --------------------------------------------------------------------------------------
// grouped-query attention: K and V expanded to one head per query head, and back

// full (N, 3 NH D) from qkv (N, (NH + 2 KVH) D): Q copied, query head h's K and V from KV
// head h / group. One thread per pack of the output row.
template <typename T>
__global__ void gqa_expand_kernel(T* __restrict__ full, const T* __restrict__ qkv, int64_t N,
                                  int NH, int KVH, int D) {
  constexpr int V = Pack<T>::N;
  const int C = NH * D, KC = KVH * D, group = NH / KVH;
  const int64_t packs = 3 * int64_t(C) / V;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= N * packs) return;
  const int64_t row = i / packs;
  const int col = static_cast<int>(i % packs) * V;
  int src;
  if (col < C) {
    src = col;
  } else {
    const int part = col < 2 * C ? 0 : 1, within = col - C - part * C;
    const int h = within / D, d = within % D;
    src = C + part * KC + (h / group) * D + d;
  }
  store_pack(full + row * 3 * C + col, load_pack(qkv + row * int64_t(C + 2 * KC) + src));
}

// dqkv (N, (NH + 2 KVH) D) from dfull (N, 3 NH D): dQ copied, dK and dV of a KV head summed
// over its group's query heads (fixed order). One thread per pack of the output row.
template <typename T>
__global__ void gqa_reduce_kernel(T* __restrict__ dqkv, const T* __restrict__ dfull, int64_t N,
                                  int NH, int KVH, int D) {
  constexpr int V = Pack<T>::N;
  const int C = NH * D, KC = KVH * D, group = NH / KVH, W = C + 2 * KC;
  const int64_t packs = W / V;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= N * packs) return;
  const int64_t row = i / packs;
  const int col = static_cast<int>(i % packs) * V;
  const T* src_row = dfull + row * 3 * C;
  T* dst = dqkv + row * W + col;
  if (col < C) {
    store_pack(dst, load_pack(src_row + col));
    return;
  }
  const int part = col < C + KC ? 0 : 1, within = col - C - part * KC;
  const int kh = within / D, d = within % D;
  float acc[V];
#pragma unroll
  for (int k = 0; k < V; ++k) acc[k] = 0.0f;
  for (int j = 0; j < group; ++j) {
    const Pack<T> p = load_pack(src_row + C + part * C + (kh * group + j) * D + d);
#pragma unroll
    for (int k = 0; k < V; ++k) acc[k] += p.get(k);
  }
  Pack<T> o;
#pragma unroll
  for (int k = 0; k < V; ++k) o.set(k, acc[k]);
  store_pack(dst, o);
}

template <typename T>
void check_packs(int64_t n, const char* what) {
  AISCALE_CUDA_REQUIRE(n % Pack<T>::N == 0, std::string(what) + ": width " + std::to_string(n) +
                                               " is not a multiple of " +
                                               std::to_string(Pack<T>::N));
}

// Launches the kernel that kernel_for(tag) names for dtype t, one thread for each pack of
// `elements` (the packed width, `width`, checked), the buffers of args cast to the
// dtype's element type.
template <typename KernelFor, typename... Args>
void launch_packed(DType t, int64_t width, const char* what, int64_t elements, cudaStream_t s,
                   KernelFor kernel_for, Args... args) {
  dispatch_dtype(t, [&](auto tag) {
    using X = decltype(tag);
    check_packs<X>(width, what);
    kernel_for(tag)<<<grid_for(elements / Pack<X>::N), kThreads, 0, s>>>(typed<X>(args)...);
    AISCALE_CUDA_LAUNCH_CHECK();
  });
}

void check_groups(int64_t NH, int64_t KVH) {
  AISCALE_CUDA_REQUIRE(KVH > 0 && NH % KVH == 0, "grouped-query attention: " +
                                                     std::to_string(NH) + " heads over " +
                                                     std::to_string(KVH) + " KV heads");
}

}  // namespace

void rotary_apply(DType t, void* qkv, const float* cos_sin, int64_t table_rows, int64_t N,
                  int64_t T, int64_t heads, int64_t D, int64_t row_stride, bool inverse,
                  cudaStream_t s) {
  if (N == 0 || heads == 0) return;
  AISCALE_CUDA_REQUIRE(T <= table_rows, "rotary embedding: " + std::to_string(T) +
                                            " positions, the table has " +
                                            std::to_string(table_rows));
  dispatch_dtype(t, [&](auto tag) {
    using X = decltype(tag);
    check_packs<X>(D / 2, "rotary embedding (half the head size)");
    const int64_t items = N * heads * (D / 2 / Pack<X>::N);
    rotary_kernel<X><<<grid_for(items), kThreads, 0, s>>>(
        static_cast<X*>(qkv), cos_sin, N, static_cast<int>(T), static_cast<int>(heads),
        static_cast<int>(D), row_stride, table_rows, inverse ? -1.0f : 1.0f);
    AISCALE_CUDA_LAUNCH_CHECK();
  });
}

void swiglu_forward(DType t, void* out, const void* gate_up, int64_t N, int64_t F,
                    cudaStream_t s) {
  if (N == 0) return;
  launch_packed(t, F, "SwiGLU", N * F, s,
                [](auto tag) { return swiglu_forward_kernel<decltype(tag)>; }, out, gate_up, N, F);
}

void swiglu_backward(DType t, void* dgate_up, const void* dh, const void* gate_up, int64_t N,
                     int64_t F, cudaStream_t s) {
  if (N == 0) return;
  launch_packed(t, F, "SwiGLU", N * F, s,
                [](auto tag) { return swiglu_backward_kernel<decltype(tag)>; }, dgate_up, dh,
                gate_up, N, F);
}

void gqa_expand(DType t, void* full, const void* qkv, int64_t N, int64_t NH, int64_t KVH,
                int64_t D, cudaStream_t s) {
  check_groups(NH, KVH);
  launch_packed(t, D, "grouped-query attention (head size)", N * 3 * NH * D, s,
                [](auto tag) { return gqa_expand_kernel<decltype(tag)>; }, full, qkv, N, int(NH),
                int(KVH), int(D));
}

void gqa_reduce(DType t, void* dqkv, const void* dfull, int64_t N, int64_t NH, int64_t KVH,
                int64_t D, cudaStream_t s) {
  check_groups(NH, KVH);
  launch_packed(t, D, "grouped-query attention (head size)", N * (NH + 2 * KVH) * D, s,
                [](auto tag) { return gqa_reduce_kernel<decltype(tag)>; }, dqkv, dfull, N,
                int(NH), int(KVH), int(D));
}

}  // namespace aiscale::cuda
