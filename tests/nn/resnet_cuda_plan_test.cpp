// The GPU ResNet's plan, on the host: the device parameter layout (a permutation of the
// CPU model's, convolution weights OHWI first, batch norms last), the fused residual
// batch norms, the gradient slots and accumulate flags, the gradient order the data-parallel
// reducer buckets, and the
// errors of a GPU run where this build or machine cannot have one.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <map>
#include <set>

#include "../support/run_support.h"
#include "aiscale/nn/models/resnet.h"
#include "aiscale/nn/models/resnet_cuda.h"
#include "aiscale/nn/models/resnet_cuda_plan.h"
#include "aiscale/parallel/data_parallel/bucket_plan.h"
#include "aiscale/train/vision_config.h"

namespace aiscale::nn {
namespace {

// 10 classes: fc.bias alone would leave the batch norms' region 8-byte aligned.
ResNet host_model(const std::string& preset, int64_t size, int64_t channels = 3) {
  ResNetConfig c = resnet_preset(preset);
  c.image_size = size;
  c.in_channels = channels;
  c.num_classes = 10;
  ResNetOptions o;
  o.max_batch = 0;
  o.seed = 3;
  return ResNet(c, o, ops::vision::vision_cpu_backend());
}

TEST(ResNetCudaPlan, LayoutIsAPermutationWithConvolutionsOhwi) {
  for (const char* preset : {"resnet-small", "resnet18", "resnet50"}) {
    ResNet host = host_model(preset, 32);
    const ResNetCudaPlan plan = build_resnet_cuda_plan(host, 4, false);
    EXPECT_EQ(plan.host_params, host.num_parameters()) << preset;
    // Device offsets tile [0, num_params) exactly once, but for the gap (< 64 values)
    // after fc.bias that starts the batch norms on a 256-byte boundary.
    std::vector<std::pair<int64_t, int64_t>> spans;
    int64_t fc_bias_end = -1;
    for (const ResNetCudaParam& p : plan.params) {
      spans.push_back({p.device_offset, p.size});
      if (p.name == "fc.bias") fc_bias_end = p.device_offset + p.size;
    }
    std::sort(spans.begin(), spans.end());
    int64_t at = 0;
    for (const auto& [lo, size] : spans) {
      EXPECT_EQ(lo, at == fc_bias_end ? plan.weight_end : at) << preset;
      at = lo + size;
    }
    const int64_t gap = plan.weight_end - fc_bias_end;
    EXPECT_EQ(at, plan.num_params);
    EXPECT_EQ(plan.num_params, host.num_parameters() + gap) << preset;
    EXPECT_GE(gap, 0) << preset;
    EXPECT_LT(gap, 64) << preset;
    EXPECT_EQ(plan.weight_end % 64, 0) << preset;
    // Convolutions, then fc.weight (the decayed prefix), fc.bias, then batch norms.
    for (const ResNetCudaParam& p : plan.params) {
      if (p.conv || p.name == "fc.weight") {
        EXPECT_LT(p.device_offset, plan.decay_end) << p.name;
      } else if (p.name == "fc.bias") {
        EXPECT_EQ(p.device_offset + p.size, fc_bias_end);
      } else {
        EXPECT_GE(p.device_offset, plan.weight_end) << p.name;
        EXPECT_EQ(p.device_offset % 4, 0) << p.name;  // 16 bytes, as cuDNN's batch norm needs
      }
    }
    // Round trip, and one convolution weight element by hand: host (o, c, kh, kw) is
    // device (o, kh, kw, c).
    std::vector<float> values(host.params().size());
    for (size_t i = 0; i < values.size(); ++i) values[i] = float(i);
    const std::vector<float> dev = to_device_layout(plan, values);
    std::vector<float> back;
    to_host_layout(plan, dev, back);
    EXPECT_EQ(back, values) << preset;
    for (int64_t i = fc_bias_end; i < plan.weight_end; ++i) EXPECT_EQ(dev[size_t(i)], 0.0f);
    const ResNetCudaParam& conv1 = plan.params.front();
    ASSERT_TRUE(conv1.conv);
    const int64_t o = 1, c = conv1.C - 1, kh = conv1.K - 1, kw = 0;
    EXPECT_EQ(dev[conv1.device_offset + ((o * conv1.K + kh) * conv1.K + kw) * conv1.C + c],
              values[conv1.host_offset + ((o * conv1.C + c) * conv1.K + kh) * conv1.K + kw]);
  }
  ResNet host = host_model("resnet18", 32);
  const ResNetCudaPlan all = build_resnet_cuda_plan(host, 4, true);
  EXPECT_EQ(all.decay_end, all.num_params);
}

TEST(ResNetCudaPlan, BlocksEndInAFusedBatchNormAndGradientsAccumulateWhereShared) {
  ResNet host = host_model("resnet50", 64);
  const ResNetCudaPlan plan = build_resnet_cuda_plan(host, 2, false);
  int fused = 0, bns = 0;
  std::map<int, int> readers;
  for (const ResNetCudaLayer& l : plan.layers) {
    readers[l.in]++;
    if (l.z >= 0) readers[l.z]++;
    if (l.kind == ResNetCudaLayerKind::bn) {
      ++bns;
      if (l.z >= 0) {
        ++fused;
        EXPECT_TRUE(l.relu) << l.name;
        EXPECT_FALSE(l.acc_z) << l.name;  // the add's gradient is written first
      }
    }
  }
  EXPECT_EQ(fused, 16);  // one per bottleneck block: 3 + 4 + 6 + 3
  EXPECT_EQ(bns, 53);
  EXPECT_EQ(plan.bn_layers, 53);
  // Each gradient is written once and added to by every further reader.
  std::map<int, int> writes, adds;
  for (const ResNetCudaLayer& l : plan.layers) {
    for (int a : {l.in, l.z}) {
      if (a <= 0) continue;
      writes[a]++;
      if (a == l.in ? l.acc_in : l.acc_z) adds[a]++;
    }
  }
  for (const auto& [a, w] : writes) EXPECT_EQ(adds[a], w - 1) << "activation " << a;
  // A handful of gradient slots serve the whole backward.
  EXPECT_GE(plan.grad_slots, 2);
  EXPECT_LE(plan.grad_slots, 6);
  EXPECT_EQ(plan.acts[0].grad_slot, -1);
}

// The layer whose backward completes each value of the device gradient buffer (the
// alignment gap after fc.bias: the classifier's), as runs [lo, hi) of one layer.
struct LayerRun {
  int64_t lo, hi;
  int layer;
};
std::vector<LayerRun> completing_layer(const ResNetCudaPlan& plan) {
  std::vector<LayerRun> at;
  auto mark = [&](int64_t lo, int64_t hi, size_t layer) { at.push_back({lo, hi, int(layer)}); };
  for (size_t i = 0; i < plan.layers.size(); ++i) {
    const ResNetCudaLayer& l = plan.layers[i];
    if (l.kind == ResNetCudaLayerKind::conv) mark(l.weight, l.weight + l.OC * l.C * l.K * l.K, i);
    if (l.kind == ResNetCudaLayerKind::fc) mark(l.weight, plan.weight_end, i);
    if (l.kind == ResNetCudaLayerKind::bn) {
      mark(l.gamma, l.gamma + l.C, i);
      mark(l.beta, l.beta + l.C, i);
    }
  }
  std::sort(at.begin(), at.end(), [](const LayerRun& a, const LayerRun& b) { return a.lo < b.lo; });
  return at;
}

// Every value of [lo, hi) is complete once the backward has passed the smallest of their
// completing layers (it runs from the top layer down).
int complete_after(const std::vector<LayerRun>& runs, int64_t lo, int64_t hi) {
  int lowest = INT_MAX;
  for (const LayerRun& r : runs)
    if (r.lo < hi && r.hi > lo) lowest = std::min(lowest, r.layer);
  return lowest;
}

// The order the reducer reads: each region's segments in completion order and neighbours in
// memory, every value in exactly one, each complete at its segment's point; and the buckets
// the reducer plans from it — DDP and ZeRO-1 over 1 to 8 ranks, buckets from 1 KiB to the
// whole model — hold only values complete when their bucket is sent.
TEST(ResNetCudaPlan, GradientOrderFeedsTheReducersBucketsOnlyCompleteValues) {
  for (const char* preset : {"resnet50", "resnet-small"}) {
    ResNet host = host_model(preset, 64);
    const ResNetCudaPlan plan = build_resnet_cuda_plan(host, 2, false);
    const std::vector<LayerRun> runs = completing_layer(plan);
    int64_t covered = 0;
    for (const LayerRun& r : runs) {
      EXPECT_EQ(r.lo, covered) << preset << ": the tensors tile the buffer";
      covered = r.hi;
    }
    ASSERT_EQ(covered, plan.num_params) << preset;
    for (int64_t min_values : {int64_t(1), int64_t(1) << 18}) {
      const parallel::dp::GradientOrder order = resnet_gradient_order(plan, min_values);
      std::vector<int> seen(size_t(plan.num_params), 0);
      bool in_norms = false;
      for (size_t k = 0; k < order.size(); ++k) {
        const parallel::dp::GradientSegment& g = order[k];
        const bool norms = g.begin >= plan.weight_end;
        EXPECT_TRUE(norms || g.end <= plan.weight_end) << "a segment across both regions";
        EXPECT_FALSE(in_norms && !norms) << "the weights' segments come first";
        if (k > 0 && norms == in_norms) {
          EXPECT_EQ(g.end, order[k - 1].begin) << "neighbours in memory, top down";
          EXPECT_LE(g.point, order[k - 1].point) << "completion order";
        }
        in_norms = norms;
        EXPECT_EQ(g.round_begin_up, g.begin != plan.weight_end);
        for (int64_t v = g.begin; v < g.end; ++v) seen[size_t(v)]++;
        EXPECT_GE(complete_after(runs, g.begin, g.end), g.point)
            << preset << ": segment [" << g.begin << ", " << g.end << ")";
      }
      EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), plan.num_params) << preset;
      for (const parallel::dp::GradientSegment& g : order)
        if (g.begin == 0) EXPECT_EQ(g.point, 0) << "the stem's convolution completes last";
      for (bool shard : {false, true})
        for (int world : {1, 2, 3, 8})
          for (double mib : {1.0 / 1024, 25.0, 1e6}) {
            parallel::dp::BucketPlanOptions po;
            po.bucket_values = parallel::dp::bucket_values_for_mib(mib);
            po.world = world;
            po.shard = shard;
            const parallel::dp::BucketPlan bp = parallel::dp::plan_buckets(order, plan.num_params, po);
            ASSERT_FALSE(bp.buckets.empty());
            for (const parallel::dp::Bucket& b : bp.buckets)
              EXPECT_GE(complete_after(runs, b.begin, std::min(b.end, plan.num_params)), b.point)
                  << preset << ", world " << world << (shard ? " ZeRO-1" : "") << ", " << mib
                  << " MiB: bucket [" << b.begin << ", " << b.end
                  << ") holds values completed after its point " << b.point;
            if (mib == 25.0 && std::string(preset) == "resnet50")
              EXPECT_GE(bp.buckets.size(), 3u) << "ResNet-50's 100 MB in 25 MiB buckets";
            if (mib == 1e6) EXPECT_LE(bp.buckets.size(), 2u) << "one per region";
          }
    }
  }
}

