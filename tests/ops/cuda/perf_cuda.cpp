// The `perf` mode of test_ops on the CUDA backend: every CUDA op at GPT-2 124M and 350M
// shapes (bf16), GEMMs also with cuBLASLt autotuning, as a table (median of 20 runs by
// CUDA events); `--profile` runs each hot kernel once instead, for Nsight Compute.
// Kernel variants that lost their measurements are timed in bench/dev, not here.
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "aiscale/ops/cuda/cudnn_attention.h"
#include "aiscale/ops/ops.h"
#include "cuda_harness.h"

namespace aiscale::ops::testing {
namespace {

namespace cu = aiscale::cuda;

// perf --profile: each hot kernel once at 124M sizes (run under ncu)

void profile_once(float* scratch) {
  const DType t = DType::bf16;
  const int64_t B = 16, T = 1024, C = 768, NH = 12, N = B * T;
  std::mt19937 rng(5);
  dev::Buffer x(t, N * 4 * C), y(t, N * 4 * C), z(t, N * 4 * C), w(t, 4 * C), mean(DType::f32, N),
      rstd(DType::f32, N), lse(DType::f32, B * NH * T), dq(DType::f32, N * C),
      delta(DType::f32, B * NH * T), gb(DType::f32, 4 * C);
  x.upload(dev::randn(x.size(), rng));
  y.upload(dev::randn(y.size(), rng));
  z.upload(dev::randn(z.size(), rng));
  w.upload(dev::randn(w.size(), rng));
  cu::attention_forward(t, y.get(), lse.f(), x.get(), B, T, C, NH, cu::AttentionImpl::flash, nullptr);
  cu::attention_backward(t, z.get(), x.get(), x.get(), y.get(), lse.f(), B, T, C, NH, dq.f(),
                         delta.f(), cu::AttentionImpl::flash, nullptr);
  cu::layernorm_forward(t, y.get(), mean.f(), rstd.f(), x.get(), w.get(), w.get(), N, C, nullptr);
  cu::layernorm_backward(t, z.get(), gb.f(), gb.f() + C, gb.f() + 2 * C, x.get(), y.get(), w.get(),
                         mean.f(), rstd.f(), N, C, true, scratch, nullptr);
  cu::gelu_backward_bias(t, y.get(), x.get(), N, 4 * C, gb.f(), scratch, nullptr);
  dev::check_cuda(cudaDeviceSynchronize(), "profile");
}

// --------------------------------------------------------------------------------------
// perf: per-op timings at GPT-2 124M sizes (bf16), a table of ms and TFLOP/s or GB/s

double time_ms(const std::function<void()>& f) { return dev::median_ms(f); }

void perf(cu::Gemm& gemm, float* scratch, int64_t B, int64_t T, int64_t C, int64_t NH,
          bool gemms_only = false) {
  const DType t = DType::bf16;
  const int64_t N = B * T, V = 50257, Vp = 50304;
  std::mt19937 rng(3);
  auto fill = [&](dev::Buffer& d, float s) { d.upload(dev::randn(d.size(), rng, s)); };
  dev::Buffer x(t, N * 4 * C), y(t, N * 4 * C), z(t, N * 4 * C), w(t, Vp * C), bias(t, 4 * C),
      g(DType::f32, Vp * C), gb(DType::f32, 4 * C), lg(t, N * Vp), mean(DType::f32, N),
      rstd(DType::f32, N), lse(DType::f32, B * NH * T), dq(DType::f32, N * C),
      delta(DType::f32, B * NH * T), losses(DType::f32, N), tg(DType::f32, N);
  fill(x, 1.0f);
  fill(y, 1.0f);
  fill(z, 1.0f);
  fill(w, 0.02f);
  fill(bias, 0.1f);
  g.zero();
  fill(lg, 1.0f);
  std::vector<int32_t> targets(N);
  for (auto& v : targets) v = int32_t(rng() % V);
  tg.upload_raw(targets.data(), N * 4);
  cu::LinearOptions lo;
  std::printf("\nper-op times, bf16, B=%lld T=%lld C=%lld NH=%lld (median of 20)\n", (long long)B,
              (long long)T, (long long)C, (long long)NH);
  std::printf("%-40s %9s %10s\n", "op", "ms", "TFLOP/s|GB/s");
  auto gemm_line = [&](const char* name, int64_t K, int64_t M, const std::function<void()>& f) {
    const double ms = time_ms(f);
    std::printf("%-40s %9.3f %8.0f TF\n", name, ms, 2.0 * N * K * M / (ms * 1e9));
  };
  auto mem_line = [&](const char* name, double bytes, const std::function<void()>& f) {
    const double ms = time_ms(f);
    std::printf("%-40s %9.3f %8.0f GB/s\n", name, ms, bytes / (ms * 1e6));
  };
  gemm_line("fwd qkv C->3C +bias", C, 3 * C, [&] {
    cu::linear_forward(gemm, t, y.get(), nullptr, x.get(), w.get(), bias.get(), nullptr, N, C, 3 * C, lo, nullptr);
  });
  gemm_line("fwd attproj C->C +bias+res", C, C, [&] {
    cu::linear_forward(gemm, t, y.get(), nullptr, x.get(), w.get(), bias.get(), z.get(), N, C, C, lo, nullptr);
  });
  gemm_line("fwd fc C->4C +bias+gelu(aux)", C, 4 * C, [&] {
    cu::linear_forward(gemm, t, y.get(), z.get(), x.get(), w.get(), bias.get(), nullptr, N, C, 4 * C, lo, nullptr);
  });
  gemm_line("fwd fcproj 4C->C +bias+res", 4 * C, C, [&] {
    cu::linear_forward(gemm, t, y.get(), nullptr, x.get(), w.get(), bias.get(), z.get(), N, 4 * C, C, lo, nullptr);
  });
  gemm_line("fwd lm head C->Vp", C, Vp, [&] {
    cu::linear_forward(gemm, t, lg.get(), nullptr, x.get(), w.get(), nullptr, nullptr, N, C, Vp, lo, nullptr);
  });
  gemm_line("bwd dX qkv", C, 3 * C, [&] {
    cu::linear_backward_input(gemm, t, y.get(), x.get(), w.get(), N, C, 3 * C, 3 * C, 1.0f, nullptr, nullptr, scratch, lo, nullptr);
  });
  gemm_line("bwd dW qkv (+bgrad)", C, 3 * C, [&] {
    cu::linear_backward_weight(gemm, t, g.f(), gb.f(), x.get(), y.get(), N, C, 3 * C, 3 * C, 1.0f, scratch, lo, nullptr);
  });
  gemm_line("bwd dX fcproj (+dgelu+bgrad)", 4 * C, C, [&] {
    cu::linear_backward_input(gemm, t, y.get(), x.get(), w.get(), N, 4 * C, C, C, 1.0f, z.get(), gb.f(), scratch, lo, nullptr);
  });
  gemm_line("bwd dW fcproj", 4 * C, C, [&] {
    cu::linear_backward_weight(gemm, t, g.f(), nullptr, x.get(), y.get(), N, 4 * C, C, C, 1.0f, scratch, lo, nullptr);
  });
  gemm_line("bwd dX fc", C, 4 * C, [&] {
    cu::linear_backward_input(gemm, t, y.get(), x.get(), w.get(), N, C, 4 * C, 4 * C, 1.0f, nullptr, nullptr, scratch, lo, nullptr);
  });
  gemm_line("bwd dW fc", C, 4 * C, [&] {
    cu::linear_backward_weight(gemm, t, g.f(), nullptr, x.get(), y.get(), N, C, 4 * C, 4 * C, 1.0f, scratch, lo, nullptr);
  });
  gemm_line("bwd dX lm head", C, Vp, [&] {
    cu::linear_backward_input(gemm, t, y.get(), lg.get(), w.get(), N, C, Vp, Vp, 1.0f, nullptr, nullptr, scratch, lo, nullptr);
  });
  gemm_line("bwd dW lm head", C, V, [&] {
    cu::linear_backward_weight(gemm, t, g.f(), nullptr, lg.get(), x.get(), N, C, V, Vp, 1.0f, scratch, lo, nullptr);
  });
  gemm_line("bwd dW lm head (n = Vp)", C, Vp, [&] {
    cu::linear_backward_weight(gemm, t, g.f(), nullptr, lg.get(), x.get(), N, C, Vp, Vp, 1.0f, scratch, lo, nullptr);
  });
  {
    cu::LinearOptions lo2 = lo;
    lo2.fused_dgelu = !lo.fused_dgelu;
    gemm_line(lo2.fused_dgelu ? "bwd dX fcproj (dgelu epilogue)" : "bwd dX fcproj (plain + dgelu/bias kernel)", 4 * C, C, [&] {
      cu::linear_backward_input(gemm, t, y.get(), x.get(), w.get(), N, 4 * C, C, C, 1.0f, z.get(), gb.f(), scratch, lo2, nullptr);
    });
    cu::LinearOptions lo3 = lo;
    lo3.fused_bgrad = false;
    gemm_line("bwd dW qkv (+bias kernel)", C, 3 * C, [&] {
      cu::linear_backward_weight(gemm, t, g.f(), gb.f(), x.get(), y.get(), N, C, 3 * C, 3 * C, 1.0f, scratch, lo3, nullptr);
    });
  }
  if (gemms_only) return;
  const double att_flops_fwd = 4.0 * B * NH * (double(T) * T / 2) * (C / NH);
  {
    const double ms = time_ms([&] {
      cu::attention_forward(t, y.get(), lse.f(), x.get(), B, T, C, NH, cu::AttentionImpl::flash, nullptr);
    });
    std::printf("%-40s %9.3f %8.0f TF (causal flops)\n", "attention fwd flash", ms, att_flops_fwd / (ms * 1e9));
    const double msb = time_ms([&] {
      cu::attention_backward(t, z.get(), x.get(), x.get(), y.get(), lse.f(), B, T, C, NH, dq.f(),
                             delta.f(), cu::AttentionImpl::flash, nullptr);
    });
    std::printf("%-40s %9.3f %8.0f TF (2.5x fwd flops)\n", "attention bwd flash (+delta, dq)", msb,
                2.5 * att_flops_fwd / (msb * 1e9));
    if (cu::cudnn_attention_compiled()) try {
      cu::CudnnAttention cudnn(t, B, T, NH, C / NH);
      dev::Buffer ws(DType::f32, int64_t(cudnn.workspace_bytes() / 4 + 4));
      const double msc = time_ms([&] { cudnn.forward(y.get(), lse.f(), x.get(), ws.get(), nullptr); });
      std::printf("%-40s %9.3f %8.0f TF (causal flops)\n", "attention fwd cudnn", msc,
                  att_flops_fwd / (msc * 1e9));
      const double mscb = time_ms([&] {
        cudnn.backward(z.get(), x.get(), x.get(), y.get(), lse.f(), dq.f(), delta.f(), ws.get(), nullptr);
      });
      std::printf("%-40s %9.3f %8.0f TF (2.5x fwd flops)\n", "attention bwd cudnn", mscb,
                  2.5 * att_flops_fwd / (mscb * 1e9));
      std::printf("  (%s)\n", cudnn.describe().c_str());
    } catch (const std::exception& e) {
      std::printf("attention cudnn: %s\n", e.what());
    }
  }
  mem_line("layernorm fwd", 2.0 * N * C * 2, [&] {
    cu::layernorm_forward(t, y.get(), mean.f(), rstd.f(), x.get(), bias.get(), bias.get(), N, C, nullptr);
  });
  mem_line("layernorm bwd (+=, colsum)", 4.0 * N * C * 2, [&] {
    cu::layernorm_backward(t, z.get(), gb.f(), gb.f() + C, gb.f() + 2 * C, x.get(), y.get(), bias.get(),
                           mean.f(), rstd.f(), N, C, true, scratch, nullptr);
  });
  mem_line("gelu backward + bias (N x 4C)", 2.0 * 3 * N * 4 * C, [&] {
    cu::gelu_backward_bias(t, y.get(), x.get(), N, 4 * C, gb.f(), scratch, nullptr);
  });
  mem_line("bias_grad kernel (N x 3C)", 2.0 * N * 3 * C, [&] {
    cu::bias_grad(t, gb.f(), x.get(), N, 3 * C, true, scratch, nullptr);
  });
  mem_line("gelu fwd (N x 4C)", 2.0 * 2 * N * 4 * C, [&] {
    cu::gelu_forward(t, y.get(), x.get(), N * 4 * C, nullptr);
  });
  mem_line("softmax_xent fused (N x Vp, 2 passes)", 3.0 * N * Vp * 2, [&] {
    cu::softmax_xent(t, losses.f(), lg.get(), static_cast<const int32_t*>(tg.get()), N, V, Vp, 1.0f / N, true, nullptr);
  });
  {
    const int64_t P = 124475904;
    dev::Buffer p(DType::f32, P), gg(DType::f32, P), m(DType::f32, P), v(DType::f32, P), wk(t, P + 64);
    p.zero();
    gg.zero();
    m.zero();
    v.zero();
    cu::AdamWLayout L;
    L.n = P;
    L.embeddings_end = P;
    L.work_split = P;
    ops::AdamWParams hp;
    mem_line("adamw (124M params)", 30.0 * P, [&] {
      cu::adamw_update(t, p.f(), wk.get(), gg.f(), m.f(), v.f(), L, hp, nullptr);
    });
    dev::Buffer ss(DType::f32, 2), scr(DType::f32, 2 * cu::sum_squares_scratch_doubles());
    mem_line("sum_squares (124M)", 4.0 * P, [&] {
      cu::sum_squares(reinterpret_cast<double*>(ss.get()), gg.f(), P, reinterpret_cast<double*>(scr.get()), nullptr);
    });
    mem_line("device memcpy 2 GB (read+write)", 2.0 * 4 * P, [&] {
      cudaMemcpyAsync(p.get(), gg.get(), size_t(P) * 4, cudaMemcpyDeviceToDevice);
    });
  }
}

}  // namespace

int run_cuda_perf_mode(const std::string& op, bool profile) {
  std::string why;
  if (!cuda_device_visible(why)) {
    std::printf("SKIP cuda perf: %s\n", why.c_str());
    return 77;
  }
  if (!op.empty()) {
    std::printf("perf --backend cuda times every op at once (no --op)\n");
    return 2;
  }
  void* ws = nullptr;
  float* scratch = nullptr;
  dev::check_cuda(cudaMalloc(&ws, cu::Gemm::kWorkspaceBytes), "workspace");
  dev::check_cuda(cudaMalloc(&scratch, size_t(64) << 20), "scratch");
  int status = 0;
  try {
    if (profile) {
      profile_once(scratch);
    } else {
      cu::Gemm gemm(ws, cu::Gemm::kWorkspaceBytes);
      perf(gemm, scratch, 16, 1024, 768, 12);
      std::printf("\nGEMMs again with autotuning (fastest of cuBLASLt's candidates):\n");
      cu::Gemm tuned(ws, cu::Gemm::kWorkspaceBytes);
      tuned.set_autotune(true);
      perf(tuned, scratch, 16, 1024, 768, 12, true);
      std::printf("\nGPT-2 350M shapes (C=1024, NH=16, B=8):\n");
      perf(tuned, scratch, 8, 1024, 1024, 16);
    }
  } catch (const std::exception& e) {
    std::printf("ERROR: %s\n", e.what());
    status = 1;
  }
  cudaFree(ws);
  cudaFree(scratch);
  return status;
}

}  // namespace aiscale::ops::testing
