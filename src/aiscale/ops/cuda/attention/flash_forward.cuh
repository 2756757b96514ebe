// Causal attention, the flash forward kernel (see common.cuh for the family).
#pragma once
#include "aiscale/ops/cuda/attention/common.cuh"

namespace aiscale::cuda {
namespace {

// Forward, wide warps: grid (ceil(T / 128), B * NH), 128 threads; a block owns 128 queries,
// each warp 32 of them (two 16-row MMA tiles), so every K / V fragment read from shared
// memory feeds two MMAs (a 16-row-per-warp forward, kept in the kernel workbench, is
// bound by shared-memory bandwidth). MIN_BLOCKS is 2 in the product; the workbench builds
// it with 3 (capped registers for 3 blocks per SM: spills, slower).
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
  const int q0 = qt * kBlockRows;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane >> 2, tq = lane & 3;
  const int row_lo = q0 + warp * 32;  // this warp's first query
  const HeadRows<T> rows(qkv, NH, T_, C, kD);

  load_tile<kBlockRows, kWideThreads>(sQ, rows.q, rows.stride, q0, T_);
  cp_async_commit();
  load_tile<kTile, kWideThreads>(sK[0], rows.k, rows.stride, 0, T_);
  load_tile<kTile, kWideThreads>(sV[0], rows.v, rows.stride, 0, T_);
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
  zero(o);
  float row_max[2][2] = {{-INFINITY, -INFINITY}, {-INFINITY, -INFINITY}};
  float row_sum[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};

  const int n_kv = min((T_ + kTile - 1) / kTile, (q0 + kBlockRows - 1) / kTile + 1);
  for (int j = 0; j < n_kv; ++j) {
    const int buf = j & 1;
    if (j + 1 < n_kv) {
      load_tile<kTile, kWideThreads>(sK[buf ^ 1], rows.k, rows.stride, (j + 1) * kTile, T_);
      load_tile<kTile, kWideThreads>(sV[buf ^ 1], rows.v, rows.stride, (j + 1) * kTile, T_);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();

    const int k0 = j * kTile;
    if (k0 <= row_lo + 31) {
      float sc[2][8][4];
      zero(sc);
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
        T* o_row = out + (int64_t(rows.b) * T_ + row) * C + rows.h * kD;
#pragma unroll
        for (int nb = 0; nb < 8; ++nb) {
          *reinterpret_cast<uint32_t*>(o_row + nb * 8 + 2 * tq) =
              Mma<T>::pack(o[m][nb][2 * r] * inv, o[m][nb][2 * r + 1] * inv);
        }
        if (tq == 0) lse[int64_t(rows.bh) * T_ + row] = row_max[m][r] + __log2f(l);
      }
    }
  }
}

}  // namespace
}  // namespace aiscale::cuda
