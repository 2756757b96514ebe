// Embedding, GELU, residual, bias gradients, casts: the memory-bound small ops. Each
// thread moves 16-byte packs; sizes must be multiples of a pack (8 values in bf16/fp16,
// 4 in fp32), which GPT widths are (the model checks C % 8 == 0).
#include <algorithm>

#include "aiscale/ops/cuda/cast_kernels.cuh"
#include "aiscale/ops/cuda/common.cuh"
#include "aiscale/ops/cuda/cuda_ops.cuh"

namespace aiscale::cuda {

int sm_count() {
  int device = 0, n = 0;
  AISCALE_CUDA_CHECK(cudaGetDevice(&device));
  AISCALE_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
  return n;
}

namespace {

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

__device__ __forceinline__ float gelu_f(float x) {
  const float u = kGeluScale * (x + kGeluCubic * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}
__device__ __forceinline__ float gelu_grad_f(float x) {
  const float u = kGeluScale * (x + kGeluCubic * x * x * x);
  const float th = tanhf(u);
  const float du = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
  return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
}

int grid_for(int64_t items, int threads) {
  const int64_t blocks = ceil_div(items, threads);
  return static_cast<int>(std::min<int64_t>(blocks, int64_t(1) << 30));
}

template <typename T>
void check_packed(int64_t n, const char* what) {
  AISCALE_CUDA_REQUIRE(n % Pack<T>::N == 0, std::string(what) + ": size " + std::to_string(n) +
                                               " is not a multiple of " + std::to_string(Pack<T>::N));
}

// --------------------------------------------------------------------------------------
// embedding

template <typename T>
__global__ void embedding_forward_kernel(T* out, const int32_t* tokens, const T* wte,
                                         const T* wpe, int64_t N, int T_, int C,
                                         int64_t vocab_begin, int64_t vocab_rows) {
  constexpr int V = Pack<T>::N;
  const int64_t packs_per_row = C / V;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= N * packs_per_row) return;
  const int64_t row = i / packs_per_row;
  const int c = static_cast<int>(i % packs_per_row) * V;
  const int t = static_cast<int>(row % T_);
  const int64_t token = int64_t(tokens[row]) - vocab_begin;
  const bool held = token >= 0 && token < vocab_rows;
  Pack<T> a, b;
  if (held) a = load_pack(wte + token * C + c);
  if (wpe) b = load_pack(wpe + int64_t(t) * C + c);
  Pack<T> o;
#pragma unroll
  for (int k = 0; k < V; ++k)
    o.set(k, (held ? a.get(k) : 0.0f) + (wpe ? b.get(k) : 0.0f));
  store_pack(out + row * C + c, o);
}

// One block per distinct token: sums its rows of dout in position order (deterministic).
template <typename T>
__global__ void embedding_backward_wte_kernel(float* dwte, const T* dout,
                                              const int32_t* unique_tokens,
                                              const int32_t* offsets, const int32_t* positions,
                                              int C) {
  constexpr int V = Pack<T>::N;
  const int u = blockIdx.x;
  const int token = unique_tokens[u];
  const int begin = offsets[u], end = offsets[u + 1];
  for (int c = threadIdx.x * V; c < C; c += blockDim.x * V) {
    float acc[V];
#pragma unroll
    for (int k = 0; k < V; ++k) acc[k] = 0.0f;
    for (int j = begin; j < end; ++j) {
      const Pack<T> d = load_pack(dout + int64_t(positions[j]) * C + c);
#pragma unroll
      for (int k = 0; k < V; ++k) acc[k] += d.get(k);
    }
    float* dst = dwte + int64_t(token) * C + c;
#pragma unroll
    for (int k = 0; k < V; ++k) dst[k] += acc[k];
  }
}

// One thread per (t, pack of channels): sums over the batch.
template <typename T>
__global__ void embedding_backward_wpe_kernel(float* dwpe, const T* dout, int B, int T_,
                                              int C) {
  constexpr int V = Pack<T>::N;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int packs = C / V;
  if (i >= int64_t(T_) * packs) return;
  const int t = static_cast<int>(i / packs);
  const int c = static_cast<int>(i % packs) * V;
  float acc[V];
#pragma unroll
  for (int k = 0; k < V; ++k) acc[k] = 0.0f;
  for (int b = 0; b < B; ++b) {
    const Pack<T> d = load_pack(dout + (int64_t(b) * T_ + t) * C + c);
#pragma unroll
    for (int k = 0; k < V; ++k) acc[k] += d.get(k);
  }
  float* dst = dwpe + int64_t(t) * C + c;
#pragma unroll
  for (int k = 0; k < V; ++k) dst[k] += acc[k];
}

// --------------------------------------------------------------------------------------
// GELU, residual

// out = Op::apply(x) over packs of x, one pack a thread.
template <typename T, typename Op>
__global__ void unary_packs_kernel(T* out, const T* inp, int64_t packs) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= packs) return;
  constexpr int V = Pack<T>::N;
  const Pack<T> x = load_pack(inp + i * V);
  Pack<T> o;
#pragma unroll
  for (int k = 0; k < V; ++k) o.set(k, Op::apply(x.get(k)));
  store_pack(out + i * V, o);
}

