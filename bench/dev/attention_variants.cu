// Kernel workbench: the attention variants that lost their measurements, checked against
// the CPU reference and timed beside the product's flash (and cuDNN, where built) kernels.
// Built as its own program (aiscale_attention_variants), never linked into aiscale.
//
//   aiscale_attention_variants [check | perf | all]     (default: all)
//
// check: each variant against ops::reference_backend() in bf16 and fp16 (relative error
//   ||gpu - ref|| / ||ref||, tolerance 2e-2 bf16, 5e-3 fp16: outputs rounded to 16 bits,
//   P and dS too), forward, then dQ, dK, dV of the backward.
// perf: forward and backward at GPT-2 124M shapes (B=16, T=1024, 12 heads of 64, bf16),
//   one JSON line per kernel: median ms of 20 runs and TFLOP/s of the causal work.
// Exit status: 0 all checks passed, 1 a check failed, 77 no GPU visible.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "aiscale/ops/cuda/cudnn_attention.h"
#include "aiscale/ops/ops.h"
#include "attention_variant_kernels.cuh"
#include "device_buffer.h"

namespace aiscale::cuda {
namespace {

enum class Variant { flash, flash_narrow, flash_occ3, flash_two_barrier };
const char* variant_name(Variant v) {
  switch (v) {
    case Variant::flash: return "flash";
    case Variant::flash_narrow: return "flash_narrow";
    case Variant::flash_occ3: return "flash_occ3";
    case Variant::flash_two_barrier: return "flash_two_barrier";
  }
  return "?";
}

// Forward of a variant; the variants without a forward of their own run the product's.
void forward(Variant v, DType t, void* out, float* lse, const void* qkv, int64_t B, int64_t T,
             int64_t C, int64_t NH, cudaStream_t s) {
  if (v != Variant::flash_narrow && v != Variant::flash_occ3) {
    attention_forward(t, out, lse, qkv, B, T, C, NH, AttentionImpl::flash, s);
    return;
  }
  const float scale_log2 = kLog2e / std::sqrt(static_cast<float>(C / NH));
  const dim3 grid(static_cast<unsigned>(ceil_div(T, kBlockRows)), static_cast<unsigned>(B * NH));
  auto run = [&](auto tag) {
    using X = decltype(tag);
    if (v == Variant::flash_narrow)
      flash_forward_kernel<X><<<grid, kThreads, 0, s>>>(
          static_cast<X*>(out), lse, static_cast<const X*>(qkv), int(T), int(NH), int(C), scale_log2);
    else
      flash_forward_wide_kernel<X, 3><<<grid, kWideThreads, 0, s>>>(
          static_cast<X*>(out), lse, static_cast<const X*>(qkv), int(T), int(NH), int(C), scale_log2);
    AISCALE_CUDA_LAUNCH_CHECK();
  };
  if (t == DType::bf16) run(bf16{});
  else run(f16{});
}

// Backward of a variant: the same preprocessing and dQ conversion as the product's.
void backward(Variant v, DType t, void* dqkv, const void* dout, const void* qkv, const void* out,
              const float* lse, int64_t B, int64_t T, int64_t C, int64_t NH, float* dq_accum,
              float* delta, cudaStream_t s) {
  if (v != Variant::flash_two_barrier) {
    attention_backward(t, dqkv, dout, qkv, out, lse, B, T, C, NH, dq_accum, delta,
                       AttentionImpl::flash, s);
    return;
  }
  const int64_t HS = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const float scale_log2 = kLog2e * scale;
  auto run = [&](auto tag) {
    using X = decltype(tag);
    const size_t smem_delta = sizeof(float) * kDeltaWarps * size_t(C / Pack<X>::N);
    auto pre = attention_delta_rows_kernel<X>;
    set_smem(pre, smem_delta);
    pre<<<static_cast<unsigned>(ceil_div(B * T, kDeltaWarps)), kDeltaWarps * 32, smem_delta, s>>>(
        delta, dq_accum, static_cast<const X*>(dout), static_cast<const X*>(out), B * T, int(T),
        int(NH), int(C), int(HS));
    AISCALE_CUDA_LAUNCH_CHECK();
    const dim3 grid(static_cast<unsigned>(ceil_div(T, kBlockRows)), static_cast<unsigned>(B * NH));
    auto kernel = flash_backward_kernel<X>;
    set_smem(kernel, kBwdSmemBytes);
    kernel<<<grid, kThreads, kBwdSmemBytes, s>>>(
        static_cast<X*>(dqkv), dq_accum, static_cast<const X*>(qkv), static_cast<const X*>(dout),
        lse, delta, int(T), int(NH), int(C), scale_log2, scale);
    AISCALE_CUDA_LAUNCH_CHECK();
    const int64_t items = ceil_div(B * T * C, 4);
    attention_dq_convert_kernel<X><<<static_cast<unsigned>(ceil_div(items, 256)), 256, 0, s>>>(
        static_cast<X*>(dqkv), dq_accum, B * T, int(C), scale);
    AISCALE_CUDA_LAUNCH_CHECK();
  };
  if (t == DType::bf16) run(bf16{});
  else run(f16{});
}

struct Tally {
  int passed = 0, failed = 0;
  void record(const std::string& what, DType t, double err, double tol) {
    const bool ok = err <= tol;
    std::printf("%-58s %-5s rel_err %.3e  tol %.0e  %s\n", what.c_str(), dtype_str(t), err, tol,
                ok ? "ok" : "FAIL");
    (ok ? passed : failed)++;
  }
};

void check(Tally& tally, Variant v, DType t, int64_t B, int64_t T, int64_t NH, int64_t HS,
           std::mt19937& rng) {
  const auto& ref = ops::reference_backend();
  const int64_t C = NH * HS;
  const std::string tag = std::string(variant_name(v)) + " B=" + std::to_string(B) +
                          " T=" + std::to_string(T) + " NH=" + std::to_string(NH) +
                          " HS=" + std::to_string(HS);
  const double tol = t == DType::bf16 ? 2e-2 : 5e-3;
  std::vector<float> qkv = dev::randn(B * T * 3 * C, rng);
  dev::round_all(t, qkv);
  std::vector<float> out(B * T * C), att(B * NH * T * T);
  ref.attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  dev::Buffer d_qkv(t, B * T * 3 * C), d_out(t, B * T * C), d_lse(DType::f32, B * NH * T);
  d_qkv.upload(qkv);
  forward(v, t, d_out.get(), d_lse.f(), d_qkv.get(), B, T, C, NH, nullptr);
  tally.record("attention_forward " + tag, t, dev::rel_err(d_out.download(), out), tol);

  std::vector<float> dout = dev::randn(B * T * C, rng);
  dev::round_all(t, dout);
  std::vector<float> dqkv(B * T * 3 * C), datt(B * NH * T * T);
  ref.attention_backward(dqkv.data(), datt.data(), dout.data(), qkv.data(), att.data(), B, T, C,
                         NH);
  dev::Buffer d_dout(t, B * T * C), d_dqkv(t, B * T * 3 * C), d_dq(DType::f32, B * T * C),
      d_delta(DType::f32, B * NH * T);
  d_dout.upload(dout);
  backward(v, t, d_dqkv.get(), d_dout.get(), d_qkv.get(), d_out.get(), d_lse.f(), B, T, C, NH,
           d_dq.f(), d_delta.f(), nullptr);
  const std::vector<float> got = d_dqkv.download();
  const char* parts[] = {"dQ", "dK", "dV"};
  for (int part = 0; part < 3; ++part) {
    std::vector<float> a, b;
    for (int64_t r = 0; r < B * T; ++r) {
      for (int64_t c = 0; c < C; ++c) {
        a.push_back(got[r * 3 * C + part * C + c]);
        b.push_back(dqkv[r * 3 * C + part * C + c]);
      }
    }
    tally.record(std::string("attention_backward ") + parts[part] + " " + tag, t,
                 dev::rel_err(a, b), tol);
  }
}

void perf() {
  const DType t = DType::bf16;
  const int64_t B = 16, T = 1024, C = 768, NH = 12, N = B * T;
  std::mt19937 rng(3);
  dev::Buffer qkv(t, N * 3 * C), out(t, N * C), dout(t, N * C), dqkv(t, N * 3 * C),
      lse(DType::f32, B * NH * T), dq(DType::f32, N * C), delta(DType::f32, B * NH * T);
  qkv.upload(dev::randn(qkv.size(), rng));
  dout.upload(dev::randn(dout.size(), rng));
  const double fwd_flops = 4.0 * B * NH * (double(T) * T / 2) * (C / NH);
  auto line = [&](const char* op, const char* kernel, double ms, double flops) {
    std::printf("{\"op\":\"%s\",\"kernel\":\"%s\",\"dtype\":\"bf16\",\"B\":%lld,\"T\":%lld,"
                "\"C\":%lld,\"NH\":%lld,\"ms\":%.4f,\"tflops\":%.1f}\n",
                op, kernel, (long long)B, (long long)T, (long long)C, (long long)NH, ms,
                flops / (ms * 1e9));
  };
  for (Variant v : {Variant::flash, Variant::flash_narrow, Variant::flash_occ3}) {
    const double ms = dev::median_ms([&] {
      forward(v, t, out.get(), lse.f(), qkv.get(), B, T, C, NH, nullptr);
    });
    line("attention_forward", variant_name(v), ms, fwd_flops);
  }
  forward(Variant::flash, t, out.get(), lse.f(), qkv.get(), B, T, C, NH, nullptr);
  for (Variant v : {Variant::flash, Variant::flash_two_barrier}) {
    const double ms = dev::median_ms([&] {
      backward(v, t, dqkv.get(), dout.get(), qkv.get(), out.get(), lse.f(), B, T, C, NH, dq.f(),
               delta.f(), nullptr);
    });
    line("attention_backward", variant_name(v), ms, 2.5 * fwd_flops);
  }
  if (cudnn_attention_compiled()) {
    CudnnAttention cudnn(t, B, T, NH, C / NH);
    dev::Buffer ws(DType::f32, int64_t(cudnn.workspace_bytes() / 4 + 4));
    line("attention_forward", "cudnn",
         dev::median_ms([&] { cudnn.forward(out.get(), lse.f(), qkv.get(), ws.get(), nullptr); }),
         fwd_flops);
    line("attention_backward", "cudnn", dev::median_ms([&] {
           cudnn.backward(dqkv.get(), dout.get(), qkv.get(), out.get(), lse.f(), dq.f(),
                          delta.f(), ws.get(), nullptr);
         }),
         2.5 * fwd_flops);
  }
}

}  // namespace
}  // namespace aiscale::cuda

