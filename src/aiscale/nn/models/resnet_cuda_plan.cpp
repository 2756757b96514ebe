#include "aiscale/nn/models/resnet_cuda_plan.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "aiscale/core/error.h"
#include "aiscale/nn/models/resnet.h"
#include "aiscale/nn/models/resnet_network.h"

namespace aiscale::nn {
namespace {

using Kind = ResNetCudaLayerKind;

constexpr int64_t kParamAlign = 64;  // fp32 values: 256 bytes

class PlanBuilder {
 public:
  PlanBuilder(const ResNet& host, ResNetCudaPlan& plan) : plan_(plan) {
    for (const ResNetTensor& t : host.parameter_tensors()) params_[t.name] = &t;
    for (const ResNetTensor& t : host.buffer_tensors()) buffers_[t.name] = &t;
    // Device layout: convolution weights, fc.weight, fc.bias, then the batch norms'.
    int64_t offset = 0;
    auto place = [&](const ResNetTensor& t) {
      ResNetCudaParam p;
      p.name = t.name;
      p.host_offset = t.offset;
      p.size = t.size;
      p.device_offset = offset;
      p.conv = t.shape.size() == 4;
      if (p.conv) p.OC = t.shape[0], p.C = t.shape[1], p.K = t.shape[2];
      offset += t.size;
      device_[t.name] = p.device_offset;
      plan_.params.push_back(p);
    };
    for (const ResNetTensor& t : host.parameter_tensors())
      if (t.shape.size() == 4) place(t);
    place(tensor("fc.weight"));
    plan_.decay_end = offset;
    place(tensor("fc.bias"));
    // Unused values after fc.bias so that the batch norms' region starts on a 256-byte
    // boundary: cuDNN's NHWC batch norm reads its scale, shift and gradient vectors with
    // 16-byte loads, and fc.bias (num_classes values) would otherwise leave them misaligned
    // whenever num_classes is not a multiple of 4. The gap belongs to [0, weight_end) (so
    // the gradient buckets still tile the layout) and stays zero: parameter, gradient and
    // momentum alike, so SGD and the all-reduce leave it so.
    const int64_t gap = (kParamAlign - offset % kParamAlign) % kParamAlign;
    offset += gap;
    plan_.weight_end = offset;
    for (const ResNetTensor& t : host.parameter_tensors())
      if (t.shape.size() != 4 && t.name.rfind("fc.", 0) != 0) place(t);
    plan_.num_params = offset;
    plan_.host_params = host.num_parameters();
    AISCALE_CHECK(offset == host.num_parameters() + gap,
                  "device layout of {} values for {} parameters and a gap of {}", offset,
                  host.num_parameters(), gap);
  }

  int input(int64_t C, int64_t H, int64_t W) { return act(C, H, W); }

  int conv(const std::string& name, int in, int64_t OC, int64_t K, int64_t stride, int64_t pad) {
    const ResNetCudaAct a = plan_.acts[in];
    ResNetCudaLayer l;
    l.kind = Kind::conv;
    l.name = name;
    l.in = in;
    l.C = a.C, l.H = a.H, l.W = a.W, l.OC = OC, l.K = K, l.stride = stride, l.pad = pad;
    const ResNetTensor& w = tensor(name + ".weight");
    AISCALE_CHECK(w.shape == (std::vector<int64_t>{OC, a.C, K, K}), "{}: shape mismatch", name);
    l.weight = device_.at(w.name);
    l.out = act(OC, (a.H + 2 * pad - K) / stride + 1, (a.W + 2 * pad - K) / stride + 1);
    plan_.layers.push_back(l);
    return l.out;
  }

  int bn(const std::string& name, int in, bool relu, int z = -1) {
    const ResNetCudaAct a = plan_.acts[in];
    ResNetCudaLayer l;
    l.kind = Kind::bn;
    l.name = name;
    l.in = in;
    l.z = z;
    l.relu = relu;
    l.C = a.C, l.H = a.H, l.W = a.W;
    l.gamma = device_.at(tensor(name + ".weight").name);
    l.beta = device_.at(tensor(name + ".bias").name);
    l.running_mean = buffer(name + ".running_mean").offset;
    l.running_var = buffer(name + ".running_var").offset;
    l.bn_index = plan_.bn_layers++;
    l.out = act(a.C, a.H, a.W);
    plan_.layers.push_back(l);
    return l.out;
  }

