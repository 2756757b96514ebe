// Causal multi-head attention without materialising the (T, T) matrix.
//
// flash: tensor-core kernels (mma.sync m16n8k16, bf16 / fp16 in, fp32 accumulate) for head
//   size 64, in the manner of FlashAttention-2. Forward: a block of 8 warps owns 128 queries
//   (16 per warp), streams 64-key tiles of K and V through shared memory (cp.async, double
//   buffered), keeps the online-softmax state in registers and writes O and the base-2
//   log-sum-exp. Backward: a block owns 128 keys (16 per warp, dK and dV in registers)
//   and streams the 64-query tiles at or after them; dQ is summed over key blocks with
//   16-byte fp32 atomics into a scratch buffer (so its rounding order varies between runs), then
//   scaled and converted.
// simple: CUDA-core kernels (one thread per query or key row, fp32 math) for fp32 and for
//   head sizes 16, 32, 64, 128: the checks' path and the fallback.
//
// Shared-memory tiles of 64 x 64 half-precision values are stored with a 16-byte-chunk
// XOR swizzle (chunk c of row r at c ^ (r & 7)) so that ldmatrix reads and cp.async writes
// are free of bank conflicts.
#include <algorithm>
#include <cfloat>

#include "aiscale/ops/cuda/common.cuh"
#include "aiscale/ops/cuda/cuda_ops.cuh"

namespace aiscale::cuda {
namespace {

constexpr float kLog2e = 1.4426950408889634f;

// ---------------------------------------------------------------------------------------
// PTX helpers

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool pred) {
  const int src_size = pred ? 16 : 0;  // 0: zero-fill the destination
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem),
               "r"(src_size));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldsm_x4(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3,
                                        const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3,
                                          const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(smem_addr(p)));
}

// dst[0..3] += v: one 16-byte atomic on sm_90, four 4-byte ones before it.
__device__ __forceinline__ void atomic_add4(float* dst, float4 v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float4*>(dst), v);
#else
  atomicAdd(dst, v.x);
  atomicAdd(dst + 1, v.y);
  atomicAdd(dst + 2, v.z);
  atomicAdd(dst + 3, v.w);
#endif
}

template <typename T>
struct Mma;
template <>
struct Mma<bf16> {
  static __device__ __forceinline__ void run(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
};
template <>
struct Mma<f16> {
  static __device__ __forceinline__ void run(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
};

// ---------------------------------------------------------------------------------------
// flash kernels, head size 64

constexpr int kD = 64;        // head size
constexpr int kTile = 64;     // rows of a streamed tile (K / V in forward, Q / dO in backward)
constexpr int kBlockRows = 128;  // rows a block owns (queries in forward, keys in backward)
constexpr int kWarps = 8;     // 16 of those rows each
constexpr int kThreads = kWarps * 32;
constexpr int kTileElems = kTile * kD;
constexpr int kBlockElems = kBlockRows * kD;

// Element offset of (row r, 16-byte chunk c) in a swizzled tile of 64-value rows.
__device__ __forceinline__ int swz(int r, int c) { return r * kD + ((c ^ (r & 7)) << 3); }

// Copies rows row0 .. row0 + ROWS - 1 (those < rows_valid; the others are zero-filled) of
// a 64-wide slice of a row-major matrix into a swizzled shared tile.
template <int ROWS, int THREADS = kThreads, typename T>
__device__ __forceinline__ void load_tile(T* tile, const T* base, int64_t row_stride, int row0,
                                          int rows_valid) {
#pragma unroll
  for (int idx = threadIdx.x; idx < ROWS * 8; idx += THREADS) {
    const int r = idx >> 3, c = idx & 7;
    const int row = row0 + r;
    const bool ok = row < rows_valid;
    const T* src = base + int64_t(ok ? row : 0) * row_stride + c * 8;
    cp_async16(tile + swz(r, c), src, ok);
  }
}

// Forward. grid (ceil(T / 128), B * NH), 256 threads; a block owns 128 queries (16 per
// warp) and streams 64-key tiles. Query tiles in reverse order so that the longest (last)
// rows start first. A warp skips the tiles whose keys all lie after its rows.
template <typename T>
__global__ void __launch_bounds__(kThreads, 2)
    flash_forward_kernel(T* out, float* lse, const T* qkv, int T_, int NH, int C,
                         float scale_log2) {
  __shared__ alignas(128) T sQ[kBlockElems];
  __shared__ alignas(128) T sK[2][kTileElems];
  __shared__ alignas(128) T sV[2][kTileElems];

  const int qt = gridDim.x - 1 - blockIdx.x;
  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int q0 = qt * kBlockRows;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane >> 2, tq = lane & 3;
  const int row_lo = q0 + warp * 16;  // this warp's first query
  const int64_t row_stride = 3 * int64_t(C);
  const T* q_base = qkv + int64_t(b) * T_ * row_stride + h * kD;
  const T* k_base = q_base + C;
  const T* v_base = q_base + 2 * C;

  load_tile<kBlockRows>(sQ, q_base, row_stride, q0, T_);
  cp_async_commit();
  load_tile<kTile>(sK[0], k_base, row_stride, 0, T_);
  load_tile<kTile>(sV[0], v_base, row_stride, 0, T_);
  cp_async_commit();
  cp_async_wait<1>();
  __syncthreads();

  // Q fragments of this warp's 16 rows, 4 chunks of 16 dims.
  uint32_t qf[4][4];
#pragma unroll
  for (int kc = 0; kc < 4; ++kc)
    ldsm_x4(qf[kc][0], qf[kc][1], qf[kc][2], qf[kc][3],
            sQ + swz(warp * 16 + (lane % 16), 2 * kc + lane / 16));

  float o[8][4];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[i][e] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.0f, 0.0f};  // per-thread partial sums, reduced over the quad at the end

