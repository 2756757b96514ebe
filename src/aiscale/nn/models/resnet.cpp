// ResNet: the network as a list of layers over activation buffers, built once from the
// configuration; forward runs the list in order, backward in reverse.
//
// Activation gradients: a buffer read by one layer gets its gradient written (overwritten)
// by that layer's backward; a block's input is read by two (the first convolution and the
// shortcut), so its gradient is zeroed at the start of the backward and each reader adds
// its part through a scratch buffer.
#include "aiscale/nn/models/resnet.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <variant>

#include <fmt/format.h>

#include "aiscale/core/error.h"
#include "aiscale/core/rng.h"
#include "aiscale/nn/batchnorm_train.h"
#include "aiscale/nn/models/resnet_network.h"
#include "aiscale/ops/ops.h"

namespace aiscale::nn {

using ops::vision::ConvShape;
using ops::vision::PoolShape;

namespace {

struct Act {
  int64_t C = 0, H = 0, W = 0;
  int consumers = 0;
  std::vector<float> data, grad;
  int64_t per_image() const { return C * H * W; }
};

struct ConvLayer {
  ConvShape shape;  // N set per call
  int64_t weight = 0;
  int in = 0, out = 0;
};
struct BnLayer {
  int64_t C = 0, HW = 0;
  int64_t gamma = 0, beta = 0, running_mean = 0, running_var = 0;
  int in = 0, out = 0;
  bool relu = false;
  BatchNormSaved saved;
};
struct AddLayer {
  int a = 0, b = 0, out = 0;
  bool relu = true;
};
struct MaxPoolLayer {
  PoolShape shape;
  int in = 0, out = 0;
  std::vector<int32_t> argmax;
};
struct AvgPoolLayer {
  int in = 0, out = 0;
};
struct FcLayer {
  int64_t C = 0, OC = 0, weight = 0, bias = 0;
  int in = 0, out = 0;
};
using Layer = std::variant<ConvLayer, BnLayer, AddLayer, MaxPoolLayer, AvgPoolLayer, FcLayer>;

}  // namespace

struct ResNet::Impl {
  std::vector<Act> acts;
  std::vector<Layer> layers;
  std::vector<float> conv_scratch, grad_scratch, losses, dlosses;
  std::vector<int32_t> labels;
  int64_t n = 0;  // images in the last forward
  int logits = 0;
  const ops::Backend* host = nullptr;  // matmul and residual from the GPT vocabulary
};

namespace {

// Builds the layer list and the parameter table in torchvision's order.
class Builder {
 public:
  Builder(ResNet::Impl& impl, std::vector<ResNetTensor>& params,
          std::vector<ResNetTensor>& buffers, int64_t max_batch)
      : impl_(impl), params_(params), buffers_(buffers), max_batch_(max_batch) {}

  int input(int64_t C, int64_t H, int64_t W) { return new_act(C, H, W); }

  int conv(const std::string& name, int in, int64_t OC, int64_t K, int64_t stride, int64_t pad) {
    const Act& a = impl_.acts[in];
    ConvLayer l;
    l.shape = ConvShape{0, a.C, a.H, a.W, OC, K, stride, pad};
    l.weight = param(name + ".weight", {OC, a.C, K, K}, true);
    l.in = in;
    l.out = new_act(OC, l.shape.OH(), l.shape.OW());
    use(in);
    impl_.layers.push_back(l);
    return l.out;
  }

  int bn(const std::string& name, int in, bool relu) {
    const Act& a = impl_.acts[in];
    BnLayer l;
    l.C = a.C;
    l.HW = a.H * a.W;
    l.gamma = param(name + ".weight", {a.C}, false);
    l.beta = param(name + ".bias", {a.C}, false);
    l.running_mean = buffer(name + ".running_mean", a.C);
    l.running_var = buffer(name + ".running_var", a.C);
    l.in = in;
    l.relu = relu;
    l.out = new_act(a.C, a.H, a.W);
    use(in);
    impl_.layers.push_back(l);
    return l.out;
  }