  int maxpool(int in, int64_t K, int64_t stride, int64_t pad) {
    const ResNetCudaAct a = plan_.acts[in];
    ResNetCudaLayer l;
    l.kind = Kind::maxpool;
    l.name = "maxpool";
    l.in = in;
    l.C = a.C, l.H = a.H, l.W = a.W, l.K = K, l.stride = stride, l.pad = pad;
    l.pool_index = plan_.pool_layers++;
    l.out = act(a.C, (a.H + 2 * pad - K) / stride + 1, (a.W + 2 * pad - K) / stride + 1);
    plan_.layers.push_back(l);
    return l.out;
  }

  int avgpool(int in) {
    const ResNetCudaAct a = plan_.acts[in];
    ResNetCudaLayer l;
    l.kind = Kind::avgpool;
    l.name = "avgpool";
    l.in = in;
    l.C = a.C, l.H = a.H, l.W = a.W;
    l.out = act(a.C, 1, 1);
    plan_.layers.push_back(l);
    return l.out;
  }

  // The residual branch's last batch norm is fused with the block's add and ReLU: the
  // branch ends at its convolution, and join is that batch norm with the shortcut added.
  int branch_end(const std::string&, int y) { return y; }
  int join(const std::string& bn_name, int y, int shortcut) { return bn(bn_name, y, true, shortcut); }

  int fc(int in, int64_t OC) {
    ResNetCudaLayer l;
    l.kind = Kind::fc;
    l.name = "fc";
    l.in = in;
    l.C = plan_.acts[in].C;
    l.OC = OC;
    l.weight = device_.at("fc.weight");
    l.bias = device_.at("fc.bias");
    l.out = act(OC, 1, 1);
    plan_.layers.push_back(l);
    return l.out;
  }

