// Every CUDA vision op against the CPU reference (ops/vision/reference.cpp) on small odd
// shapes, in fp32 (tight) and bf16 (loose): batch norm with the residual add and ReLU
// forward and backward (the accumulate flags included), cuDNN convolutions forward,
// backward-data and backward-filter, max and average pooling, the label-smoothed
// cross-entropy with its top-k counts, and SGD.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "aiscale/nn/batchnorm_train.h"
#include "aiscale/ops/vision/cuda/conv_cudnn.cuh"
#include "aiscale/ops/vision/cuda/vision_cuda.cuh"
#include "aiscale/ops/vision/vision_ops.h"
#include "aiscale/optim/sgd.h"
#include "gpu_vision_support.h"

namespace aiscale::gpu_vision {
namespace {

namespace cv = aiscale::cuda::vision;
using ops::vision::vision_reference_backend;

class VisionOpsGpu : public ::testing::TestWithParam<DType> {};

TEST_P(VisionOpsGpu, BatchNormWithResidualAndReluMatchesTheReference) {
  const DType t = GetParam();
  const ops::vision::VisionBackend& ref = vision_reference_backend();
  for (int64_t C : {24, 6}) {
    const int64_t N = 3, HW = 25, R = N * HW, n = N * C * HW;
    Rng rng(static_cast<uint64_t>(C));
    const std::vector<float> x = rounded(t, random_vector(rng, n, 2.0f));
    const std::vector<float> z = rounded(t, random_vector(rng, n));
    const std::vector<float> dy = rounded(t, random_vector(rng, n));
    std::vector<float> gamma = random_vector(rng, C), beta = random_vector(rng, C);
    std::vector<float> rm(C, 0.1f), rv(C, 1.5f);

    // CPU: y = relu(bn(x) + z); g = dy * (y > 0); dz = g; dx through the batch statistics.
    std::vector<float> y(n), rm_cpu = rm, rv_cpu = rv;
    nn::BatchNormSpec spec{N, C, HW, 1e-5f, 0.1f};
    nn::BatchNormSaved saved;
    nn::batchnorm_train_forward(ref, y.data(), x.data(), gamma.data(), beta.data(),
                                         rm_cpu.data(), rv_cpu.data(), spec, saved, nullptr);
    for (int64_t i = 0; i < n; ++i) y[i] = std::max(y[i] + z[i], 0.0f);
    std::vector<float> g(n), dx(n), dgamma(C, 0.f), dbeta(C, 0.f);
    for (int64_t i = 0; i < n; ++i) g[i] = y[i] > 0 ? dy[i] : 0.f;
    nn::batchnorm_train_backward(ref, dx.data(), dgamma.data(), dbeta.data(), g.data(),
                                          x.data(), gamma.data(), spec, saved, nullptr);

    DeviceBuffer dx_in(t, to_nhwc(x, N, C, HW)), dz_in(t, to_nhwc(z, N, C, HW)),
        ddy(t, to_nhwc(dy, N, C, HW)), dy_out(t, size_t(n));
    DeviceBuffer dgam(DType::f32, gamma), dbet(DType::f32, beta), drm(DType::f32, rm),
        drv(DType::f32, rv), stats(DType::f32, size_t(4 * C)),
        scratch(DType::f32, size_t(cv::batchnorm_scratch_floats(R, C)));
    float* st = stats.f32();
    cv::batchnorm_stats(t, st, st + C, st + 2 * C, st + 3 * C, drm.f32(), drv.f32(), dx_in.get(),
                        dgam.f32(), dbet.f32(), R, C, 1e-5f, 0.1f, scratch.f32(), nullptr);
    cv::batchnorm_apply(t, dy_out.get(), dx_in.get(), dz_in.get(), st + 2 * C, st + 3 * C, R, C,
                        true, nullptr);
    EXPECT_LT(relative_error(to_nchw(dy_out.download(), N, C, HW), y), tolerance(t)) << C;
    EXPECT_LT(relative_error(drm.download(), rm_cpu), 1e-5) << C;
    EXPECT_LT(relative_error(drv.download(), rv_cpu), 1e-5) << C;

    // Backward: dz starts at 1 and accumulates; dgamma / dbeta start at 1 and accumulate.
    DeviceBuffer gdx(t, size_t(n)), gdz(t, std::vector<float>(n, 1.0f)),
        gdgam(DType::f32, std::vector<float>(C, 1.0f)), gdbet(DType::f32, std::vector<float>(C, 1.0f));
    cv::batchnorm_backward(t, gdx.get(), gdz.get(), gdgam.f32(), gdbet.f32(), ddy.get(),
                           dy_out.get(), dx_in.get(), st, st + C, dgam.f32(), R, C, true, false,
                           true, scratch.f32(), nullptr);
    std::vector<float> dz_expect(n), dgamma1(C), dbeta1(C);
    for (int64_t i = 0; i < n; ++i) dz_expect[i] = 1.0f + g[i];
    for (int64_t c = 0; c < C; ++c) dgamma1[c] = 1.0f + dgamma[c], dbeta1[c] = 1.0f + dbeta[c];
    EXPECT_LT(relative_error(to_nchw(gdx.download(), N, C, HW), dx), 5 * tolerance(t)) << C;
    EXPECT_LT(relative_error(to_nchw(gdz.download(), N, C, HW), dz_expect), tolerance(t)) << C;
    EXPECT_LT(relative_error(gdgam.download(), dgamma1), 5 * tolerance(t)) << C;
    EXPECT_LT(relative_error(gdbet.download(), dbeta1), 5 * tolerance(t)) << C;
  }
}

TEST_P(VisionOpsGpu, CudnnConvolutionsMatchTheReference) {
  const DType t = GetParam();
  const ops::vision::VisionBackend& ref = vision_reference_backend();
  cv::CudnnContext ctx(nullptr);
  const size_t ws_bytes = size_t(64) << 20;
  DeviceBuffer ws(DType::f32, ws_bytes / 4);
  for (const ops::vision::ConvShape& s :
       {ops::vision::ConvShape{2, 8, 9, 9, 16, 3, 2, 1}, ops::vision::ConvShape{2, 3, 11, 11, 8, 7, 2, 3},
        ops::vision::ConvShape{2, 16, 6, 6, 8, 1, 1, 0}, ops::vision::ConvShape{3, 8, 5, 5, 8, 3, 1, 1}}) {
    Rng rng(uint64_t(s.K * 100 + s.C));
    const int64_t KK = s.K * s.K, HW = s.H * s.W, OHW = s.OH() * s.OW();
    const std::vector<float> x = rounded(t, random_vector(rng, size_t(s.in_size())));
    const std::vector<float> w = rounded(t, random_vector(rng, size_t(s.weight_size()), 0.3f));
    const std::vector<float> dy = rounded(t, random_vector(rng, size_t(s.out_size())));
    std::vector<float> y(s.out_size()), dx(s.in_size()), dw(s.weight_size(), 0.f);
    ref.conv2d_forward(y.data(), x.data(), w.data(), nullptr, s, nullptr);
    ref.conv2d_backward(dx.data(), dw.data(), nullptr, dy.data(), x.data(), w.data(), s, nullptr);

    DeviceBuffer gx(t, to_nhwc(x, s.N, s.C, HW)), gw(t, to_nhwc(w, s.OC, s.C, KK)),
        gy(t, size_t(s.out_size())), gdy(t, to_nhwc(dy, s.N, s.OC, OHW)),
        gdx(t, size_t(s.in_size())), gdw(t, size_t(s.weight_size()));
    const cv::ConvGeometry g{s.N, s.C, s.H, s.W, s.OC, s.K, s.stride, s.pad};
    cv::CudnnConv conv(ctx, t, false, g, true, {gx.get(), gw.get(), gy.get(), gdx.get(), gdw.get()},
                       ws.get(), ws_bytes);
    EXPECT_LE(conv.workspace_bytes(), ws_bytes);
    conv.forward(gy.get(), gx.get(), gw.get(), s.N, ws.get(), nullptr);
    EXPECT_LT(relative_error(to_nchw(gy.download(), s.N, s.OC, OHW), y), tolerance(t))
        << "K " << s.K << " " << conv.describe();
    conv.backward_data(gdx.get(), gdy.get(), gw.get(), s.N, false, ws.get(), nullptr);
    EXPECT_LT(relative_error(to_nchw(gdx.download(), s.N, s.C, HW), dx), tolerance(t))
        << "K " << s.K << " " << conv.describe();
    conv.backward_filter(gdw.get(), gdy.get(), gx.get(), s.N, false, ws.get(), nullptr);
    EXPECT_LT(relative_error(to_nchw(gdw.download(), s.OC, s.C, KK), dw), tolerance(t))
        << "K " << s.K << " " << conv.describe();
    // A smaller batch than the search's, accumulating: dx += the first image's.
    std::vector<float> dx1(dx.begin(), dx.begin() + s.C * HW);
    for (float& v : dx1) v *= 2;
    conv.backward_data(gdx.get(), gdy.get(), gw.get(), 1, true, ws.get(), nullptr);
    std::vector<float> got = to_nchw(gdx.download(), s.N, s.C, HW);
    got.resize(dx1.size());
    EXPECT_LT(relative_error(got, dx1), tolerance(t)) << "K " << s.K;
  }
}

TEST_P(VisionOpsGpu, PoolingMatchesTheReference) {
  const DType t = GetParam();
  const ops::vision::VisionBackend& ref = vision_reference_backend();
  Rng rng(7);
  // 16 channels: whole 16-byte groups (the vectorised kernels); 6: a thread per value.
  for (const ops::vision::PoolShape s : {ops::vision::PoolShape{2, 16, 9, 9, 3, 2, 1},
                                         ops::vision::PoolShape{2, 6, 9, 9, 3, 2, 1}}) {
    SCOPED_TRACE("channels " + std::to_string(s.C));
    const int64_t HW = s.H * s.W, OHW = s.OH() * s.OW();
    const std::vector<float> x = rounded(t, random_vector(rng, size_t(s.in_size())));
    const std::vector<float> dy = rounded(t, random_vector(rng, size_t(s.out_size())));
    std::vector<float> y(s.out_size()), dx(s.in_size());
    std::vector<int32_t> argmax(s.out_size());
    ref.maxpool_forward(y.data(), argmax.data(), x.data(), s);
    ref.maxpool_backward(dx.data(), dy.data(), argmax.data(), s);
    DeviceBuffer gx(t, to_nhwc(x, s.N, s.C, HW)), gy(t, size_t(s.out_size())),
        gdy(t, to_nhwc(dy, s.N, s.C, OHW)), gdx(t, size_t(s.in_size())),
        garg(DType::f32, size_t(s.out_size()));
    auto* am = static_cast<int32_t*>(garg.get());
    cv::maxpool_forward(t, gy.get(), am, gx.get(), s.N, s.H, s.W, s.C, s.K, s.stride, s.pad, nullptr);
    EXPECT_LT(relative_error(to_nchw(gy.download(), s.N, s.C, OHW), y), 1e-7);
    std::vector<int32_t> am_host(s.out_size());
    cudaMemcpy(am_host.data(), am, am_host.size() * 4, cudaMemcpyDeviceToHost);
    std::vector<float> am_f(am_host.begin(), am_host.end()), am_ref(argmax.begin(), argmax.end());
    EXPECT_EQ(to_nchw(am_f, s.N, s.C, OHW), am_ref);
    cv::maxpool_backward(t, gdx.get(), gdy.get(), am, s.N, s.H, s.W, s.C, s.K, s.stride, s.pad,
                         false, nullptr);
    EXPECT_LT(relative_error(to_nchw(gdx.download(), s.N, s.C, HW), dx), tolerance(t));
    // Accumulating onto what dx holds: twice the gradient.
    cv::maxpool_backward(t, gdx.get(), gdy.get(), am, s.N, s.H, s.W, s.C, s.K, s.stride, s.pad,
                         true, nullptr);
    for (float& v : dx) v *= 2;
    EXPECT_LT(relative_error(to_nchw(gdx.download(), s.N, s.C, HW), dx), tolerance(t));
  }

  // Global average pooling, backward accumulating onto ones.
  const int64_t N = 2, C = 16, P = 49;
  const std::vector<float> a = rounded(t, random_vector(rng, size_t(N * C * P)));
  const std::vector<float> da = rounded(t, random_vector(rng, size_t(N * C)));
  std::vector<float> pooled(N * C), back(N * C * P);
  ref.avgpool_forward(pooled.data(), a.data(), N, C, P);
  ref.avgpool_backward(back.data(), da.data(), N, C, P);
  for (float& v : back) v += 1.0f;
  DeviceBuffer ga(t, to_nhwc(a, N, C, P)), gp(t, size_t(N * C)), gda(t, da),
      gback(t, std::vector<float>(N * C * P, 1.0f));
  cv::avgpool_forward(t, gp.get(), ga.get(), N, P, C, nullptr);
  EXPECT_LT(relative_error(gp.download(), pooled), tolerance(t));
  cv::avgpool_backward(t, gback.get(), gda.get(), N, P, C, true, nullptr);
  EXPECT_LT(relative_error(to_nchw(gback.download(), N, C, P), back), tolerance(t));
}

TEST_P(VisionOpsGpu, SmoothedCrossEntropyMatchesTheReference) {
  const DType t = GetParam();
  const ops::vision::VisionBackend& ref = vision_reference_backend();
  for (int64_t V : {37, 1000}) {
    const int64_t N = 5;
    const float eps = 0.1f;
    Rng rng(static_cast<uint64_t>(V));
    const std::vector<float> logits = rounded(t, random_vector(rng, size_t(N * V), 2.0f));
    std::vector<int32_t> labels(N);
    for (int32_t& l : labels) l = int32_t(rng.below(uint64_t(V)));
    std::vector<float> losses(N), dlogits(N * V), dl(N, 1.0f / float(N));
    ref.xent_smooth_forward(losses.data(), logits.data(), labels.data(), N, V, eps);
    ref.xent_smooth_backward(dlogits.data(), logits.data(), labels.data(), dl.data(), N, V, eps);
    int top1 = 0, top5 = 0;
    for (int64_t i = 0; i < N; ++i) {
      int above = 0;
      for (int64_t j = 0; j < V; ++j)
        above += j != labels[i] && logits[i * V + j] >= logits[i * V + labels[i]];
      top1 += above < 1;
      top5 += above < 5;
    }
    DeviceBuffer gl(t, logits), gd(t, size_t(N * V)), gloss(DType::f32, size_t(N)),
        glab(DType::f32, size_t(N)), gcorrect(DType::f32, 2);
    cudaMemcpy(glab.get(), labels.data(), size_t(N) * 4, cudaMemcpyHostToDevice);
    cv::xent_smooth(t, gloss.f32(), gd.get(), static_cast<int32_t*>(gcorrect.get()), gl.get(),
                    static_cast<const int32_t*>(glab.get()), N, V, eps, 1.0f / float(N), nullptr);
    EXPECT_LT(relative_error(gloss.download(), losses), 1e-5) << V;
    EXPECT_LT(relative_error(gd.download(), dlogits), tolerance(t)) << V;
    int32_t counts[2];
    cudaMemcpy(counts, gcorrect.get(), 8, cudaMemcpyDeviceToHost);
    EXPECT_EQ(counts[0], top1) << V;
    EXPECT_EQ(counts[1], top5) << V;
  }
}

TEST_P(VisionOpsGpu, SgdMatchesTheHostOptimizer) {
  const DType t = GetParam();
  const int64_t n = 1000, decay_end = 600, copy_end = 800;
  Rng rng(3);
  std::vector<float> p = random_vector(rng, n), g = random_vector(rng, n);
  for (bool nesterov : {false, true}) {
    std::vector<uint8_t> mask(n, 0);
    std::fill(mask.begin(), mask.begin() + decay_end, 1);
    optim::Sgd host(n, {0.9, nesterov, 0.01}, mask);
    std::vector<float> hp = p, half_g(n);
    for (int64_t i = 0; i < n; ++i) half_g[i] = 0.5f * g[i];
    DeviceBuffer dp(DType::f32, p), dg(DType::f32, g), dv(DType::f32, size_t(n)), copy(t, size_t(n));
    for (int step = 0; step < 3; ++step) {
      host.step(hp.data(), half_g.data(), 0.1);
      cv::sgd_step(dp.f32(), dg.f32(), dv.f32(), n, 0.1f, 0.9f, nesterov, 0.01f, decay_end, 0.5f, t,
                   copy.get(), copy_end, nullptr);
    }
    EXPECT_LT(relative_error(dp.download(), hp), 1e-6);
    EXPECT_LT(relative_error(dv.download(), host.velocity()), 1e-6);
    std::vector<float> c = copy.download(), want = rounded(t, hp);
    c.resize(copy_end);
    want.resize(copy_end);
    EXPECT_LT(relative_error(c, want), 1e-6);
  }
}

INSTANTIATE_TEST_SUITE_P(Types, VisionOpsGpu, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) {
                           return std::string(info.param == DType::f32 ? "fp32" : "bf16");
                         });

}  // namespace
}  // namespace aiscale::gpu_vision