// out = Op::apply(x, y) over packs of x and y, one pack a thread.
template <typename T, typename Op>
__global__ void binary_packs_kernel(T* out, const T* a, const T* b, int64_t packs) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= packs) return;
  constexpr int V = Pack<T>::N;
  const Pack<T> x = load_pack(a + i * V);
  const Pack<T> y = load_pack(b + i * V);
  Pack<T> o;
#pragma unroll
  for (int k = 0; k < V; ++k) o.set(k, Op::apply(x.get(k), y.get(k)));
  store_pack(out + i * V, o);
}

struct GeluForward {
  static __device__ __forceinline__ float apply(float x) { return gelu_f(x); }
};
struct GeluBackward {  // x: the input, d: the output's gradient
  static __device__ __forceinline__ float apply(float x, float d) { return gelu_grad_f(x) * d; }
};
struct Add {
  static __device__ __forceinline__ float apply(float x, float y) { return x + y; }
};

// --------------------------------------------------------------------------------------
// Column sums (bias gradients): partial sums per row chunk, then a fixed-order reduction.

constexpr int kBiasRowChunks = 64;
constexpr int kBiasWarps = 8;

// The column partial sums of one pass over an (N, OC) matrix: a block takes 32 packs of
// columns and the rows r = blockIdx.y * kBiasWarps + warp, stepping by gridDim.y *
// kBiasWarps (4 rows in flight per warp); load(r, c) reads what row r needs at columns
// c..c+V-1 and use(r, c, loaded, acc) adds its values there into acc. The block's warps
// meet in shared memory; partials[blockIdx.y][col] receives the block's sums.
template <typename T, typename Load, typename Use>
__device__ __forceinline__ void column_partials(float* partials, int64_t N, int OC, Load&& load,
                                                Use&& use) {
  constexpr int V = Pack<T>::N;
  __shared__ float smem[kBiasWarps][32 * V];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int c = (blockIdx.x * 32 + lane) * V;
  float acc[V];
#pragma unroll
  for (int k = 0; k < V; ++k) acc[k] = 0.0f;
  if (c < OC) {
    const int64_t first = int64_t(blockIdx.y) * kBiasWarps + warp;
    const int64_t step = int64_t(gridDim.y) * kBiasWarps;
    strided_loads<4>(
        first, N, step, [&](int64_t r) { return load(r, c); },
        [&](int64_t r, const auto& v) { use(r, c, v, acc); });
  }
#pragma unroll
  for (int k = 0; k < V; ++k) smem[warp][lane * V + k] = acc[k];
  __syncthreads();
  for (int j = threadIdx.x; j < 32 * V; j += blockDim.x) {
    float s = 0.0f;
#pragma unroll
    for (int w = 0; w < kBiasWarps; ++w) s += smem[w][j];
    const int col = blockIdx.x * 32 * V + j;
    if (col < OC) partials[int64_t(blockIdx.y) * OC + col] = s;
  }
}

