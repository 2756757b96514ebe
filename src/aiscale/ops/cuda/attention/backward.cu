// Causal attention backward: the preprocessing (delta = rowsum(dO * O)), then the flash
// or simple kernels (flash_backward.cuh, simple.cuh; the family in common.cuh).
#include "aiscale/ops/cuda/attention/common.cuh"
#include "aiscale/ops/cuda/attention/flash_backward.cuh"
#include "aiscale/ops/cuda/attention/simple.cuh"

namespace aiscale::cuda {

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
    const dim3 grid = row_blocks(T, kBlockRows, B, NH);
    dispatch_half(t, [&](auto tag) {
      using X = decltype(tag);
      auto kernel = flash_backward_pipelined_kernel<X>;
      const size_t smem = kBwdPipelinedSmemBytes;
      set_smem(kernel, smem);
      kernel<<<grid, kThreads, smem, s>>>(
          static_cast<X*>(dqkv), dq_accum, static_cast<const X*>(qkv),
          static_cast<const X*>(dout), lse, delta, int(T), int(NH), int(C), scale_log2, scale);
      AISCALE_CUDA_LAUNCH_CHECK();
      const int64_t items = ceil_div(B * T * C, 4);
      attention_dq_convert_kernel<X><<<static_cast<unsigned>(ceil_div(items, 256)), 256, 0, s>>>(
          static_cast<X*>(dqkv), dq_accum, B * T, int(C), scale);
      AISCALE_CUDA_LAUNCH_CHECK();
    });
    return;
  }
  dispatch_simple(t, HS, [&](auto tag, auto hs) {
    using X = decltype(tag);
    constexpr int H = decltype(hs)::value;
    const dim3 grid = row_blocks(T, kSimpleRows, B, NH);
    // dK and dV, then dQ: the same arguments, each kernel with its shared memory.
    auto launch = [&](auto kernel, size_t smem) {
      set_smem(kernel, smem);
      kernel<<<grid, kSimpleRows, smem, s>>>(static_cast<X*>(dqkv), static_cast<const X*>(qkv),
                                             static_cast<const X*>(dout), lse, delta, int(T),
                                             int(NH), int(C), scale_log2, scale);
      AISCALE_CUDA_LAUNCH_CHECK();
    };
    launch(simple_backward_dkdv_kernel<X, H>,
           sizeof(float) * (2 * kSimpleRows * H + 2 * kSimpleRows));
    launch(simple_backward_dq_kernel<X, H>, sizeof(float) * 2 * kSimpleRows * H);
  });
}

}  // namespace aiscale::cuda