  int add_relu(int a, int b) {
    AddLayer l{a, b, new_act(impl_.acts[a].C, impl_.acts[a].H, impl_.acts[a].W), true};
    use(a);
    use(b);
    impl_.layers.push_back(l);
    return l.out;
  }

  int maxpool(int in, int64_t K, int64_t stride, int64_t pad) {
    const Act& a = impl_.acts[in];
    MaxPoolLayer l;
    l.shape = PoolShape{0, a.C, a.H, a.W, K, stride, pad};
    l.in = in;
    l.out = new_act(a.C, l.shape.OH(), l.shape.OW());
    l.argmax.resize(max_batch_ * a.C * l.shape.OH() * l.shape.OW());
    use(in);
    const int out = l.out;
    impl_.layers.push_back(std::move(l));
    return out;
  }

  int avgpool(int in) {
    AvgPoolLayer l{in, new_act(impl_.acts[in].C, 1, 1)};
    use(in);
    impl_.layers.push_back(l);
    return l.out;
  }

  // The residual branch's last batch norm, without ReLU; join adds the shortcut.
  int branch_end(const std::string& bn_name, int y) { return bn(bn_name, y, false); }
  int join(const std::string&, int y, int shortcut) { return add_relu(y, shortcut); }

  int fc(int in, int64_t OC) {
    const std::string name = "fc";
    FcLayer l;
    l.C = impl_.acts[in].C;
    l.OC = OC;
    l.weight = param(name + ".weight", {OC, l.C}, true);
    l.bias = param(name + ".bias", {OC}, false);
    l.in = in;
    l.out = new_act(OC, 1, 1);
    use(in);
    impl_.layers.push_back(l);
    return l.out;
  }

  int64_t param_floats = 0, buffer_floats = 0;