template <typename T>
__global__ void column_partial_sums_kernel(float* partials, const T* x, int64_t N, int OC) {
  column_partials<T>(
      partials, N, OC, [&](int64_t r, int c) { return load_pack(x + r * OC + c); },
      [](int64_t, int, const Pack<T>& v, float* acc) {
#pragma unroll
        for (int k = 0; k < Pack<T>::N; ++k) acc[k] += v.get(k);
      });
}

// out[c] (+)= sum over p of partials[p][c], fixed order: a block takes 32 columns, its 8
// warps split the parts and meet in shared memory.
__global__ void __launch_bounds__(256)
    column_reduce_kernel(float* out, const float* partials, int nparts, int ncols,
                         bool accumulate) {
  __shared__ float sm[8][33];
  const int lane = threadIdx.x % 32, grp = threadIdx.x / 32;
  const int c = blockIdx.x * 32 + lane;
  float s = 0.0f;
  if (c < ncols)
    for (int p = grp; p < nparts; p += 8) s += partials[int64_t(p) * ncols + c];
  sm[grp][lane] = s;
  __syncthreads();
  if (grp != 0 || c >= ncols) return;
  float total = 0.0f;
#pragma unroll
  for (int k = 0; k < 8; ++k) total += sm[k][lane];
  out[c] = accumulate ? out[c] + total : total;
}

// GELU backward in place (d = gelu'(pre) * d) and the column partial sums of the result
// (the bias gradient of the layer that produced pre) in one pass.
template <typename T>
struct PackPair {
  Pack<T> pre, grad;
};
template <typename T>
__global__ void gelu_backward_partial_sums_kernel(float* partials, T* d, const T* pre, int64_t N,
                                                  int OC) {
  column_partials<T>(
      partials, N, OC,
      [&](int64_t r, int c) {
        return PackPair<T>{load_pack(pre + r * OC + c), load_pack(d + r * OC + c)};
      },
      [&](int64_t r, int c, const PackPair<T>& v, float* acc) {
        Pack<T> o;
#pragma unroll
        for (int k = 0; k < Pack<T>::N; ++k) {
          o.set(k, gelu_grad_f(v.pre.get(k)) * v.grad.get(k));
          acc[k] += o.get(k);
        }
        store_pack(d + r * OC + c, o);
      });
}

__global__ void add_inplace_kernel(float* dst, const float* src, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dst[i] += src[i];
}

}  // namespace

// ---------------------------------------------------------------------------------------

void embedding_forward(DType t, void* out, const int32_t* tokens, const void* wte,
                       const void* wpe, int64_t B, int64_t T, int64_t C, cudaStream_t s,
                       int64_t vocab_begin, int64_t vocab_rows) {
  dispatch_dtype(t, [&](auto tag) {
    using X = decltype(tag);
    check_packed<X>(C, "embedding_forward");
    const int64_t items = B * T * (C / Pack<X>::N);
    embedding_forward_kernel<X><<<grid_for(items, 256), 256, 0, s>>>(
        static_cast<X*>(out), tokens, static_cast<const X*>(wte), static_cast<const X*>(wpe),
        B * T, static_cast<int>(T), static_cast<int>(C), vocab_begin, vocab_rows);
    AISCALE_CUDA_LAUNCH_CHECK();
  });
}

