// Causal attention, the flash backward kernels (see common.cuh for the family): the
// preprocessing (delta, zeroed dQ accumulator), the main kernel and the dQ conversion.
#pragma once
#include "aiscale/ops/cuda/attention/common.cuh"

namespace aiscale::cuda {
namespace {

// Backward preprocessing: delta (B, NH, T) = rowsum(dO * O) per head, and (flash) zeroes
// the dQ accumulator (B, T, C). One warp per token row (all heads): coalesced loads of dO
// and O, per-pack partial dot products in shared memory, summed per head in a fixed order.
// (A thread per (token, head) made strided 16-byte loads: 0.15 ms per layer on an H200,
// 2026-11-26.)
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

// Backward. grid (ceil(T / 128), B * NH), 256 threads, kBwdPipelinedSmemBytes of dynamic
// shared memory: K, V of the block's 128 keys, Q and dO tiles of 64 queries (two buffers
// each), dS^T (128 keys x 64 queries, two buffers), lse and delta (two buffers each). Warp
// w owns keys 16w .. 16w + 15 for dK, dV; for dQ of a query tile, warp w computes queries
// 16 (w % 4) .. + 15, dims 32 (w / 4) .. + 31 and adds them with 16-byte atomics. One
// barrier per query tile: the previous tile's dQ is computed after the current tile's
// barrier, from the other dS^T buffer, so that those MMAs overlap the current tile's.
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
  const int k0 = kt * kBlockRows;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane >> 2, tq = lane & 3;
  const int key_lo = k0 + warp * 16;  // this warp's first key
  const HeadRows<T> rows(qkv, NH, T_, C, kD);
  const T* do_base = dout + int64_t(rows.b) * T_ * C + rows.h * kD;
  const float* lse_row = lse + int64_t(rows.bh) * T_;
  const float* delta_row = delta + int64_t(rows.bh) * T_;
  const int n_q = (T_ + kTile - 1) / kTile;
  const int i_begin = k0 / kTile;  // first query tile with a query at or after key k0

  auto load_query_tile = [&](int i, int buf) {
    load_tile<kTile>(sQ + buf * kTileElems, rows.q, rows.stride, i * kTile, T_);
    load_tile<kTile>(sdO + buf * kTileElems, do_base, C, i * kTile, T_);
    cp_async_commit();
    if (threadIdx.x < kTile) {
      const int q = i * kTile + threadIdx.x;
      // Rows past the end get probability 0 (lse = +inf) and no gradient.
      sLse[buf * kTile + threadIdx.x] = q < T_ ? lse_row[q] : INFINITY;
      sDelta[buf * kTile + threadIdx.x] = q < T_ ? delta_row[q] : 0.0f;
    }
  };

  load_tile<kBlockRows>(sK, rows.k, rows.stride, k0, T_);
  load_tile<kBlockRows>(sV, rows.v, rows.stride, k0, T_);
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
  zero(dk);
  zero(dv);
  const int dq_q = 16 * (warp & 3);   // dQ: this warp's queries within the tile
  const int dq_d = 32 * (warp >> 2);  // and dims

  // dQ of the tile before (its dS^T in the other buffer), computed after this tile's
  // barrier: one barrier per tile instead of two, and those MMAs overlap this tile's.
  auto dq_tile = [&](int qi, const T* sdS) {
    const int q_lo = qi * kTile;
    float dq[4][4];
    zero(dq);
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
        float* dst = dq_accum + (int64_t(rows.b) * T_ + q_row) * C + rows.h * kD + dq_d + 2 * tq - (odd ? 2 : 0);
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
      zero(st);
      zero(dpt);
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
      T* drow = dqkv + (int64_t(rows.b) * T_ + key) * rows.stride + rows.h * kD;
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