  const int n_kv = min((T_ + kTile - 1) / kTile, (q0 + kBlockRows - 1) / kTile + 1);
  for (int j = 0; j < n_kv; ++j) {
    const int buf = j & 1;
    if (j + 1 < n_kv) {
      load_tile<kTile>(sK[buf ^ 1], k_base, row_stride, (j + 1) * kTile, T_);
      load_tile<kTile>(sV[buf ^ 1], v_base, row_stride, (j + 1) * kTile, T_);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();

    const int k0 = j * kTile;
    if (k0 <= row_lo + 15) {  // some key of the tile is at or before some row of the warp
      // S = Q K^T for 16 rows x 64 keys.
      float sc[8][4];
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) sc[i][e] = 0.0f;
#pragma unroll
      for (int kc = 0; kc < 4; ++kc) {
#pragma unroll
        for (int n2 = 0; n2 < 4; ++n2) {
          uint32_t b0, b1, b2, b3;
          ldsm_x4(b0, b1, b2, b3,
                  sK[buf] + swz(n2 * 16 + (lane % 8) + (lane / 16) * 8, 2 * kc + (lane / 8) % 2));
          Mma<T>::run(sc[2 * n2], qf[kc], b0, b1);
          Mma<T>::run(sc[2 * n2 + 1], qf[kc], b2, b3);
        }
      }
      // Scale into base 2; mask keys after the query where the tile crosses the diagonal.
      const bool need_mask = k0 + kTile - 1 > row_lo;
#pragma unroll
      for (int nb = 0; nb < 8; ++nb) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float v = sc[nb][e] * scale_log2;
          if (need_mask) {
            const int key = k0 + nb * 8 + 2 * tq + (e & 1);
            const int query = row_lo + g + (e >= 2 ? 8 : 0);
            if (key > query) v = -INFINITY;
          }
          sc[nb][e] = v;
        }
      }
      // Online softmax, rows g (e = 0, 1) and g + 8 (e = 2, 3). Every row has a key at
      // or before it in this tile (tiles start at multiples of 64, rows of a warp at
      // multiples of 16), so the new maximum is finite.
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = -INFINITY;
#pragma unroll
        for (int nb = 0; nb < 8; ++nb) mx = fmaxf(mx, fmaxf(sc[nb][2 * r], sc[nb][2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(row_max[r], mx);
        const float alpha = exp2f(row_max[r] - m_new);
        row_max[r] = m_new;
        float sum = 0.0f;
#pragma unroll
        for (int nb = 0; nb < 8; ++nb) {
          const float p0 = exp2f(sc[nb][2 * r] - m_new);
          const float p1 = exp2f(sc[nb][2 * r + 1] - m_new);
          sc[nb][2 * r] = p0;
          sc[nb][2 * r + 1] = p1;
          sum += p0 + p1;
          o[nb][2 * r] *= alpha;
          o[nb][2 * r + 1] *= alpha;
        }
        row_sum[r] = row_sum[r] * alpha + sum;
      }
      // O += P V. P (16 x 64 keys) from the S accumulators as A fragments.
#pragma unroll
      for (int kc = 0; kc < 4; ++kc) {
        uint32_t a[4];
        a[0] = Mma<T>::pack(sc[2 * kc][0], sc[2 * kc][1]);
        a[1] = Mma<T>::pack(sc[2 * kc][2], sc[2 * kc][3]);
        a[2] = Mma<T>::pack(sc[2 * kc + 1][0], sc[2 * kc + 1][1]);
        a[3] = Mma<T>::pack(sc[2 * kc + 1][2], sc[2 * kc + 1][3]);
#pragma unroll
        for (int n2 = 0; n2 < 4; ++n2) {
          uint32_t b0, b1, b2, b3;
          ldsm_x4_t(b0, b1, b2, b3,
                    sV[buf] + swz(kc * 16 + (lane % 8) + ((lane / 8) % 2) * 8, 2 * n2 + lane / 16));
          Mma<T>::run(o[2 * n2], a, b0, b1);
          Mma<T>::run(o[2 * n2 + 1], a, b2, b3);
        }
      }
    }
    __syncthreads();  // this buffer is refilled by the next iteration's copies
  }

  // Normalise and write O (B, T, C) and the log-sum-exp (B, NH, T).
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = row_sum[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const float inv = 1.0f / l;
    const int row = row_lo + g + 8 * r;
    if (row < T_) {
      T* o_row = out + (int64_t(b) * T_ + row) * C + h * kD;
#pragma unroll
      for (int nb = 0; nb < 8; ++nb) {
        *reinterpret_cast<uint32_t*>(o_row + nb * 8 + 2 * tq) =
            Mma<T>::pack(o[nb][2 * r] * inv, o[nb][2 * r + 1] * inv);
      }
      if (tq == 0) lse[int64_t(bh) * T_ + row] = row_max[r] + __log2f(l);
    }
  }
}

// Forward, wide warps: grid (ceil(T / 128), B * NH), 128 threads; a block owns 128 queries,
// each warp 32 of them (two 16-row MMA tiles), so every K / V fragment read from shared
// memory feeds two MMAs (the 16-row kernel above is bound by shared-memory bandwidth).
constexpr int kWideWarps = 4;
constexpr int kWideThreads = kWideWarps * 32;

template <typename T, int MIN_BLOCKS>
__global__ void __launch_bounds__(kWideThreads, MIN_BLOCKS)
    flash_forward_wide_kernel(T* out, float* lse, const T* qkv, int T_, int NH, int C,
                              float scale_log2) {
  __shared__ alignas(128) T sQ[kBlockElems];
  __shared__ alignas(128) T sK[2][kTileElems];
  __shared__ alignas(128) T sV[2][kTileElems];

  const int qt = gridDim.x - 1 - blockIdx.x;
  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int q0 = qt * kBlockRows;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane >> 2, tq = lane & 3;
  const int row_lo = q0 + warp * 32;  // this warp's first query
  const int64_t row_stride = 3 * int64_t(C);
  const T* q_base = qkv + int64_t(b) * T_ * row_stride + h * kD;
  const T* k_base = q_base + C;
  const T* v_base = q_base + 2 * C;

  load_tile<kBlockRows, kWideThreads>(sQ, q_base, row_stride, q0, T_);
  cp_async_commit();
  load_tile<kTile, kWideThreads>(sK[0], k_base, row_stride, 0, T_);
  load_tile<kTile, kWideThreads>(sV[0], v_base, row_stride, 0, T_);
  cp_async_commit();
  cp_async_wait<1>();
  __syncthreads();

  uint32_t qf[2][4][4];
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int kc = 0; kc < 4; ++kc)
      ldsm_x4(qf[m][kc][0], qf[m][kc][1], qf[m][kc][2], qf[m][kc][3],
              sQ + swz(warp * 32 + m * 16 + (lane % 16), 2 * kc + lane / 16));

  float o[2][8][4];
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[m][i][e] = 0.0f;
  float row_max[2][2] = {{-INFINITY, -INFINITY}, {-INFINITY, -INFINITY}};
  float row_sum[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};

  const int n_kv = min((T_ + kTile - 1) / kTile, (q0 + kBlockRows - 1) / kTile + 1);
  for (int j = 0; j < n_kv; ++j) {
    const int buf = j & 1;
    if (j + 1 < n_kv) {
      load_tile<kTile, kWideThreads>(sK[buf ^ 1], k_base, row_stride, (j + 1) * kTile, T_);
      load_tile<kTile, kWideThreads>(sV[buf ^ 1], v_base, row_stride, (j + 1) * kTile, T_);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();

    const int k0 = j * kTile;
    if (k0 <= row_lo + 31) {
      float sc[2][8][4];
#pragma unroll
      for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
          for (int e = 0; e < 4; ++e) sc[m][i][e] = 0.0f;
#pragma unroll
      for (int kc = 0; kc < 4; ++kc) {
#pragma unroll
        for (int n2 = 0; n2 < 4; ++n2) {
          uint32_t b0, b1, b2, b3;
          ldsm_x4(b0, b1, b2, b3,
                  sK[buf] + swz(n2 * 16 + (lane % 8) + (lane / 16) * 8, 2 * kc + (lane / 8) % 2));
#pragma unroll
          for (int m = 0; m < 2; ++m) {
            Mma<T>::run(sc[m][2 * n2], qf[m][kc], b0, b1);
            Mma<T>::run(sc[m][2 * n2 + 1], qf[m][kc], b2, b3);
          }
        }
      }
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        const int mrow = row_lo + m * 16;
        const bool need_mask = k0 + kTile - 1 > mrow;
#pragma unroll
        for (int nb = 0; nb < 8; ++nb) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            float v = sc[m][nb][e] * scale_log2;
            if (need_mask) {
              const int key = k0 + nb * 8 + 2 * tq + (e & 1);
              const int query = mrow + g + (e >= 2 ? 8 : 0);
              if (key > query) v = -INFINITY;
            }
            sc[m][nb][e] = v;
          }
        }
        // A 16-row tile wholly before this key tile gets max -inf here and keeps its
        // (finite: tile 0 was seen) running maximum: alpha = 1, p = 0.
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float mx = -INFINITY;
#pragma unroll
          for (int nb = 0; nb < 8; ++nb)
            mx = fmaxf(mx, fmaxf(sc[m][nb][2 * r], sc[m][nb][2 * r + 1]));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          const float m_new = fmaxf(row_max[m][r], mx);
          const float alpha = exp2f(row_max[m][r] - m_new);
          row_max[m][r] = m_new;
          float sum = 0.0f;
#pragma unroll
          for (int nb = 0; nb < 8; ++nb) {
            const float p0 = exp2f(sc[m][nb][2 * r] - m_new);
            const float p1 = exp2f(sc[m][nb][2 * r + 1] - m_new);
            sc[m][nb][2 * r] = p0;
            sc[m][nb][2 * r + 1] = p1;
            sum += p0 + p1;
            o[m][nb][2 * r] *= alpha;
            o[m][nb][2 * r + 1] *= alpha;
          }
          row_sum[m][r] = row_sum[m][r] * alpha + sum;
        }
      }