void embedding_backward(DType t, float* dwte, float* dwpe, const void* dout,
                        const int32_t* unique_tokens, const int32_t* bucket_offsets,
                        const int32_t* bucket_positions, int64_t num_unique, int64_t B,
                        int64_t T, int64_t C, cudaStream_t s) {
  dispatch_dtype(t, [&](auto tag) {
    using X = decltype(tag);
    check_packed<X>(C, "embedding_backward");
    const int threads = static_cast<int>(std::min<int64_t>(256, std::max<int64_t>(32, C / Pack<X>::N)));
    if (num_unique > 0) {
      embedding_backward_wte_kernel<X><<<static_cast<unsigned>(num_unique), threads, 0, s>>>(
          dwte, static_cast<const X*>(dout), unique_tokens, bucket_offsets, bucket_positions,
          static_cast<int>(C));
      AISCALE_CUDA_LAUNCH_CHECK();
    }
    if (!dwpe) return;  // no position embedding (the llama family's rotary positions)
    const int64_t items = T * (C / Pack<X>::N);
    embedding_backward_wpe_kernel<X><<<grid_for(items, 256), 256, 0, s>>>(
        dwpe, static_cast<const X*>(dout), static_cast<int>(B), static_cast<int>(T),
        static_cast<int>(C));
    AISCALE_CUDA_LAUNCH_CHECK();
  });
}

int64_t build_token_buckets(const int32_t* tokens, int64_t N, int64_t V, int32_t* unique_tokens,
                            int32_t* offsets, int32_t* positions, std::vector<int32_t>& counts,
                            int64_t first) {
  counts.assign(static_cast<size_t>(V), 0);
  const auto held = [&](int64_t i) { return tokens[i] >= first && tokens[i] - first < V; };
  for (int64_t i = 0; i < N; ++i)
    if (held(i)) ++counts[static_cast<size_t>(tokens[i] - first)];
  // Exclusive prefix over tokens that occur; counts[] becomes each token's write cursor.
  int64_t num_unique = 0;
  int32_t running = 0;
  for (int64_t v = 0; v < V; ++v) {
    const int32_t c = counts[static_cast<size_t>(v)];
    if (c == 0) continue;
    unique_tokens[num_unique] = static_cast<int32_t>(v);
    offsets[num_unique] = running;
    ++num_unique;
    counts[static_cast<size_t>(v)] = running;
    running += c;
  }
  offsets[num_unique] = running;
  for (int64_t i = 0; i < N; ++i)
    if (held(i)) positions[counts[static_cast<size_t>(tokens[i] - first)]++] = static_cast<int32_t>(i);
  return num_unique;
}

