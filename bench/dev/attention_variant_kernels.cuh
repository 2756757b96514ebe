// The attention kernels that lost their measurements, kept here (not in src/) so that a
// new idea can be timed against them and against the product's kernels, which this file
// builds on (src/aiscale/ops/cuda/attention/). What retired each one, with dates and cards:
// docs/design/ops.md.
//
// flash_narrow: forward with 16 query rows per warp (8 warps per 128-query block); the
//   product's forward gives each warp 32 rows so that every K / V fragment feeds two MMAs.
// flash_two_barrier: backward computing a query tile's dQ between two barriers; the
//   product's backward computes the previous tile's dQ after the current tile's barrier.
// (flash_occ3, the product's forward capped for 3 blocks per SM, needs no code of its own:
//  flash_forward_wide_kernel<T, 3>.)
#pragma once
#include "aiscale/ops/cuda/attention/common.cuh"
#include "aiscale/ops/cuda/attention/flash_backward.cuh"
#include "aiscale/ops/cuda/attention/flash_forward.cuh"

namespace aiscale::cuda {
namespace {

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

}  // namespace
}  // namespace aiscale::cuda