#pragma unroll
      for (int kc = 0; kc < 4; ++kc) {
        uint32_t a[2][4];
#pragma unroll
        for (int m = 0; m < 2; ++m) {
          a[m][0] = Mma<T>::pack(sc[m][2 * kc][0], sc[m][2 * kc][1]);
          a[m][1] = Mma<T>::pack(sc[m][2 * kc][2], sc[m][2 * kc][3]);
          a[m][2] = Mma<T>::pack(sc[m][2 * kc + 1][0], sc[m][2 * kc + 1][1]);
          a[m][3] = Mma<T>::pack(sc[m][2 * kc + 1][2], sc[m][2 * kc + 1][3]);
        }
#pragma unroll
        for (int n2 = 0; n2 < 4; ++n2) {
          uint32_t b0, b1, b2, b3;
          ldsm_x4_t(b0, b1, b2, b3,
                    sV[buf] + swz(kc * 16 + (lane % 8) + ((lane / 8) % 2) * 8, 2 * n2 + lane / 16));
#pragma unroll
          for (int m = 0; m < 2; ++m) {
            Mma<T>::run(o[m][2 * n2], a[m], b0, b1);
            Mma<T>::run(o[m][2 * n2 + 1], a[m], b2, b3);
          }
        }
      }
    }
    __syncthreads();
  }

#pragma unroll
  for (int m = 0; m < 2; ++m) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = row_sum[m][r];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float inv = 1.0f / l;
      const int row = row_lo + m * 16 + g + 8 * r;
      if (row < T_) {
        T* o_row = out + (int64_t(b) * T_ + row) * C + h * kD;
#pragma unroll
        for (int nb = 0; nb < 8; ++nb) {
          *reinterpret_cast<uint32_t*>(o_row + nb * 8 + 2 * tq) =
              Mma<T>::pack(o[m][nb][2 * r] * inv, o[m][nb][2 * r + 1] * inv);
        }
        if (tq == 0) lse[int64_t(bh) * T_ + row] = row_max[m][r] + __log2f(l);
      }
    }
  }
}

// Backward preprocessing: delta (B, NH, T) = rowsum(dO * O) per head, and (flash) zeroes
// the dQ accumulator (B, T, C). One warp per token row (all heads): coalesced loads of dO
// and O, per-pack partial dot products in shared memory, summed per head in a fixed order.
// (A thread per (token, head) made strided 16-byte loads: 0.15 ms per layer, run 6.)
constexpr int kDeltaWarps = 4;

