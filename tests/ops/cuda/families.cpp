// The `test` mode of test_ops on the CUDA backend: every CUDA family in each of its
// dtypes, one summary line per family and dtype (--verbose: every check).
#include <cstdio>
#include <string>

#include "aiscale/core/timer.h"
#include "cuda_harness.h"

namespace aiscale::ops::testing {

std::vector<CudaFamily> cuda_families() {
  return {cuda_matmul_family(),       cuda_layernorm_family(),   cuda_attention_family(),
          cuda_softmax_xent_family(), cuda_embedding_family(),   cuda_elementwise_family(),
          cuda_fused_small_family(),  cuda_adamw_family(),       cuda_model_family(),
          cuda_llama_ops_family(),    cuda_llama_model_family(), cuda_fp8_family()};
}

bool cuda_device_visible(std::string& why) {
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess) {
    why = std::string("no CUDA GPU visible (") + cudaGetErrorString(e) + ")";
    return false;
  }
  if (devices == 0) {
    why = "no CUDA GPU visible";
    return false;
  }
  return true;
}

namespace {

bool selects(const CudaFamily& f, const std::string& name) {
  if (name.empty() || name == f.name) return true;
  for (Op op : f.ops) {
    if (op_name(op) == name) return true;
  }
  return false;
}

}  // namespace

int run_cuda_test_mode(const std::string& op, const std::string& dtype, bool verbose) {
  std::string why;
  if (!cuda_device_visible(why)) {
    std::printf("SKIP cuda: %s; the CUDA checks did not run\n", why.c_str());
    return 77;
  }
  cudaDeviceProp prop{};
  dev::check_cuda(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("cuda: %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount);
  void* ws = nullptr;
  float* scratch = nullptr;
  dev::check_cuda(cudaMalloc(&ws, cuda::Gemm::kWorkspaceBytes), "workspace");
  dev::check_cuda(cudaMalloc(&scratch, size_t(64) << 20), "scratch");
  int failed = 0, passed = 0, selected = 0, checks = 0;
  {
    cuda::Gemm gemm(ws, cuda::Gemm::kWorkspaceBytes);
    CudaContext x;
    x.gemm = &gemm;
    x.scratch = scratch;
    for (const CudaFamily& f : cuda_families()) {
      if (!selects(f, op)) continue;
      for (DType t : f.dtypes) {
        if (!dtype.empty() && dtype_name(t) != dtype) continue;
        ++selected;
        Timer timer;
        Outcome outcome;
        outcome.verbose = verbose;
        x.r.outcome = &outcome;
        try {
          f.run(x, t);
        } catch (const std::exception& e) {
          outcome.fail(std::string("error: ") + e.what());
        }
        std::printf("%s cuda %-13s %-4s %4d checks, worst %.2f of tolerance (%s)%s%s [%.2fs]\n",
                    outcome.ok() ? "PASS" : "FAIL", f.name.c_str(),
                    std::string(dtype_name(t)).c_str(), outcome.checks, outcome.worst_ratio,
                    outcome.worst_what.c_str(), f.tolerance_note.empty() ? "" : "; ",
                    f.tolerance_note.c_str(), timer.seconds());
        for (const std::string& m : outcome.failures) std::printf("  FAILED %s\n", m.c_str());
        std::fflush(stdout);
        checks += outcome.checks;
        passed += outcome.checks - int(outcome.failures.size());
        failed += int(outcome.failures.size());
      }
    }
  }
  cudaFree(ws);
  cudaFree(scratch);
  if (selected == 0) {
    std::printf("no CUDA op family or dtype matches '%s' %s\n", op.c_str(), dtype.c_str());
    return 2;
  }
  std::printf("%s: cuda checks %d passed, %d failed (of %d, vs the host reference)\n",
              failed ? "FAILED" : "OK", passed, failed, checks);
  return failed ? 1 : 0;
}

}  // namespace aiscale::ops::testing