namespace {

// Launches the packed kernel that kernel_for(tag) names for dtype t over n elements (a
// multiple of the pack width), one thread a pack, 256 threads a block; the pointers are
// cast to the dtype's element type, const kept.
template <typename KernelFor, typename... Ptrs>
void launch_packed(DType t, int64_t n, const char* what, cudaStream_t s, KernelFor kernel_for,
                   Ptrs... ptrs) {
  dispatch_dtype(t, [&](auto tag) {
    using X = decltype(tag);
    check_packed<X>(n, what);
    const int64_t packs = n / Pack<X>::N;
    kernel_for(tag)<<<grid_for(packs, 256), 256, 0, s>>>(typed<X>(ptrs)..., packs);
    AISCALE_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace

void gelu_forward(DType t, void* out, const void* inp, int64_t n, cudaStream_t s) {
  launch_packed(t, n, "gelu_forward", s,
                [](auto tag) { return unary_packs_kernel<decltype(tag), GeluForward>; }, out, inp);
}

void gelu_backward(DType t, void* dinp, const void* inp, const void* dout, int64_t n,
                   cudaStream_t s) {
  launch_packed(t, n, "gelu_backward", s,
                [](auto tag) { return binary_packs_kernel<decltype(tag), GeluBackward>; }, dinp,
                inp, dout);
}

void residual_forward(DType t, void* out, const void* a, const void* b, int64_t n,
                      cudaStream_t s) {
  launch_packed(t, n, "residual_forward", s,
                [](auto tag) { return binary_packs_kernel<decltype(tag), Add>; }, out, a, b);
}

size_t bias_grad_scratch_floats(int64_t OC) { return static_cast<size_t>(kBiasRowChunks * OC); }

namespace {
// Column sums of an (N, OC) pass of dtype t into out (fp32, OC; added with accumulate):
// partials(tag, grid, threads) launches the pass's partial-sums kernel over kBiasRowChunks
// row chunks into scratch, then the fixed-order reduction runs.
template <typename Partials>
void column_sums(DType t, const char* what, float* out, float* scratch, int64_t OC,
                 bool accumulate, cudaStream_t s, Partials&& partials) {
  dispatch_dtype(t, [&](auto tag) {
    using X = decltype(tag);
    check_packed<X>(OC, what);
    partials(tag, dim3(static_cast<unsigned>(ceil_div(OC, 32 * Pack<X>::N)), kBiasRowChunks),
             32 * kBiasWarps);
    AISCALE_CUDA_LAUNCH_CHECK();
    column_reduce_kernel<<<static_cast<unsigned>(ceil_div(OC, 32)), 256, 0, s>>>(
        out, scratch, kBiasRowChunks, static_cast<int>(OC), accumulate);
    AISCALE_CUDA_LAUNCH_CHECK();
  });
}
}  // namespace

void bias_grad(DType t, float* out, const void* x, int64_t N, int64_t OC, bool accumulate,
               float* scratch, cudaStream_t s) {
  column_sums(t, "bias_grad", out, scratch, OC, accumulate, s, [&](auto tag, dim3 grid, int threads) {
    using X = decltype(tag);
    column_partial_sums_kernel<X><<<grid, threads, 0, s>>>(scratch, static_cast<const X*>(x), N,
                                                           static_cast<int>(OC));
  });
}

void gelu_backward_bias(DType t, void* d, const void* pre, int64_t N, int64_t OC, float* dbias,
                        float* scratch, cudaStream_t s) {
  column_sums(t, "gelu_backward_bias", dbias, scratch, OC, false, s, [&](auto tag, dim3 grid, int threads) {
    using X = decltype(tag);
    gelu_backward_partial_sums_kernel<X><<<grid, threads, 0, s>>>(
        scratch, static_cast<X*>(d), static_cast<const X*>(pre), N, static_cast<int>(OC));
  });
}

void add_inplace(float* dst, const float* src, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  add_inplace_kernel<<<grid_for(n, 256), 256, 0, s>>>(dst, src, n);
  AISCALE_CUDA_LAUNCH_CHECK();
}

namespace {

// n values between fp32 and t: a copy where t is fp32, else launch(tag, blocks) with up to
// 8192 blocks of 256 threads.
template <typename Launch>
void convert_f32(DType t, void* out, const void* in, int64_t n, cudaStream_t s, Launch launch) {
  if (n <= 0) return;
  if (t == DType::f32) {
    AISCALE_CUDA_CHECK(cudaMemcpyAsync(out, in, size_t(n) * 4, cudaMemcpyDeviceToDevice, s));
    return;
  }
  dispatch_dtype(t, [&](auto tag) {
    launch(tag, static_cast<int>(std::min<int64_t>(ceil_div(n, 256), 8192)));
    AISCALE_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace

void cast_from_f32(DType t, void* out, const float* in, int64_t n, cudaStream_t s) {
  convert_f32(t, out, in, n, s, [&](auto tag, int blocks) {
    using X = decltype(tag);
    cast_from_f32_kernel<X><<<blocks, 256, 0, s>>>(static_cast<X*>(out), in, n);
  });
}

void cast_to_f32(DType t, float* out, const void* in, int64_t n, cudaStream_t s) {
  convert_f32(t, out, in, n, s, [&](auto tag, int blocks) {
    using X = decltype(tag);
    cast_to_f32_kernel<X><<<blocks, 256, 0, s>>>(out, static_cast<const X*>(in), n);
  });
}

}  // namespace aiscale::cuda