template <typename T>
__global__ void __launch_bounds__(kDeltaWarps * 32)
    attention_delta_rows_kernel(float* delta, float* dq_accum, const T* dout, const T* out,
                                int64_t BT, int T_, int NH, int C, int HS) {
  constexpr int V = Pack<T>::N;
  extern __shared__ float part[];  // [warps][C / V]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * kDeltaWarps + warp;  // b * T + t
  const int packs = C / V;
  float* mine = part + warp * packs;
  if (row < BT) {
    const T* d = dout + row * C;
    const T* o = out + row * C;
    for (int p = lane; p < packs; p += 32) {
      const Pack<T> x = load_pack(d + p * V);
      const Pack<T> y = load_pack(o + p * V);
      float sum = 0.0f;
#pragma unroll
      for (int k = 0; k < V; ++k) sum += x.get(k) * y.get(k);
      mine[p] = sum;
    }
    if (dq_accum) {
      float4* z = reinterpret_cast<float4*>(dq_accum + row * C);
      for (int i = lane; i < C / 4; i += 32) z[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
  }
  __syncwarp();
  if (row < BT) {
    const int per_head = HS / V;
    const int64_t b = row / T_, t = row % T_;
    for (int h = lane; h < NH; h += 32) {
      float sum = 0.0f;
      for (int q = 0; q < per_head; ++q) sum += mine[h * per_head + q];
      delta[(b * NH + h) * T_ + t] = sum;
    }
  }
}

// dQ (B, T, C) fp32 accumulated -> the Q slot of dqkv (B, T, 3C), times the softmax scale.
template <typename T>
__global__ void attention_dq_convert_kernel(T* dqkv, const float* dq_accum, int64_t N, int C,
                                            float scale) {
  const int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * 4;
  if (i >= N * C) return;
  const int64_t row = i / C;
  const int c = static_cast<int>(i % C);
  const float4 v = *reinterpret_cast<const float4*>(dq_accum + i);
  T* dst = dqkv + row * 3 * C + c;
  dst[0] = from_f32<T>(v.x * scale);
  dst[1] = from_f32<T>(v.y * scale);
  dst[2] = from_f32<T>(v.z * scale);
  dst[3] = from_f32<T>(v.w * scale);
}

constexpr size_t kBwdPipelinedSmemBytes =
    sizeof(uint16_t) * (4 * size_t(kBlockElems) + 4 * size_t(kTileElems)) +
    sizeof(float) * 4 * kTile;
constexpr size_t kBwdSmemBytes =
    sizeof(uint16_t) * (3 * size_t(kBlockElems) + 4 * size_t(kTileElems)) +
    sizeof(float) * 4 * kTile;

// Backward. grid (ceil(T / 128), B * NH), 256 threads, kBwdSmemBytes of dynamic shared
// memory: K, V of the block's 128 keys, Q and dO tiles of 64 queries (two buffers each),
// dS^T (128 keys x 64 queries), lse and delta (two buffers each). Warp w owns keys
// 16w .. 16w + 15 for dK, dV; for dQ of a query tile, warp w computes queries
// 16 (w % 4) .. + 15, dims 32 (w / 4) .. + 31 and adds them with 16-byte atomics.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    flash_backward_kernel(T* dqkv, float* dq_accum, const T* qkv, const T* dout,
                          const float* lse, const float* delta, int T_, int NH, int C,
                          float scale_log2, float scale) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* sK = reinterpret_cast<T*>(smem_raw);
  T* sV = sK + kBlockElems;
  T* sQ = sV + kBlockElems;        // [2][kTileElems]
  T* sdO = sQ + 2 * kTileElems;    // [2][kTileElems]
  T* sdS = sdO + 2 * kTileElems;   // dS^T: [128 keys][64 queries]
  float* sLse = reinterpret_cast<float*>(sdS + kBlockElems);  // [2][64]
  float* sDelta = sLse + 2 * kTile;                            // [2][64]

  const int kt = blockIdx.x;  // key block; block 0 has the most work and starts first
  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int k0 = kt * kBlockRows;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane >> 2, tq = lane & 3;
  const int key_lo = k0 + warp * 16;  // this warp's first key
  const int64_t row_stride = 3 * int64_t(C);
  const T* q_base = qkv + int64_t(b) * T_ * row_stride + h * kD;
  const T* k_base = q_base + C;
  const T* v_base = q_base + 2 * C;
  const T* do_base = dout + int64_t(b) * T_ * C + h * kD;
  const float* lse_row = lse + int64_t(bh) * T_;
  const float* delta_row = delta + int64_t(bh) * T_;
  const int n_q = (T_ + kTile - 1) / kTile;
  const int i_begin = k0 / kTile;  // first query tile with a query at or after key k0

  auto load_query_tile = [&](int i, int buf) {
    load_tile<kTile>(sQ + buf * kTileElems, q_base, row_stride, i * kTile, T_);
    load_tile<kTile>(sdO + buf * kTileElems, do_base, C, i * kTile, T_);
    cp_async_commit();
    if (threadIdx.x < kTile) {
      const int q = i * kTile + threadIdx.x;
      // Rows past the end get probability 0 (lse = +inf) and no gradient.
      sLse[buf * kTile + threadIdx.x] = q < T_ ? lse_row[q] : INFINITY;
      sDelta[buf * kTile + threadIdx.x] = q < T_ ? delta_row[q] : 0.0f;
    }
  };

  load_tile<kBlockRows>(sK, k_base, row_stride, k0, T_);
  load_tile<kBlockRows>(sV, v_base, row_stride, k0, T_);
  cp_async_commit();
  load_query_tile(i_begin, 0);
  cp_async_wait<1>();
  __syncthreads();

  // This warp's 16 keys of K and V as A fragments.
  uint32_t kf[4][4], vf[4][4];
#pragma unroll
  for (int kc = 0; kc < 4; ++kc) {
    ldsm_x4(kf[kc][0], kf[kc][1], kf[kc][2], kf[kc][3],
            sK + swz(warp * 16 + (lane % 16), 2 * kc + lane / 16));
    ldsm_x4(vf[kc][0], vf[kc][1], vf[kc][2], vf[kc][3],
            sV + swz(warp * 16 + (lane % 16), 2 * kc + lane / 16));
  }
  float dk[8][4], dv[8][4];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      dk[i][e] = 0.0f;
      dv[i][e] = 0.0f;
    }
  const int dq_q = 16 * (warp & 3);   // dQ: this warp's queries within the tile
  const int dq_d = 32 * (warp >> 2);  // and dims

  for (int i = i_begin; i < n_q; ++i) {
    const int buf = (i - i_begin) & 1;
    if (i + 1 < n_q) {
      load_query_tile(i + 1, buf ^ 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const T* q_tile = sQ + buf * kTileElems;
    const T* do_tile = sdO + buf * kTileElems;
    const float* lse_tile = sLse + buf * kTile;
    const float* delta_tile = sDelta + buf * kTile;
    const int q_lo = i * kTile;

    if (key_lo <= q_lo + kTile - 1) {  // some query of the tile sees some key of the warp
      // S^T = K_w Q^T and dP^T = V_w dO^T: 16 keys x 64 queries each.
      float st[8][4], dpt[8][4];
#pragma unroll
      for (int n = 0; n < 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          st[n][e] = 0.0f;
          dpt[n][e] = 0.0f;
        }
#pragma unroll
      for (int kc = 0; kc < 4; ++kc) {
#pragma unroll
        for (int n2 = 0; n2 < 4; ++n2) {
          const int off = swz(n2 * 16 + (lane % 8) + (lane / 16) * 8, 2 * kc + (lane / 8) % 2);
          uint32_t b0, b1, b2, b3;
          ldsm_x4(b0, b1, b2, b3, q_tile + off);
          Mma<T>::run(st[2 * n2], kf[kc], b0, b1);
          Mma<T>::run(st[2 * n2 + 1], kf[kc], b2, b3);
          ldsm_x4(b0, b1, b2, b3, do_tile + off);
          Mma<T>::run(dpt[2 * n2], vf[kc], b0, b1);
          Mma<T>::run(dpt[2 * n2 + 1], vf[kc], b2, b3);
        }
      }
      // P^T and dS^T = P^T (dP^T - delta).
      const bool need_mask = key_lo + 15 > q_lo;
#pragma unroll
      for (int n = 0; n < 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int ql = n * 8 + 2 * tq + (e & 1);  // query within the tile
          const int key = key_lo + g + (e >= 2 ? 8 : 0);
          float p = exp2f(st[n][e] * scale_log2 - lse_tile[ql]);
          if (need_mask && key > q_lo + ql) p = 0.0f;
          st[n][e] = p;
          dpt[n][e] = p * (dpt[n][e] - delta_tile[ql]);
        }
      }
      // dS^T to shared memory (for dQ), as T.
#pragma unroll
      for (int n = 0; n < 8; ++n) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int kr = warp * 16 + g + 8 * r;
          const int qc = n * 8 + 2 * tq;
          *reinterpret_cast<uint32_t*>(sdS + kr * kD + (((qc >> 3) ^ (kr & 7)) << 3) + (qc & 7)) =
              Mma<T>::pack(dpt[n][2 * r], dpt[n][2 * r + 1]);
        }
      }
      // dV += P^T dO and dK += dS^T Q (k = 64 queries in 4 chunks).
#pragma unroll
      for (int kc = 0; kc < 4; ++kc) {
        uint32_t ap[4], ads[4];
        ap[0] = Mma<T>::pack(st[2 * kc][0], st[2 * kc][1]);
        ap[1] = Mma<T>::pack(st[2 * kc][2], st[2 * kc][3]);
        ap[2] = Mma<T>::pack(st[2 * kc + 1][0], st[2 * kc + 1][1]);
        ap[3] = Mma<T>::pack(st[2 * kc + 1][2], st[2 * kc + 1][3]);
        ads[0] = Mma<T>::pack(dpt[2 * kc][0], dpt[2 * kc][1]);
        ads[1] = Mma<T>::pack(dpt[2 * kc][2], dpt[2 * kc][3]);
        ads[2] = Mma<T>::pack(dpt[2 * kc + 1][0], dpt[2 * kc + 1][1]);
        ads[3] = Mma<T>::pack(dpt[2 * kc + 1][2], dpt[2 * kc + 1][3]);
#pragma unroll
        for (int n2 = 0; n2 < 4; ++n2) {
          const int off = swz(kc * 16 + (lane % 8) + ((lane / 8) % 2) * 8, 2 * n2 + lane / 16);
          uint32_t b0, b1, b2, b3;
          ldsm_x4_t(b0, b1, b2, b3, do_tile + off);
          Mma<T>::run(dv[2 * n2], ap, b0, b1);
          Mma<T>::run(dv[2 * n2 + 1], ap, b2, b3);
          ldsm_x4_t(b0, b1, b2, b3, q_tile + off);
          Mma<T>::run(dk[2 * n2], ads, b0, b1);
          Mma<T>::run(dk[2 * n2 + 1], ads, b2, b3);
        }
      }
    }
    __syncthreads();  // dS^T complete

    // dQ (16 queries x 32 dims of this warp) = dS (x 128 keys) K, over the key chunks that
    // some query of the tile sees (the others' dS^T rows were not written).
    float dq[4][4];
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) dq[n][e] = 0.0f;
#pragma unroll
    for (int kc = 0; kc < kBlockRows / 16; ++kc) {
      if (k0 + kc * 16 > q_lo + kTile - 1) break;
      uint32_t a[4];
      // A[m = query][k = key] from dS^T stored [key][query]: transposed load.
      ldsm_x4_t(a[0], a[1], a[2], a[3],
                sdS + swz(kc * 16 + (lane % 8) + (lane / 16) * 8, dq_q / 8 + (lane / 8) % 2));
#pragma unroll
      for (int n2 = 0; n2 < 2; ++n2) {
        uint32_t b0, b1, b2, b3;
        ldsm_x4_t(b0, b1, b2, b3,
                  sK + swz(kc * 16 + (lane % 8) + ((lane / 8) % 2) * 8, dq_d / 8 + 2 * n2 + lane / 16));
        Mma<T>::run(dq[2 * n2], a, b0, b1);
        Mma<T>::run(dq[2 * n2 + 1], a, b2, b3);
      }
    }
    // 16-byte atomics: lanes tq and tq ^ 1 swap halves so that each holds 4 consecutive
    // dims of one row (even tq: row g, dims 2tq .. 2tq + 3; odd: row g + 8, dims 2tq - 2 ..).
    const bool odd = tq & 1;
    const int q_row = q_lo + dq_q + g + (odd ? 8 : 0);
    if (q_row < T_) {
      float* dst = dq_accum + (int64_t(b) * T_ + q_row) * C + h * kD + dq_d + 2 * tq - (odd ? 2 : 0);
#pragma unroll
      for (int n = 0; n < 4; ++n) {
        const float s0 = odd ? dq[n][0] : dq[n][2];
        const float s1 = odd ? dq[n][1] : dq[n][3];
        const float r0 = __shfl_xor_sync(0xffffffffu, s0, 1);
        const float r1 = __shfl_xor_sync(0xffffffffu, s1, 1);
        const float4 v = odd ? make_float4(r0, r1, dq[n][2], dq[n][3])
                             : make_float4(dq[n][0], dq[n][1], r0, r1);
#if __CUDA_ARCH__ >= 900
        atomic_add4(dst + n * 8, v);  // one 16-byte atomic (sm_90)
#else
        float* d = dst + n * 8;  // sm_80 has no vector atomics
        atomicAdd(d, v.x);
        atomicAdd(d + 1, v.y);
        atomicAdd(d + 2, v.z);
        atomicAdd(d + 3, v.w);
#endif
      }
    } else {
      // Still take part in the shuffles.
#pragma unroll
      for (int n = 0; n < 4; ++n) {
        const float s0 = odd ? dq[n][0] : dq[n][2];
        const float s1 = odd ? dq[n][1] : dq[n][3];
        __shfl_xor_sync(0xffffffffu, s0, 1);
        __shfl_xor_sync(0xffffffffu, s1, 1);
      }
    }
  }

  // dK (scaled: S = scale Q K^T) and dV into dqkv.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = key_lo + g + 8 * r;
    if (key < T_) {
      T* drow = dqkv + (int64_t(b) * T_ + key) * row_stride + h * kD;
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        *reinterpret_cast<uint32_t*>(drow + C + n * 8 + 2 * tq) =
            Mma<T>::pack(dk[n][2 * r] * scale, dk[n][2 * r + 1] * scale);
        *reinterpret_cast<uint32_t*>(drow + 2 * C + n * 8 + 2 * tq) =
            Mma<T>::pack(dv[n][2 * r], dv[n][2 * r + 1]);
      }
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    flash_backward_pipelined_kernel(T* dqkv, float* dq_accum, const T* qkv, const T* dout,
                          const float* lse, const float* delta, int T_, int NH, int C,
                          float scale_log2, float scale) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* sK = reinterpret_cast<T*>(smem_raw);
  T* sV = sK + kBlockElems;
  T* sQ = sV + kBlockElems;        // [2][kTileElems]
  T* sdO = sQ + 2 * kTileElems;    // [2][kTileElems]
  T* sdS2 = sdO + 2 * kTileElems;  // dS^T: [2][128 keys][64 queries]
  float* sLse = reinterpret_cast<float*>(sdS2 + 2 * kBlockElems);  // [2][64]
  float* sDelta = sLse + 2 * kTile;                            // [2][64]

  const int kt = blockIdx.x;  // key block; block 0 has the most work and starts first
  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int k0 = kt * kBlockRows;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane >> 2, tq = lane & 3;
  const int key_lo = k0 + warp * 16;  // this warp's first key
  const int64_t row_stride = 3 * int64_t(C);
  const T* q_base = qkv + int64_t(b) * T_ * row_stride + h * kD;
  const T* k_base = q_base + C;
  const T* v_base = q_base + 2 * C;
  const T* do_base = dout + int64_t(b) * T_ * C + h * kD;
  const float* lse_row = lse + int64_t(bh) * T_;
  const float* delta_row = delta + int64_t(bh) * T_;
  const int n_q = (T_ + kTile - 1) / kTile;
  const int i_begin = k0 / kTile;  // first query tile with a query at or after key k0

  auto load_query_tile = [&](int i, int buf) {
    load_tile<kTile>(sQ + buf * kTileElems, q_base, row_stride, i * kTile, T_);
    load_tile<kTile>(sdO + buf * kTileElems, do_base, C, i * kTile, T_);
    cp_async_commit();
    if (threadIdx.x < kTile) {
      const int q = i * kTile + threadIdx.x;
      // Rows past the end get probability 0 (lse = +inf) and no gradient.
      sLse[buf * kTile + threadIdx.x] = q < T_ ? lse_row[q] : INFINITY;
      sDelta[buf * kTile + threadIdx.x] = q < T_ ? delta_row[q] : 0.0f;
    }
  };

  load_tile<kBlockRows>(sK, k_base, row_stride, k0, T_);
  load_tile<kBlockRows>(sV, v_base, row_stride, k0, T_);
  cp_async_commit();
  load_query_tile(i_begin, 0);
  cp_async_wait<0>();
  __syncthreads();

  // This warp's 16 keys of K and V as A fragments.
  uint32_t kf[4][4], vf[4][4];
