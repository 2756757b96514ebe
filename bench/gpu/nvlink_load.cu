// NVLink traffic without work on the receiving GPU's SMs or copy engines, for a control
// experiment: does link activity alone slow a power-capped GPU training beside it?
// GPU `initiator` pulls `bytes` from GPU `target`'s memory and pushes them back, with its
// own copy engine, every `period_us` microseconds (0: back to back), for `seconds`.
// The copy-engine gradient exchange of GPT-2 124M on 2 GPUs moves about 28 MB each way per
// 1.3 ms layer of backward (a bucket's chunk and then its sum); 14 MiB every 1.3 ms is
// half of that, spread over the whole step. Measurement only
// (docs/design/gradient-exchange.md), built as aiscale_nvlink_load and run by
// bench/gpu/ddp_phases.sh (SET=nvlink):
//   build/cuda/bench/gpu/aiscale_nvlink_load SECONDS BYTES PERIOD_US [INITIATOR TARGET]
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "aiscale/ops/cuda/common.cuh"

int run(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s SECONDS BYTES PERIOD_US [INITIATOR TARGET]\n", argv[0]);
    return 2;
  }
  const double seconds = std::atof(argv[1]);
  const size_t bytes = std::strtoull(argv[2], nullptr, 10);
  const long period_us = std::atol(argv[3]);
  const int initiator = argc > 4 ? std::atoi(argv[4]) : 1;
  const int target = argc > 5 ? std::atoi(argv[5]) : 0;
  char* remote = nullptr;
  AISCALE_CUDA_CHECK(cudaSetDevice(target));
  AISCALE_CUDA_CHECK(cudaMalloc(&remote, bytes));
  AISCALE_CUDA_CHECK(cudaSetDevice(initiator));
  AISCALE_CUDA_CHECK(cudaDeviceEnablePeerAccess(target, 0));
  char *a = nullptr, *b = nullptr;
  AISCALE_CUDA_CHECK(cudaMalloc(&a, bytes));
  AISCALE_CUDA_CHECK(cudaMalloc(&b, bytes));
  cudaStream_t s;
  AISCALE_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const auto start = std::chrono::steady_clock::now();
  auto next = start;
  long rounds = 0;
  for (;;) {
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (t >= seconds) break;
    AISCALE_CUDA_CHECK(cudaMemcpyAsync(remote, a, bytes, cudaMemcpyDeviceToDevice, s));  // push
    AISCALE_CUDA_CHECK(cudaMemcpyAsync(b, remote, bytes, cudaMemcpyDeviceToDevice, s));  // pull
    AISCALE_CUDA_CHECK(cudaStreamSynchronize(s));
    ++rounds;
    if (period_us > 0) {
      next += std::chrono::microseconds(period_us);
      std::this_thread::sleep_until(next);
    }
  }
  const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("{\"rounds\": %ld, \"seconds\": %.2f, \"GBps_each_way\": %.1f}\n", rounds, t,
              double(rounds) * double(bytes) / t / 1e9);
  return 0;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
