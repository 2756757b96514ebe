// test_ops on the CUDA backend: the checks of every CUDA op against the host reference
// (fp32, bf16, fp16; fused epilogue variants; the attention kernels), the CUDA GPT model
// against the CPU model, and the per-op timings. Compiled only in CUDA builds; at run
// time, without a visible GPU, the modes say so and exit 77 (ctest: skipped).
//
// Error measure: relative error ||gpu - ref|| / ||ref||, the inputs rounded to the device
// dtype first so that only the kernel's own arithmetic is measured. Tolerances per op and
// dtype (tol_for): fp32 2e-5 for single ops (fp32 GEMMs without TF32, fast exp), 1e-4 for
// attention; bf16 2e-2 (outputs rounded to bf16: ~4e-3 each; attention rounds P and dS
// too); fp16 5e-3. fp32 statistics and gradients kept in fp32 (LayerNorm's mean and rstd,
// parameter gradients, AdamW state) have their own, tighter tolerances where checked.
// The GPT model: fp32 loss 1e-5, gradients 1e-3; bf16 loss 1e-2, gradients 6e-2 (the
// whole chain in bf16 activations against an fp32 model).
#pragma once
#include <cuda_runtime.h>

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "../harness.h"
#include "aiscale/ops/cuda/cuda_ops.cuh"
#include "device_buffer.h"

namespace aiscale::ops::testing {

inline double tol_for(DType t, double f32_tol = 2e-5) {
  return t == DType::f32 ? f32_tol : t == DType::bf16 ? 2e-2 : 5e-3;
}

// Records checks into the current family's Outcome, each named with its dtype.
struct Recorder {
  Outcome* outcome = nullptr;
  void record(const std::string& what, DType t, double err, double tol) {
    outcome->check(what + " [" + std::string(dtype_name(t)) + "]", err, tol);
  }
  void check(const std::string& what, bool ok) { outcome->check(what, ok ? 0.0 : 1.0, 0.0); }
};

// What the CUDA cases share: one cuBLASLt handle, fp32 scratch, the random stream.
struct CudaContext {
  cuda::Gemm* gemm = nullptr;
  float* scratch = nullptr;  // 64 MiB of fp32 scratch for bias / LayerNorm partials
  std::mt19937 rng{1234};
  Recorder r;
};

// One op family on the CUDA backend: the dtypes it runs in and, per dtype, its checks.
struct CudaFamily {
  std::string name;      // --op accepts it or any of `ops`
  std::vector<Op> ops;   // empty for a composite (the GPT model)
  std::vector<DType> dtypes;
  std::function<void(CudaContext&, DType)> run;
  std::string tolerance_note;
};

std::vector<CudaFamily> cuda_families();
CudaFamily cuda_matmul_family();
CudaFamily cuda_layernorm_family();
CudaFamily cuda_attention_family();
CudaFamily cuda_softmax_xent_family();
CudaFamily cuda_embedding_family();
CudaFamily cuda_elementwise_family();
CudaFamily cuda_fused_small_family();
CudaFamily cuda_adamw_family();
CudaFamily cuda_model_family();
CudaFamily cuda_llama_ops_family();    // cases_llama.cpp
CudaFamily cuda_llama_model_family();
CudaFamily cuda_fp8_family();         // cases_fp8.cpp

// Whether a CUDA GPU is visible; otherwise `why` says what is missing.
bool cuda_device_visible(std::string& why);

// Modes on the CUDA backend. dtype: "" for all of a family's dtypes.
int run_cuda_test_mode(const std::string& op, const std::string& dtype, bool verbose);
int run_cuda_perf_mode(const std::string& op, bool profile_once);

}  // namespace aiscale::ops::testing