#pragma unroll
  for (int kc = 0; kc < 4; ++kc) {
    ldsm_x4(kf[kc][0], kf[kc][1], kf[kc][2], kf[kc][3],
            sK + swz(warp * 16 + (lane % 16), 2 * kc + lane / 16));
    ldsm_x4(vf[kc][0], vf[kc][1], vf[kc][2], vf[kc][3],
            sV + swz(warp * 16 + (lane % 16), 2 * kc + lane / 16));
  }
  float dk[8][4], dv[8][4];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      dk[i][e] = 0.0f;
      dv[i][e] = 0.0f;
    }
  const int dq_q = 16 * (warp & 3);   // dQ: this warp's queries within the tile
  const int dq_d = 32 * (warp >> 2);  // and dims

  // dQ of the tile before (its dS^T in the other buffer), computed after this tile's
  // barrier: one barrier per tile instead of two, and those MMAs overlap this tile's.
  auto dq_tile = [&](int qi, const T* sdS) {
    const int q_lo = qi * kTile;
    float dq[4][4];
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) dq[n][e] = 0.0f;
#pragma unroll
    for (int kc = 0; kc < kBlockRows / 16; ++kc) {
      if (k0 + kc * 16 > q_lo + kTile - 1) break;
      uint32_t a[4];
      ldsm_x4_t(a[0], a[1], a[2], a[3],
                sdS + swz(kc * 16 + (lane % 8) + (lane / 16) * 8, dq_q / 8 + (lane / 8) % 2));
#pragma unroll
      for (int n2 = 0; n2 < 2; ++n2) {
        uint32_t b0, b1, b2, b3;
        ldsm_x4_t(b0, b1, b2, b3,
                  sK + swz(kc * 16 + (lane % 8) + ((lane / 8) % 2) * 8, dq_d / 8 + 2 * n2 + lane / 16));
        Mma<T>::run(dq[2 * n2], a, b0, b1);
        Mma<T>::run(dq[2 * n2 + 1], a, b2, b3);
      }
    }
    const bool odd = tq & 1;
    const int q_row = q_lo + dq_q + g + (odd ? 8 : 0);