 private:
  int new_act(int64_t C, int64_t H, int64_t W) {
    Act a;
    a.C = C, a.H = H, a.W = W;
    impl_.acts.push_back(std::move(a));
    return int(impl_.acts.size()) - 1;
  }
  void use(int act) { impl_.acts[act].consumers++; }
  int64_t param(const std::string& name, std::vector<int64_t> shape, bool decay) {
    int64_t size = 1;
    for (int64_t d : shape) size *= d;
    params_.push_back({name, std::move(shape), param_floats, size, decay});
    param_floats += size;
    return param_floats - size;
  }
  int64_t buffer(const std::string& name, int64_t size) {
    buffers_.push_back({name, {size}, buffer_floats, size, false});
    buffer_floats += size;
    return buffer_floats - size;
  }
  ResNet::Impl& impl_;
  std::vector<ResNetTensor>& params_;
  std::vector<ResNetTensor>& buffers_;
  int64_t max_batch_;
};

}  // namespace

ResNet::ResNet(const ResNetConfig& config, const ResNetOptions& options,
               const ops::vision::VisionBackend& backend)
    : config_(config), options_(options), backend_(backend), impl_(std::make_unique<Impl>()) {
  validate(config_);
  AISCALE_CHECK(options_.max_batch >= 0, "max_batch {} < 0", options_.max_batch);
  impl_->host = std::string(backend.name) == "reference" ? &ops::reference_backend()
                                                          : &ops::cpu_backend();
  Builder b(*impl_, param_tensors_, buffer_tensors_, options_.max_batch);
  impl_->logits = build_resnet_network(b, config_);
  params_.assign(b.param_floats, 0.0f);
  grads_.assign(b.param_floats, 0.0f);
  buffers_.assign(b.buffer_floats, 0.0f);

  // Activations and scratch for the largest batch.
  const int64_t B = options_.max_batch;
  int64_t conv_scratch = 0, largest = 0;
  for (size_t i = 0; i < impl_->acts.size(); ++i) {
    Act& a = impl_->acts[i];
    a.data.assign(B * a.per_image(), 0.0f);
    if (i > 0) a.grad.assign(B * a.per_image(), 0.0f);
    largest = std::max(largest, B * a.per_image());
  }
  for (const Layer& l : impl_->layers) {
    if (const auto* conv = std::get_if<ConvLayer>(&l)) {
      ConvShape s = conv->shape;
      s.N = B;
      if (B > 0) conv_scratch = std::max(conv_scratch, ops::vision::conv2d_scratch_floats(s));
    }
  }
  impl_->conv_scratch.assign(conv_scratch, 0.0f);
  impl_->grad_scratch.assign(largest, 0.0f);
  impl_->losses.assign(B, 0.0f);
  impl_->dlosses.assign(B, 0.0f);
  impl_->labels.assign(B, 0);

  // torchvision's initialisation: convolutions N(0, 2 / fan_out) (He, fan-out mode),
  // batch norm scale 1 and shift 0, the classifier U(-1/sqrt(in), 1/sqrt(in)).
  Rng rng(options_.seed);
  for (const ResNetTensor& t : param_tensors_) {
    float* p = params_.data() + t.offset;
    const bool is_bn = t.shape.size() == 1 && t.name.rfind("fc.", 0) != 0;
    if (t.shape.size() == 4) {
      const float std = std::sqrt(2.0f / float(t.shape[0] * t.shape[2] * t.shape[3]));
      for (int64_t i = 0; i < t.size; ++i) p[i] = rng.normal() * std;
    } else if (is_bn) {
      const bool scale = t.name.size() > 7 && t.name.compare(t.name.size() - 7, 7, ".weight") == 0;
      std::fill(p, p + t.size, scale ? 1.0f : 0.0f);
    } else {
      const float bound = 1.0f / std::sqrt(float(config_.features()));
      for (int64_t i = 0; i < t.size; ++i) p[i] = (2.0f * rng.uniform() - 1.0f) * bound;
    }
  }
  if (options_.zero_init_residual) {
    const std::string last = config_.bottleneck ? ".bn3.weight" : ".bn2.weight";
    for (const ResNetTensor& t : param_tensors_) {
      if (t.name.size() > last.size() &&
          t.name.compare(t.name.size() - last.size(), last.size(), last) == 0) {
        std::fill(params_.begin() + t.offset, params_.begin() + t.offset + t.size, 0.0f);
      }
    }
  }
  for (const ResNetTensor& t : buffer_tensors_) {
    const bool var = t.name.find("running_var") != std::string::npos;
    std::fill(buffers_.begin() + t.offset, buffers_.begin() + t.offset + t.size,
              var ? 1.0f : 0.0f);
  }
}

ResNet::~ResNet() = default;

double ResNet::forward(const float* images, const int32_t* labels, int64_t n, bool train) {
  if (n < 1 || n > options_.max_batch) {
    fail("ResNet forward: batch of {} images, the model was built for 1..{}", n,
         options_.max_batch);
  }
  Impl& m = *impl_;
  m.n = n;
  std::memcpy(m.acts[0].data.data(), images, n * m.acts[0].per_image() * sizeof(float));
  for (int64_t i = 0; i < n; ++i) {
    if (labels[i] < 0 || labels[i] >= config_.num_classes) {
      fail("label {} of image {} is outside the model's {} classes", labels[i], i,
           config_.num_classes);
    }
    m.labels[i] = labels[i];
  }
  float* P = params_.data();
  for (Layer& layer : m.layers) {
    if (auto* l = std::get_if<ConvLayer>(&layer)) {
      ConvShape s = l->shape;
      s.N = n;
      backend_.conv2d_forward(m.acts[l->out].data.data(), m.acts[l->in].data.data(),
                              P + l->weight, nullptr, s, m.conv_scratch.data());
    } else if (auto* l = std::get_if<BnLayer>(&layer)) {
      const BatchNormSpec spec{n, l->C, l->HW, options_.bn_eps, options_.bn_momentum};
      float* out = m.acts[l->out].data.data();
      if (train) {
        batchnorm_train_forward(
            backend_, out, m.acts[l->in].data.data(), P + l->gamma, P + l->beta,
            buffers_.data() + l->running_mean, buffers_.data() + l->running_var, spec, l->saved,
            bn_sync_);
      } else {
        batchnorm_eval_forward(backend_, out, m.acts[l->in].data.data(),
                               P + l->gamma, P + l->beta,
                               buffers_.data() + l->running_mean,
                               buffers_.data() + l->running_var, spec);
      }
      if (l->relu) backend_.relu_forward(out, out, n * l->C * l->HW);
    } else if (auto* l = std::get_if<AddLayer>(&layer)) {
      const int64_t count = n * m.acts[l->out].per_image();
      float* out = m.acts[l->out].data.data();
      m.host->residual_forward(out, m.acts[l->a].data.data(), m.acts[l->b].data.data(), count);
      if (l->relu) backend_.relu_forward(out, out, count);
    } else if (auto* l = std::get_if<MaxPoolLayer>(&layer)) {
      PoolShape s = l->shape;
      s.N = n;
      backend_.maxpool_forward(m.acts[l->out].data.data(), l->argmax.data(),
                               m.acts[l->in].data.data(), s);
    } else if (auto* l = std::get_if<AvgPoolLayer>(&layer)) {
      const Act& in = m.acts[l->in];
      backend_.avgpool_forward(m.acts[l->out].data.data(), in.data.data(), n, in.C,
                               in.H * in.W);
    } else if (auto* l = std::get_if<FcLayer>(&layer)) {
      m.host->matmul_forward(m.acts[l->out].data.data(), m.acts[l->in].data.data(),
                             P + l->weight, P + l->bias, n, l->C, l->OC);
    }
  }
  backend_.xent_smooth_forward(m.losses.data(), m.acts[m.logits].data.data(), m.labels.data(), n,
                               config_.num_classes, options_.label_smoothing);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += m.losses[i];
  return sum / double(n);
}

void ResNet::zero_grad() { std::fill(grads_.begin(), grads_.end(), 0.0f); }

void ResNet::backward(float grad_multiplier) {
  Impl& m = *impl_;
  const int64_t n = m.n;
  AISCALE_CHECK(n > 0, "ResNet backward without a forward");
  // d(mean loss)/d(loss_i) = 1/n
  std::fill(m.dlosses.begin(), m.dlosses.begin() + n, grad_multiplier / float(n));
  backend_.xent_smooth_backward(m.acts[m.logits].grad.data(), m.acts[m.logits].data.data(),
                                m.labels.data(), m.dlosses.data(), n, config_.num_classes,
                                options_.label_smoothing);
  for (size_t i = 1; i < m.acts.size(); ++i) {
    Act& a = m.acts[i];
    if (a.consumers > 1) std::fill(a.grad.begin(), a.grad.begin() + n * a.per_image(), 0.0f);
  }
  // Where a layer writes the gradient of its input `act`: the buffer itself (one reader),
  // else the scratch, added by `finish`.
  auto target = [&](int act) -> float* {
    if (act == 0) return nullptr;
    return m.acts[act].consumers > 1 ? m.grad_scratch.data() : m.acts[act].grad.data();
  };
  auto finish = [&](int act) {
    if (act == 0 || m.acts[act].consumers <= 1) return;
    Act& a = m.acts[act];
    const int64_t count = n * a.per_image();
    const float* src = m.grad_scratch.data();
    float* dst = a.grad.data();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < count; ++i) dst[i] += src[i];
  };
  float* P = params_.data();
  float* G = grads_.data();
  for (auto it = m.layers.rbegin(); it != m.layers.rend(); ++it) {
    Layer& layer = *it;
    if (auto* l = std::get_if<ConvLayer>(&layer)) {
      ConvShape s = l->shape;
      s.N = n;
      backend_.conv2d_backward(target(l->in), G + l->weight, nullptr, m.acts[l->out].grad.data(),
                               m.acts[l->in].data.data(), P + l->weight, s,
                               m.conv_scratch.data());
      finish(l->in);
    } else if (auto* l = std::get_if<BnLayer>(&layer)) {
      Act& out = m.acts[l->out];
      const int64_t count = n * l->C * l->HW;
      if (l->relu) backend_.relu_backward(out.grad.data(), out.data.data(), out.grad.data(), count);
      const BatchNormSpec spec{n, l->C, l->HW, options_.bn_eps, options_.bn_momentum};
      batchnorm_train_backward(backend_, target(l->in), G + l->gamma, G + l->beta,
                               out.grad.data(), m.acts[l->in].data.data(),
                               P + l->gamma, spec, l->saved, bn_sync_);
      finish(l->in);
    } else if (auto* l = std::get_if<AddLayer>(&layer)) {
      Act& out = m.acts[l->out];
      const int64_t count = n * out.per_image();
      if (l->relu) backend_.relu_backward(out.grad.data(), out.data.data(), out.grad.data(), count);
      for (int input : {l->a, l->b}) {
        std::memcpy(target(input), out.grad.data(), count * sizeof(float));
        finish(input);
      }
    } else if (auto* l = std::get_if<MaxPoolLayer>(&layer)) {
      PoolShape s = l->shape;
      s.N = n;
      backend_.maxpool_backward(target(l->in), m.acts[l->out].grad.data(), l->argmax.data(), s);
      finish(l->in);
    } else if (auto* l = std::get_if<AvgPoolLayer>(&layer)) {
      const Act& in = m.acts[l->in];
      backend_.avgpool_backward(target(l->in), m.acts[l->out].grad.data(), n, in.C, in.H * in.W);
      finish(l->in);
    } else if (auto* l = std::get_if<FcLayer>(&layer)) {
      m.host->matmul_backward(target(l->in), G + l->weight, G + l->bias,
                              m.acts[l->out].grad.data(), m.acts[l->in].data.data(),
                              P + l->weight, n, l->C, l->OC);
      finish(l->in);
    }
  }
}

