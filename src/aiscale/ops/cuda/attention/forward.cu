// Causal attention forward: which kernel runs for a choice of AttentionImpl, and the
// launches (kernels in flash_forward.cuh and simple.cuh; the family in common.cuh).
#include "aiscale/ops/cuda/attention/common.cuh"
#include "aiscale/ops/cuda/attention/flash_forward.cuh"
#include "aiscale/ops/cuda/attention/simple.cuh"

namespace aiscale::cuda {

const char* attention_impl_name(AttentionImpl impl) {
  switch (impl) {
    case AttentionImpl::automatic: return "auto";
    case AttentionImpl::cudnn: return "cudnn";
    case AttentionImpl::flash: return "flash";
    case AttentionImpl::simple: return "simple";
  }
  return "?";
}

bool attention_flash_supported(DType t, int64_t head_size) {
  return coverage::attention_flash_ok(t, head_size);
}

bool attention_supported(DType, int64_t head_size) {
  return coverage::attention_head_size_ok(head_size);
}

void attention_forward(DType t, void* out, float* lse, const void* qkv, int64_t B, int64_t T,
                       int64_t C, int64_t NH, AttentionImpl impl, cudaStream_t s) {
  const int64_t HS = C / NH;
  const float scale_log2 = kLog2e / std::sqrt(static_cast<float>(HS));
  if (use_flash(t, HS, impl))
    dispatch_half(t, [&](auto tag) {
      using X = decltype(tag);
      flash_forward_wide_kernel<X, 2><<<row_blocks(T, kBlockRows, B, NH), kWideThreads, 0, s>>>(
          static_cast<X*>(out), lse, static_cast<const X*>(qkv), int(T), int(NH), int(C), scale_log2);
    });
  else
    dispatch_simple(t, HS, [&](auto tag, auto hs) {
      using X = decltype(tag);
      const dim3 grid = row_blocks(T, kSimpleRows, B, NH);
      simple_forward_kernel<X, decltype(hs)::value><<<grid, kSimpleRows, 0, s>>>(
          static_cast<X*>(out), lse, static_cast<const X*>(qkv), int(T), int(NH), int(C), scale_log2);
    });
  AISCALE_CUDA_LAUNCH_CHECK();
}

}  // namespace aiscale::cuda
