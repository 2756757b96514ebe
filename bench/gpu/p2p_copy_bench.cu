// Peer-to-peer copy bandwidth between GPU 0 and GPU 1 through the copy engines, as the
// copy-engine gradient exchange uses them: one copy cut into k parts on k streams (k = 1,
// 2, 4, 8), one direction and both at once, for the sizes of the exchange's messages (a
// half bucket, the d(res0) all-gather, the embedding bucket). Prints one JSON line per
// case. Measurement only (docs/design/gradient-exchange.md), built as aiscale_p2p_copy_bench:
//   build/cuda/bench/gpu/aiscale_p2p_copy_bench
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "aiscale/ops/cuda/common.cuh"

struct Side {
  int dev;
  char* src;
  char* dst_on_peer;  // in the other GPU's memory
  std::vector<cudaStream_t> streams;
  cudaEvent_t start, fork;
  std::vector<cudaEvent_t> joins;
};

int run() {
  int n = 0;
  AISCALE_CUDA_CHECK(cudaGetDeviceCount(&n));
  if (n < 2) {
    std::fprintf(stderr, "needs 2 GPUs\n");
    return 77;
  }
  const size_t max_bytes = size_t(160) << 20;
  Side side[2];
  for (int d = 0; d < 2; ++d) {
    AISCALE_CUDA_CHECK(cudaSetDevice(d));
    AISCALE_CUDA_CHECK(cudaDeviceEnablePeerAccess(1 - d, 0));
    side[d].dev = d;
    AISCALE_CUDA_CHECK(cudaMalloc(&side[d].src, max_bytes));
    AISCALE_CUDA_CHECK(cudaMemset(side[d].src, 1, max_bytes));
  }
  for (int d = 0; d < 2; ++d) {
    AISCALE_CUDA_CHECK(cudaSetDevice(1 - d));
    AISCALE_CUDA_CHECK(cudaMalloc(&side[d].dst_on_peer, max_bytes));
  }
  for (int d = 0; d < 2; ++d) {
    AISCALE_CUDA_CHECK(cudaSetDevice(d));
    side[d].streams.resize(8);
    side[d].joins.resize(8);
    for (int k = 0; k < 8; ++k) {
      AISCALE_CUDA_CHECK(cudaStreamCreateWithFlags(&side[d].streams[k], cudaStreamNonBlocking));
      AISCALE_CUDA_CHECK(cudaEventCreateWithFlags(&side[d].joins[k], cudaEventDisableTiming));
    }
    AISCALE_CUDA_CHECK(cudaEventCreate(&side[d].start));
    AISCALE_CUDA_CHECK(cudaEventCreateWithFlags(&side[d].fork, cudaEventDisableTiming));
  }
  const size_t sizes[] = {size_t(4) << 20, size_t(14) << 20, size_t(25) << 20, size_t(78) << 20,
                          size_t(157) << 20};
  const int ks[] = {1, 2, 4, 8};
  for (int both = 0; both < 2; ++both) {
    for (size_t bytes : sizes) {
      for (int k : ks) {
        const int reps = 20;
        std::vector<float> ms;
        for (int rep = 0; rep < reps + 3; ++rep) {
          cudaEvent_t stop[2];
          for (int d = 0; d <= both; ++d) {
            Side& s = side[d];
            AISCALE_CUDA_CHECK(cudaSetDevice(d));
            AISCALE_CUDA_CHECK(cudaEventCreate(&stop[d]));
            cudaStream_t main = s.streams[0];
            AISCALE_CUDA_CHECK(cudaEventRecord(s.start, main));
            AISCALE_CUDA_CHECK(cudaEventRecord(s.fork, main));
            const size_t part = (bytes / k + 255) / 256 * 256;
            for (int j = 0; j < k; ++j) {
              const size_t off = part * j;
              if (off >= bytes) break;
              const size_t len = std::min(part, bytes - off);
              if (j > 0) AISCALE_CUDA_CHECK(cudaStreamWaitEvent(s.streams[j], s.fork, 0));
              AISCALE_CUDA_CHECK(cudaMemcpyAsync(s.dst_on_peer + off, s.src + off, len, cudaMemcpyDeviceToDevice,
                                    s.streams[j]));
              if (j > 0) {
                AISCALE_CUDA_CHECK(cudaEventRecord(s.joins[j], s.streams[j]));
                AISCALE_CUDA_CHECK(cudaStreamWaitEvent(main, s.joins[j], 0));
              }
            }
            AISCALE_CUDA_CHECK(cudaEventRecord(stop[d], main));
          }
          for (int d = 0; d <= both; ++d) {
            AISCALE_CUDA_CHECK(cudaSetDevice(d));
            AISCALE_CUDA_CHECK(cudaEventSynchronize(stop[d]));
            float t = 0;
            AISCALE_CUDA_CHECK(cudaEventElapsedTime(&t, side[d].start, stop[d]));
            if (rep >= 3) ms.push_back(t);
            AISCALE_CUDA_CHECK(cudaEventDestroy(stop[d]));
          }
        }
        std::sort(ms.begin(), ms.end());
        const float med = ms[ms.size() / 2];
        std::printf("{\"directions\": %d, \"bytes\": %zu, \"streams\": %d, \"median_ms\": %.4f, "
                    "\"GBps_per_direction\": %.1f}\n",
                    both + 1, bytes, k, med, bytes / (med * 1e-3) / 1e9);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

int main() {
  try {
    return run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