const float* ResNet::logits() const { return impl_->acts[impl_->logits].data.data(); }

void ResNet::count_correct(const int32_t* labels, int64_t n, int64_t& top1, int64_t& top5) const {
  const int64_t V = config_.num_classes;
  const float* z = logits();
  top1 = top5 = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float mine = z[i * V + labels[i]];
    // Rank of the true class: classes scoring higher (ties count against it).
    int64_t above = 0;
    for (int64_t j = 0; j < V; ++j) {
      if (j != labels[i] && z[i * V + j] >= mine) ++above;
    }
    top1 += above < 1;
    top5 += above < 5;
  }
}

double ResNet::train_batch(const Batch& b, float grad_multiplier) {
  if (!b.images || !b.labels || b.n < 1) fail("a ResNet trains on a batch of images with labels");
  const double loss = forward(b.images, b.labels, b.n, true);
  backward(grad_multiplier);
  return loss;
}

double ResNet::eval_batch(const Batch& b) {
  if (!b.images || !b.labels || b.n < 1) fail("a ResNet evaluates a batch of images with labels");
  return forward(b.images, b.labels, b.n, false);
}

size_t ResNet::activation_bytes() const {
  size_t values = impl_->conv_scratch.size() + impl_->grad_scratch.size();
  for (const Act& a : impl_->acts) values += a.data.size() + a.grad.size();
  return values * sizeof(float);
}

void ResNet::add_metrics(double* sums) const {
  int64_t top1 = 0, top5 = 0;
  count_correct(impl_->labels.data(), impl_->n, top1, top5);
  sums[0] += double(top1);
  sums[1] += double(top5);
}

double ResNet::forward_flops_per_image() const {
  double flops = 0;
  for (const Layer& layer : impl_->layers) {
    if (const auto* l = std::get_if<ConvLayer>(&layer)) {
      const ConvShape& s = l->shape;
      flops += 2.0 * s.OC * s.C * s.K * s.K * s.OH() * s.OW();
    } else if (const auto* l = std::get_if<FcLayer>(&layer)) {
      flops += 2.0 * l->C * l->OC;
    }
  }
  return flops;
}

int64_t resnet_parameter_count(const ResNetConfig& config) {
  ResNetOptions options;
  options.max_batch = 0;
  return ResNet(config, options, ops::vision::vision_cpu_backend()).num_parameters();
}

}  // namespace aiscale::nn