#pragma unroll
    for (int n = 0; n < 4; ++n) {
      const float s0 = odd ? dq[n][0] : dq[n][2];
      const float s1 = odd ? dq[n][1] : dq[n][3];
      const float r0 = __shfl_xor_sync(0xffffffffu, s0, 1);
      const float r1 = __shfl_xor_sync(0xffffffffu, s1, 1);
      if (q_row < T_) {
        float* dst = dq_accum + (int64_t(b) * T_ + q_row) * C + h * kD + dq_d + 2 * tq - (odd ? 2 : 0);
        const float4 v = odd ? make_float4(r0, r1, dq[n][2], dq[n][3])
                             : make_float4(dq[n][0], dq[n][1], r0, r1);
        atomic_add4(dst + n * 8, v);
      }
    }
  };

  for (int i = i_begin; i < n_q; ++i) {
    const int buf = (i - i_begin) & 1;
    cp_async_wait<0>();
    __syncthreads();  // tile i landed; every warp is done with tile i - 1
    if (i + 1 < n_q) load_query_tile(i + 1, buf ^ 1);
    if (i > i_begin) dq_tile(i - 1, sdS2 + (buf ^ 1) * kBlockElems);
    T* sdS = sdS2 + buf * kBlockElems;
    const T* q_tile = sQ + buf * kTileElems;
    const T* do_tile = sdO + buf * kTileElems;
    const float* lse_tile = sLse + buf * kTile;
    const float* delta_tile = sDelta + buf * kTile;
    const int q_lo = i * kTile;

    if (key_lo <= q_lo + kTile - 1) {  // some query of the tile sees some key of the warp
      // S^T = K_w Q^T and dP^T = V_w dO^T: 16 keys x 64 queries each.
      float st[8][4], dpt[8][4];
#pragma unroll
      for (int n = 0; n < 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          st[n][e] = 0.0f;
          dpt[n][e] = 0.0f;
        }
#pragma unroll
      for (int kc = 0; kc < 4; ++kc) {
#pragma unroll
        for (int n2 = 0; n2 < 4; ++n2) {
          const int off = swz(n2 * 16 + (lane % 8) + (lane / 16) * 8, 2 * kc + (lane / 8) % 2);
          uint32_t b0, b1, b2, b3;
          ldsm_x4(b0, b1, b2, b3, q_tile + off);
          Mma<T>::run(st[2 * n2], kf[kc], b0, b1);
          Mma<T>::run(st[2 * n2 + 1], kf[kc], b2, b3);
          ldsm_x4(b0, b1, b2, b3, do_tile + off);
          Mma<T>::run(dpt[2 * n2], vf[kc], b0, b1);
          Mma<T>::run(dpt[2 * n2 + 1], vf[kc], b2, b3);
        }
      }
      // P^T and dS^T = P^T (dP^T - delta).
      const bool need_mask = key_lo + 15 > q_lo;
#pragma unroll
      for (int n = 0; n < 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int ql = n * 8 + 2 * tq + (e & 1);  // query within the tile
          const int key = key_lo + g + (e >= 2 ? 8 : 0);
          float p = exp2f(st[n][e] * scale_log2 - lse_tile[ql]);
          if (need_mask && key > q_lo + ql) p = 0.0f;
          st[n][e] = p;
          dpt[n][e] = p * (dpt[n][e] - delta_tile[ql]);
        }
      }
      // dS^T to shared memory (for dQ), as T.
#pragma unroll
      for (int n = 0; n < 8; ++n) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int kr = warp * 16 + g + 8 * r;
          const int qc = n * 8 + 2 * tq;
          *reinterpret_cast<uint32_t*>(sdS + kr * kD + (((qc >> 3) ^ (kr & 7)) << 3) + (qc & 7)) =
              Mma<T>::pack(dpt[n][2 * r], dpt[n][2 * r + 1]);
        }
      }
      // dV += P^T dO and dK += dS^T Q (k = 64 queries in 4 chunks).