 private:
  int act(int64_t C, int64_t H, int64_t W) {
    ResNetCudaAct a;
    a.C = C, a.H = H, a.W = W;
    plan_.acts.push_back(a);
    return int(plan_.acts.size()) - 1;
  }
  const ResNetTensor& tensor(const std::string& name) const {
    auto it = params_.find(name);
    AISCALE_CHECK(it != params_.end(), "the CPU model has no parameter '{}'", name);
    return *it->second;
  }
  const ResNetTensor& buffer(const std::string& name) const {
    auto it = buffers_.find(name);
    AISCALE_CHECK(it != buffers_.end(), "the CPU model has no buffer '{}'", name);
    return *it->second;
  }
  ResNetCudaPlan& plan_;
  std::map<std::string, const ResNetTensor*> params_, buffers_;
  std::map<std::string, int64_t> device_;
};

// Which backward writes first into each gradient (the others add), and the gradient
// slots: a gradient is born at its first writer (in backward order) and freed once its
// producer's backward has read it.
void plan_gradients(ResNetCudaPlan& plan) {
  std::vector<bool> written(plan.acts.size(), false);
  std::vector<int> free_slots;
  auto take = [&](int act) {
    if (act <= 0 || plan.acts[act].grad_slot >= 0) return;
    if (free_slots.empty()) {
      plan.acts[act].grad_slot = plan.grad_slots++;
    } else {
      plan.acts[act].grad_slot = free_slots.back();
      free_slots.pop_back();
    }
  };
  take(plan.logits);
  for (auto it = plan.layers.rbegin(); it != plan.layers.rend(); ++it) {
    ResNetCudaLayer& l = *it;
    for (int a : {l.in, l.z}) {
      if (a <= 0) continue;
      take(a);
      const bool acc = written[a];
      written[a] = true;
      if (a == l.in) l.acc_in = acc; else l.acc_z = acc;
    }
    free_slots.push_back(plan.acts[l.out].grad_slot);
  }
}

}  // namespace

ResNetCudaPlan build_resnet_cuda_plan(const ResNet& host, int64_t max_batch,
                                      bool decay_bn_and_bias) {
  ResNetCudaPlan plan;
  PlanBuilder b(host, plan);
  const ResNetConfig& c = host.config();
  plan.logits = build_resnet_network(b, c);
  for (const ResNetTensor& t : host.buffer_tensors())
    plan.num_buffers = std::max(plan.num_buffers, t.offset + t.size);
  plan.max_batch = max_batch;
  plan.num_classes = c.num_classes;
  plan.in_channels = c.in_channels;
  plan.image_size = c.image_size;
  if (decay_bn_and_bias) plan.decay_end = plan.num_params;
  plan_gradients(plan);
  return plan;
}

// A range is ready once every tensor above it in its region is done (a block's batch norms
// complete in another order than their layout's).
parallel::dp::GradientOrder resnet_gradient_order(const ResNetCudaPlan& plan, int64_t min_values) {
  AISCALE_CHECK(min_values >= 1, "gradient segments of {} values", min_values);
  struct Span {
    int64_t lo, hi;
    size_t layer;
  };
  std::vector<Span> spans;
  for (size_t i = 0; i < plan.layers.size(); ++i) {
    const ResNetCudaLayer& l = plan.layers[i];
    if (l.kind == ResNetCudaLayerKind::conv)
      spans.push_back({l.weight, l.weight + l.OC * l.C * l.K * l.K, i});
    if (l.kind == ResNetCudaLayerKind::fc) spans.push_back({l.weight, l.bias + l.OC, i});
    if (l.kind == ResNetCudaLayerKind::bn) {
      spans.push_back({l.gamma, l.gamma + l.C, i});
      spans.push_back({l.beta, l.beta + l.C, i});
    }
  }
  std::sort(spans.begin(), spans.end(), [](const Span& x, const Span& y) { return x.lo < y.lo; });
  std::vector<bool> done(spans.size(), false);
  auto region_of = [&](const Span& sp) { return sp.lo < plan.weight_end ? 0 : 1; };
  const int64_t top[2] = {plan.weight_end, plan.num_params};
  int64_t sent[2] = {top[0], top[1]};   // lower edge of what is in segments already
  int64_t ready[2] = {top[0], top[1]};  // lower edge of what is complete
  parallel::dp::GradientOrder region[2];
  for (size_t i = plan.layers.size(); i-- > 0;) {
    for (size_t k = 0; k < spans.size(); ++k)
      if (spans[k].layer == i) done[k] = true;
    for (int r = 0; r < 2; ++r) {
      // Walk down from the current edge while the spans below it are done (the classifier's
      // alignment gap above fc.bias goes with it).
      for (size_t k = spans.size(); k-- > 0;) {
        const Span& sp = spans[k];
        if (region_of(sp) != r || sp.hi > ready[r]) continue;
        if (!done[k]) break;
        ready[r] = sp.lo;
      }
      if (sent[r] > ready[r] && (sent[r] - ready[r] >= min_values || i == 0)) {
        parallel::dp::GradientSegment g;
        g.begin = ready[r];
        g.end = sent[r];
        g.point = int(i);
        g.round_begin_up = g.begin != plan.weight_end;
        region[r].push_back(g);
        sent[r] = ready[r];
      }
    }
  }
  AISCALE_CHECK(sent[0] == 0 && sent[1] == plan.weight_end,
                "the gradient segments end at {} and {}, not 0 and {}", sent[0], sent[1],
                plan.weight_end);
  parallel::dp::GradientOrder order = region[0];
  order.insert(order.end(), region[1].begin(), region[1].end());
  return order;
}

namespace {

// Copies every parameter from one layout into the other; convolution weights go between
// the host's OIHW (PyTorch's) and the device's OHWI.
void convert_layout(const ResNetCudaPlan& plan, const float* from, float* to, bool to_device) {
  for (const ResNetCudaParam& p : plan.params) {
    const float* src = from + (to_device ? p.host_offset : p.device_offset);
    float* dst = to + (to_device ? p.device_offset : p.host_offset);
    if (!p.conv) {
      std::copy(src, src + p.size, dst);
      continue;
    }
    const int64_t KK = p.K * p.K;
    for (int64_t o = 0; o < p.OC; ++o)
      for (int64_t c = 0; c < p.C; ++c)
        for (int64_t k = 0; k < KK; ++k) {
          const int64_t host = (o * p.C + c) * KK + k, dev = (o * KK + k) * p.C + c;
          if (to_device)
            dst[dev] = src[host];
          else
            dst[host] = src[dev];
        }
  }
}

}  // namespace

std::vector<float> to_device_layout(const ResNetCudaPlan& plan, const std::vector<float>& host) {
  AISCALE_CHECK(int64_t(host.size()) == plan.host_params, "{} values for {} parameters",
                host.size(), plan.host_params);
  std::vector<float> dev(size_t(plan.num_params), 0.0f);
  convert_layout(plan, host.data(), dev.data(), true);
  return dev;
}

void to_host_layout(const ResNetCudaPlan& plan, const std::vector<float>& dev,
                    std::vector<float>& host) {
  AISCALE_CHECK(int64_t(dev.size()) == plan.num_params, "{} values for {} parameters",
                dev.size(), plan.num_params);
  host.resize(size_t(plan.host_params));
  convert_layout(plan, dev.data(), host.data(), false);
}

}  // namespace aiscale::nn
