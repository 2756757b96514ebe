// The SM work of the copy-engine gradient exchange (copy_engine_sums.cuh): the kernels
// that sum a rank's chunk with its peers' staged copies in rank order (with 16-byte packs
// where the buffers allow, the same bits either way), adding the squares of the sums up
// deterministically where asked, and the one-thread kernel that raises a peer's flag.
#include <algorithm>
#include <cstdint>

#include "aiscale/ops/cuda/common.cuh"
#include "aiscale/parallel/cuda/copy_engine_sums.cuh"

namespace aiscale::parallel::copy_engine {
namespace {

// Raises a peer's flag after the copies before it on the stream (one thread; the stream
// orders it after the copy has completed).
__global__ void raise_flag_kernel(uint32_t* flag, uint32_t value) {
  __threadfence_system();
  *reinterpret_cast<volatile uint32_t*>(flag) = value;
  __threadfence_system();
}

// Every thread of every block calls it with its own sum (blockDim.x a multiple of 32).
__device__ void add_squares(double v, const SquareSums& q) {
  __shared__ double scratch[32];
  __shared__ bool last;
  const double block = cuda::block_sum(v, scratch);
  if (threadIdx.x == 0) {
    q.partials[blockIdx.x] = block;
    __threadfence();
    last = atomicAdd(q.counter, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  double t = 0.0;
  for (unsigned b = threadIdx.x; b < gridDim.x; b += blockDim.x)
    t += reinterpret_cast<volatile const double*>(q.partials)[b];
  t = cuda::block_sum(t, scratch);
  if (threadIdx.x == 0) {
    *q.out += t;
    *q.counter = 0;
  }
}

// out[i] = sum over ranks (in rank order) of the chunk: `self` for rank `me`, the staged
// copies at staging + s * slot_elems for the others. T = float or bf16 (summed in fp32).
template <typename T>
__global__ void sum_chunk_kernel(T* self, const T* staging, int64_t slot_elems, int world, int me,
                                 int64_t n, SquareSums q) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  double squares = 0.0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    float acc = 0.0f;
    for (int s = 0; s < world; ++s) {
      const T v = s == me ? self[i] : staging[int64_t(s) * slot_elems + i];
      acc += static_cast<float>(v);
    }
    const T out = static_cast<T>(acc);
    self[i] = out;
    const double d = static_cast<float>(out);
    squares += d * d;
  }
  if (q.out) add_squares(squares, q);
}

// The same sums with 16-byte loads and stores (self, staging and slot_elems aligned to
// 16 bytes; n a multiple of the pack): per element the same rank order, so the same bits.
template <typename T>
__global__ void sum_chunk_vec_kernel(T* self, const T* staging, int64_t slot_elems, int world,
                                     int me, int64_t n, SquareSums q) {
  constexpr int V = 16 / sizeof(T);
  const int64_t packs = n / V, stride = int64_t(gridDim.x) * blockDim.x;
  double squares = 0.0;
  for (int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < packs; p += stride) {
    float acc[V];
#pragma unroll
    for (int k = 0; k < V; ++k) acc[k] = 0.0f;
    for (int s = 0; s < world; ++s) {
      const T* src = s == me ? self : staging + int64_t(s) * slot_elems;
      const uint4 raw = reinterpret_cast<const uint4*>(src)[p];
      const T* v = reinterpret_cast<const T*>(&raw);
#pragma unroll
      for (int k = 0; k < V; ++k) acc[k] += static_cast<float>(v[k]);
    }
    uint4 out;
    T* o = reinterpret_cast<T*>(&out);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      o[k] = static_cast<T>(acc[k]);
      const double d = static_cast<float>(o[k]);
      squares += d * d;
    }
    reinterpret_cast<uint4*>(self)[p] = out;
  }
  if (q.out) add_squares(squares, q);
}

constexpr int kSumThreads = 256;

// Sums m values of a chunk (self) with the staged copies, on stream s; adds the squares
// of the sums into *q.out where q.out is set.
template <typename T>
void launch_sum_of(T* self, const T* staging, int64_t slot_elems, int world, int me, int64_t m,
                const SquareSums& q, cudaStream_t s) {
  constexpr int V = 16 / sizeof(T);
  const int threads = kSumThreads;
  const bool vec = reinterpret_cast<uintptr_t>(self) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(staging) % 16 == 0 && slot_elems % V == 0;
  const int64_t body = vec ? m / V * V : 0;
  if (body > 0) {
    const int blocks = int(std::min<int64_t>((body / V + threads - 1) / threads, kMaxSumBlocks));
    sum_chunk_vec_kernel<T><<<blocks, threads, 0, s>>>(self, staging, slot_elems, world, me, body, q);
  }
  if (m > body) {
    const int64_t rest = m - body;
    const int blocks = int(std::min<int64_t>((rest + threads - 1) / threads, kMaxSumBlocks));
    sum_chunk_kernel<T><<<blocks, threads, 0, s>>>(self + body, staging + body, slot_elems, world,
                                                   me, rest, q);
  }
}

}  // namespace

void launch_sum(float* self, const float* staging, int64_t slot_elems, int world, int me, int64_t m,
                const SquareSums& q, cudaStream_t s) {
  launch_sum_of(self, staging, slot_elems, world, me, m, q, s);
}

void launch_sum(cuda::bf16* self, const cuda::bf16* staging, int64_t slot_elems, int world, int me,
                int64_t m, const SquareSums& q, cudaStream_t s) {
  launch_sum_of(self, staging, slot_elems, world, me, m, q, s);
}

void launch_raise_flag(uint32_t* flag, uint32_t value, cudaStream_t s) {
  raise_flag_kernel<<<1, 1, 0, s>>>(flag, value);
}

}  // namespace aiscale::parallel::copy_engine