#pragma unroll
      for (int kc = 0; kc < 4; ++kc) {
        uint32_t ap[4], ads[4];
        ap[0] = Mma<T>::pack(st[2 * kc][0], st[2 * kc][1]);
        ap[1] = Mma<T>::pack(st[2 * kc][2], st[2 * kc][3]);
        ap[2] = Mma<T>::pack(st[2 * kc + 1][0], st[2 * kc + 1][1]);
        ap[3] = Mma<T>::pack(st[2 * kc + 1][2], st[2 * kc + 1][3]);
        ads[0] = Mma<T>::pack(dpt[2 * kc][0], dpt[2 * kc][1]);
        ads[1] = Mma<T>::pack(dpt[2 * kc][2], dpt[2 * kc][3]);
        ads[2] = Mma<T>::pack(dpt[2 * kc + 1][0], dpt[2 * kc + 1][1]);
        ads[3] = Mma<T>::pack(dpt[2 * kc + 1][2], dpt[2 * kc + 1][3]);
#pragma unroll
        for (int n2 = 0; n2 < 4; ++n2) {
          const int off = swz(kc * 16 + (lane % 8) + ((lane / 8) % 2) * 8, 2 * n2 + lane / 16);
          uint32_t b0, b1, b2, b3;
          ldsm_x4_t(b0, b1, b2, b3, do_tile + off);
          Mma<T>::run(dv[2 * n2], ap, b0, b1);
          Mma<T>::run(dv[2 * n2 + 1], ap, b2, b3);
          ldsm_x4_t(b0, b1, b2, b3, q_tile + off);
          Mma<T>::run(dk[2 * n2], ads, b0, b1);
          Mma<T>::run(dk[2 * n2 + 1], ads, b2, b3);
        }
      }
    }
  }
  __syncthreads();
  dq_tile(n_q - 1, sdS2 + ((n_q - 1 - i_begin) & 1) * kBlockElems);

  // dK (scaled: S = scale Q K^T) and dV into dqkv.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = key_lo + g + 8 * r;
    if (key < T_) {
      T* drow = dqkv + (int64_t(b) * T_ + key) * row_stride + h * kD;
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        *reinterpret_cast<uint32_t*>(drow + C + n * 8 + 2 * tq) =
            Mma<T>::pack(dk[n][2 * r] * scale, dk[n][2 * r + 1] * scale);
        *reinterpret_cast<uint32_t*>(drow + 2 * C + n * 8 + 2 * tq) =
            Mma<T>::pack(dv[n][2 * r], dv[n][2 * r + 1]);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// simple kernels: one thread per row, 32 rows per block, fp32 math, tiles in shared memory

constexpr int kSimpleRows = 32;

template <typename T, int HS>
__device__ __forceinline__ void load_rows_f32(float* dst, const T* base, int64_t row_stride,
                                              int row0, int T_) {
  for (int idx = threadIdx.x; idx < kSimpleRows * HS; idx += blockDim.x) {
    const int r = idx / HS, d = idx % HS;
    const int row = row0 + r;
    dst[idx] = row < T_ ? to_f32<T>(base[int64_t(row) * row_stride + d]) : 0.0f;
  }
}

template <int HS>
__device__ __forceinline__ float dot_smem(const float (&a)[HS], const float* row) {
  float s = 0.0f;
#pragma unroll
  for (int d = 0; d < HS; d += 4) {
    const float4 v = *reinterpret_cast<const float4*>(row + d);
    s += a[d] * v.x + a[d + 1] * v.y + a[d + 2] * v.z + a[d + 3] * v.w;
  }
  return s;
}

// grid (ceil(T / 32), B * NH), 32 threads; shared: K, V tiles (32 x HS fp32 each).
template <typename T, int HS>
__global__ void simple_forward_kernel(T* out, float* lse, const T* qkv, int T_, int NH, int C,
                                      float scale_log2) {
  __shared__ alignas(16) float sK[kSimpleRows * HS];
  __shared__ alignas(16) float sV[kSimpleRows * HS];
  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int q0 = blockIdx.x * kSimpleRows;
  const int query = q0 + threadIdx.x;
  const int64_t row_stride = 3 * int64_t(C);
  const T* q_base = qkv + int64_t(b) * T_ * row_stride + h * HS;
  float q[HS], acc[HS];
#pragma unroll
  for (int d = 0; d < HS; ++d) {
    q[d] = query < T_ ? to_f32<T>(q_base[int64_t(query) * row_stride + d]) * scale_log2 : 0.0f;
    acc[d] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  const int last_key = min(T_ - 1, q0 + kSimpleRows - 1);
  for (int k0 = 0; k0 <= last_key; k0 += kSimpleRows) {
    __syncthreads();
    load_rows_f32<T, HS>(sK, q_base + C, row_stride, k0, T_);
    load_rows_f32<T, HS>(sV, q_base + 2 * C, row_stride, k0, T_);
    __syncthreads();
    for (int kk = 0; kk < kSimpleRows; ++kk) {
      const int key = k0 + kk;
      if (key > query || key >= T_) break;
      float s = 0.0f;
#pragma unroll
      for (int d = 0; d < HS; d += 4) {
        const float4 v = *reinterpret_cast<const float4*>(sK + kk * HS + d);
        s += q[d] * v.x + q[d + 1] * v.y + q[d + 2] * v.z + q[d + 3] * v.w;
      }
      if (s > m) {
        const float c = exp2f(m - s);
        l *= c;
#pragma unroll
        for (int d = 0; d < HS; ++d) acc[d] *= c;
        m = s;
      }
      const float p = exp2f(s - m);
      l += p;
#pragma unroll
      for (int d = 0; d < HS; d += 4) {
        const float4 v = *reinterpret_cast<const float4*>(sV + kk * HS + d);
        acc[d] += p * v.x;
        acc[d + 1] += p * v.y;
        acc[d + 2] += p * v.z;
        acc[d + 3] += p * v.w;
      }
    }
  }
  if (query < T_) {
    T* o = out + (int64_t(b) * T_ + query) * C + h * HS;
    const float inv = 1.0f / l;
#pragma unroll
    for (int d = 0; d < HS; ++d) o[d] = from_f32<T>(acc[d] * inv);
    lse[int64_t(bh) * T_ + query] = m + __log2f(l);
  }
}

// dK, dV: one thread per key; loops over the queries at or after it. Dynamic shared
// memory: Q and dO tiles (32 x HS fp32), lse, delta (32).
template <typename T, int HS>
__global__ void simple_backward_dkdv_kernel(T* dqkv, const T* qkv, const T* dout,
                                            const float* lse, const float* delta, int T_, int NH,
                                            int C, float scale_log2, float scale) {
  extern __shared__ __align__(16) float smem_f[];
  float* sQ = smem_f;
  float* sdO = sQ + kSimpleRows * HS;
  float* sL = sdO + kSimpleRows * HS;
  float* sD = sL + kSimpleRows;
  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int k0 = blockIdx.x * kSimpleRows;
  const int key = k0 + threadIdx.x;
  const int64_t row_stride = 3 * int64_t(C);
  const T* q_base = qkv + int64_t(b) * T_ * row_stride + h * HS;
  const T* do_base = dout + int64_t(b) * T_ * C + h * HS;
  float k[HS], v[HS], dk[HS], dv[HS];
#pragma unroll
  for (int d = 0; d < HS; ++d) {
    k[d] = key < T_ ? to_f32<T>(q_base[int64_t(key) * row_stride + C + d]) : 0.0f;
    v[d] = key < T_ ? to_f32<T>(q_base[int64_t(key) * row_stride + 2 * C + d]) : 0.0f;
    dk[d] = 0.0f;
    dv[d] = 0.0f;
  }
  for (int q0 = k0; q0 < T_; q0 += kSimpleRows) {
    __syncthreads();
    load_rows_f32<T, HS>(sQ, q_base, row_stride, q0, T_);
    load_rows_f32<T, HS>(sdO, do_base, C, q0, T_);
    if (threadIdx.x < kSimpleRows) {
      const int q = q0 + threadIdx.x;
      sL[threadIdx.x] = q < T_ ? lse[int64_t(bh) * T_ + q] : 0.0f;
      sD[threadIdx.x] = q < T_ ? delta[int64_t(bh) * T_ + q] : 0.0f;
    }
    __syncthreads();
    if (key >= T_) continue;
    for (int qq = 0; qq < kSimpleRows; ++qq) {
      const int q = q0 + qq;
      if (q < key || q >= T_) continue;
      const float s = dot_smem<HS>(k, sQ + qq * HS) * scale_log2;
      const float p = exp2f(s - sL[qq]);
      const float dp = dot_smem<HS>(v, sdO + qq * HS);
      const float ds = p * (dp - sD[qq]);
#pragma unroll
      for (int d = 0; d < HS; ++d) {
        dv[d] += p * sdO[qq * HS + d];
        dk[d] += ds * sQ[qq * HS + d];
      }
    }
  }
  if (key < T_) {
    T* drow = dqkv + (int64_t(b) * T_ + key) * row_stride + h * HS;
#pragma unroll
    for (int d = 0; d < HS; ++d) {
      drow[C + d] = from_f32<T>(dk[d] * scale);
      drow[2 * C + d] = from_f32<T>(dv[d]);
    }
  }
}

// dQ: one thread per query; loops over the keys at or before it. Shared: K, V tiles.
template <typename T, int HS>
__global__ void simple_backward_dq_kernel(T* dqkv, const T* qkv, const T* dout,
                                          const float* lse, const float* delta, int T_, int NH,
                                          int C, float scale_log2, float scale) {
  extern __shared__ __align__(16) float smem_f[];
  float* sK = smem_f;
  float* sV = sK + kSimpleRows * HS;
  const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int q0 = blockIdx.x * kSimpleRows;
  const int query = q0 + threadIdx.x;
  const int64_t row_stride = 3 * int64_t(C);
  const T* q_base = qkv + int64_t(b) * T_ * row_stride + h * HS;
  const T* do_base = dout + int64_t(b) * T_ * C + h * HS;
  float q[HS], dO[HS], dq[HS];
  const bool valid = query < T_;
#pragma unroll
  for (int d = 0; d < HS; ++d) {
    q[d] = valid ? to_f32<T>(q_base[int64_t(query) * row_stride + d]) : 0.0f;
    dO[d] = valid ? to_f32<T>(do_base[int64_t(query) * C + d]) : 0.0f;
    dq[d] = 0.0f;
  }
  const float L = valid ? lse[int64_t(bh) * T_ + query] : 0.0f;
  const float D = valid ? delta[int64_t(bh) * T_ + query] : 0.0f;
  const int last_key = min(T_ - 1, q0 + kSimpleRows - 1);
  for (int k0 = 0; k0 <= last_key; k0 += kSimpleRows) {
    __syncthreads();
    load_rows_f32<T, HS>(sK, q_base + C, row_stride, k0, T_);
    load_rows_f32<T, HS>(sV, q_base + 2 * C, row_stride, k0, T_);
    __syncthreads();
    if (!valid) continue;
    for (int kk = 0; kk < kSimpleRows; ++kk) {
      const int key = k0 + kk;
      if (key > query) break;
      const float s = dot_smem<HS>(q, sK + kk * HS) * scale_log2;
      const float p = exp2f(s - L);
      const float dp = dot_smem<HS>(dO, sV + kk * HS);
      const float ds = p * (dp - D);
#pragma unroll
      for (int d = 0; d < HS; ++d) dq[d] += ds * sK[kk * HS + d];
    }
  }
  if (valid) {
    T* drow = dqkv + (int64_t(b) * T_ + query) * row_stride + h * HS;
#pragma unroll
    for (int d = 0; d < HS; ++d) drow[d] = from_f32<T>(dq[d] * scale);
  }
}

template <typename F>
void dispatch_head_size(int64_t hs, F&& f) {
  switch (hs) {
    case 16: f(std::integral_constant<int, 16>{}); break;
    case 32: f(std::integral_constant<int, 32>{}); break;
    case 64: f(std::integral_constant<int, 64>{}); break;
    case 128: f(std::integral_constant<int, 128>{}); break;
    default:
      throw Error("CUDA attention supports head sizes 16, 32, 64 and 128 (got " +
                  std::to_string(hs) + "): choose n_embd / n_head among them");
  }
}

bool use_flash(DType t, int64_t hs, AttentionImpl impl) {
  if (impl == AttentionImpl::cudnn)
    throw Error("internal: cuDNN attention runs through CudnnAttention, not attention_forward");
  const bool ok = attention_flash_supported(t, hs);
  if (impl != AttentionImpl::automatic && impl != AttentionImpl::simple && !ok)
    throw Error("flash attention needs bf16 or fp16 and head size 64");
  return impl != AttentionImpl::simple && ok;
}

template <typename K>
void set_smem(K kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    AISCALE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(bytes)));
}

}  // namespace