#ifndef AISCALE_HAVE_CUDA
TEST(ResNetCudaPlan, GpuRunsInACpuBuildNameTheFix) {
  ResNet host = host_model("resnet-small", 12, 1);
  ResNetCudaOptions o;
  try {
    ResNetCuda gpu(host, o);
    FAIL() << "a CPU build made a GPU model";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("cmake --preset cuda"), std::string::npos) << e.what();
  }
  const auto r = testsupport::run_aiscale(
      "bench vision --device cuda --model resnet-small --steps 1 --warmup 0");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("without CUDA"), std::string::npos) << r.output;
}
#endif

TEST(ResNetCudaPlan, GpuOnlyKeysNeedTheCudaDevice) {
  const std::string base = "[model]\nkind = \"resnet\"\n[data]\nkind = \"synthetic\"\n";
  auto error_of = [&](std::vector<std::string> overrides) {
    try {
      train::parse_vision_config(base, "test.toml", overrides);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of({"train.precision=bf16"}).find("train.device = \"cuda\""), std::string::npos);
  EXPECT_NE(error_of({"train.batchnorm=cudnn"}).find("train.device = \"cuda\""), std::string::npos);
  EXPECT_NE(error_of({"train.device=cuda", "parallel.sync_batchnorm=true"}).find("sync_batchnorm"),
            std::string::npos);
  EXPECT_EQ(error_of({"train.device=cuda", "train.precision=bf16", "train.batchnorm=cudnn"}), "");
}

}  // namespace
}  // namespace aiscale::nn