int main(int argc, char** argv) {
  using namespace aiscale;
  using namespace aiscale::cuda;
  const std::string mode = argc > 1 ? argv[1] : "all";
  if (mode != "check" && mode != "perf" && mode != "all") {
    std::fprintf(stderr, "usage: %s [check | perf | all]\n", argv[0]);
    return 2;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("SKIP: no CUDA GPU visible; the attention workbench did not run\n");
    return 77;
  }
  Tally tally;
  try {
    if (mode != "perf") {
      std::mt19937 rng(1234);
      for (DType t : {DType::bf16, DType::f16}) {
        check(tally, Variant::flash_narrow, t, 2, 300, 1, 64, rng);
        check(tally, Variant::flash_narrow, t, 1, 128, 2, 64, rng);
        check(tally, Variant::flash_occ3, t, 2, 300, 1, 64, rng);
        check(tally, Variant::flash_two_barrier, t, 2, 300, 1, 64, rng);
        check(tally, Variant::flash_two_barrier, t, 1, 64, 2, 64, rng);
      }
      std::printf("attention workbench checks: %d passed, %d failed\n", tally.passed,
                  tally.failed);
    }
    if (mode != "check") perf();
  } catch (const std::exception& e) {
    std::printf("ERROR: %s\n", e.what());
    return 1;
  }
  return tally.failed == 0 ? 0 : 1;
}