bool attention_flash_supported(DType t, int64_t head_size) {
  return (t == DType::bf16 || t == DType::f16) && head_size == kD;
}

bool attention_supported(DType, int64_t head_size) {
  return head_size == 16 || head_size == 32 || head_size == 64 || head_size == 128;
}

void attention_forward(DType t, void* out, float* lse, const void* qkv, int64_t B, int64_t T,
                       int64_t C, int64_t NH, AttentionImpl impl, cudaStream_t s) {
  const int64_t HS = C / NH;
  const float scale_log2 = kLog2e / std::sqrt(static_cast<float>(HS));
  if (use_flash(t, HS, impl)) {
    const dim3 grid(static_cast<unsigned>(ceil_div(T, kBlockRows)), static_cast<unsigned>(B * NH));
    auto run = [&](auto tag) {
      using X = decltype(tag);
      if (impl == AttentionImpl::flash_narrow)
        flash_forward_kernel<X><<<grid, kThreads, 0, s>>>(
            static_cast<X*>(out), lse, static_cast<const X*>(qkv), int(T), int(NH), int(C), scale_log2);
      else if (impl == AttentionImpl::flash_occ3)
        flash_forward_wide_kernel<X, 3><<<grid, kWideThreads, 0, s>>>(
            static_cast<X*>(out), lse, static_cast<const X*>(qkv), int(T), int(NH), int(C), scale_log2);
      else
        flash_forward_wide_kernel<X, 2><<<grid, kWideThreads, 0, s>>>(
            static_cast<X*>(out), lse, static_cast<const X*>(qkv), int(T), int(NH), int(C), scale_log2);
      AISCALE_CUDA_LAUNCH_CHECK();
    };
    if (t == DType::bf16) run(bf16{});
    else run(f16{});
    return;
  }
  dispatch_dtype(t, [&](auto tag) {
    using X = decltype(tag);
    dispatch_head_size(HS, [&](auto hs) {
      constexpr int H = decltype(hs)::value;
      const dim3 grid(static_cast<unsigned>(ceil_div(T, kSimpleRows)), static_cast<unsigned>(B * NH));
      simple_forward_kernel<X, H><<<grid, kSimpleRows, 0, s>>>(
          static_cast<X*>(out), lse, static_cast<const X*>(qkv), int(T), int(NH), int(C),
          scale_log2);
      AISCALE_CUDA_LAUNCH_CHECK();
    });
  });
}

void attention_backward(DType t, void* dqkv, const void* dout, const void* qkv,
                        const void* out, const float* lse, int64_t B, int64_t T, int64_t C,
                        int64_t NH, float* dq_accum, float* delta, AttentionImpl impl,
                        cudaStream_t s) {
  const int64_t HS = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const float scale_log2 = kLog2e * scale;
  const bool flash = use_flash(t, HS, impl);
  dispatch_dtype(t, [&](auto tag) {
    using X = decltype(tag);
    AISCALE_CUDA_REQUIRE(HS % Pack<X>::N == 0, "attention: head size " + std::to_string(HS));
    const size_t smem = sizeof(float) * kDeltaWarps * size_t(C / Pack<X>::N);
    auto kernel = attention_delta_rows_kernel<X>;
    set_smem(kernel, smem);
    kernel<<<static_cast<unsigned>(ceil_div(B * T, kDeltaWarps)), kDeltaWarps * 32, smem, s>>>(
        delta, flash ? dq_accum : nullptr, static_cast<const X*>(dout),
        static_cast<const X*>(out), B * T, int(T), int(NH), int(C), int(HS));
    AISCALE_CUDA_LAUNCH_CHECK();
  });
  if (flash) {
    const dim3 grid(static_cast<unsigned>(ceil_div(T, kBlockRows)), static_cast<unsigned>(B * NH));
    auto run = [&](auto tag) {
      using X = decltype(tag);
      const bool pipelined = impl != AttentionImpl::flash_two_barrier;
      auto kernel = pipelined ? flash_backward_pipelined_kernel<X> : flash_backward_kernel<X>;
      const size_t smem = pipelined ? kBwdPipelinedSmemBytes : kBwdSmemBytes;
      set_smem(kernel, smem);
      kernel<<<grid, kThreads, smem, s>>>(
          static_cast<X*>(dqkv), dq_accum, static_cast<const X*>(qkv),
          static_cast<const X*>(dout), lse, delta, int(T), int(NH), int(C), scale_log2, scale);
      AISCALE_CUDA_LAUNCH_CHECK();
      const int64_t items = ceil_div(B * T * C, 4);
      attention_dq_convert_kernel<X><<<static_cast<unsigned>(ceil_div(items, 256)), 256, 0, s>>>(
          static_cast<X*>(dqkv), dq_accum, B * T, int(C), scale);
      AISCALE_CUDA_LAUNCH_CHECK();
    };
    if (t == DType::bf16) run(bf16{});
    else run(f16{});
    return;
  }
  dispatch_dtype(t, [&](auto tag) {
    using X = decltype(tag);
    dispatch_head_size(HS, [&](auto hs) {
      constexpr int H = decltype(hs)::value;
      const dim3 grid(static_cast<unsigned>(ceil_div(T, kSimpleRows)), static_cast<unsigned>(B * NH));
      const size_t smem_kv = sizeof(float) * (2 * kSimpleRows * H + 2 * kSimpleRows);
      auto k1 = simple_backward_dkdv_kernel<X, H>;
      set_smem(k1, smem_kv);
      k1<<<grid, kSimpleRows, smem_kv, s>>>(static_cast<X*>(dqkv), static_cast<const X*>(qkv),
                                            static_cast<const X*>(dout), lse, delta, int(T),
                                            int(NH), int(C), scale_log2, scale);
      AISCALE_CUDA_LAUNCH_CHECK();
      const size_t smem_q = sizeof(float) * 2 * kSimpleRows * H;
      auto k2 = simple_backward_dq_kernel<X, H>;
      set_smem(k2, smem_q);
      k2<<<grid, kSimpleRows, smem_q, s>>>(static_cast<X*>(dqkv), static_cast<const X*>(qkv),
                                           static_cast<const X*>(dout), lse, delta, int(T),
                                           int(NH), int(C), scale_log2, scale);
      AISCALE_CUDA_LAUNCH_CHECK();
    });
  });
}

}  // namespace aiscale::cuda
