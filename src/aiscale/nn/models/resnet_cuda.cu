// The GPU ResNet's device half: one arena (parameters, gradients, momentum, running
// statistics, every activation, the gradient slots, cuDNN's and cuBLASLt's workspaces),
// one stream, cuDNN convolutions with their algorithms chosen at construction, and the
// vision kernels (ops/vision/cuda) for everything else. A step allocates nothing.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <tuple>
#include <vector>

#include "aiscale/nn/models/resnet_cuda_device.h"
#include "aiscale/ops/cuda/common.cuh"
#include "aiscale/optim/zero1.cuh"
#include "aiscale/ops/cuda/cuda_ops.cuh"
#include "aiscale/ops/vision/cuda/batchnorm_cudnn.cuh"
#include "aiscale/ops/vision/cuda/conv_cudnn.cuh"
#include "aiscale/ops/vision/cuda/vision_cuda.cuh"
#include "aiscale/parallel/comm.h"
#include "aiscale/parallel/data_parallel/reducer.cuh"

namespace aiscale::nn::detail {
namespace {

namespace cv = aiscale::cuda::vision;
using Kind = ResNetCudaLayerKind;

// Offsets of the arena's parts, laid out once (256-byte aligned).
class Layout {
 public:
  size_t take(size_t bytes) {
    const size_t at = (end_ + 255) / 256 * 256;
    end_ = at + std::max<size_t>(bytes, 1);
    return at;
  }
  size_t bytes() const { return end_; }

 private:
  size_t end_ = 0;
};

class Device final : public ResNetCudaDevice {
 public:
  Device(const ResNetCudaPlan& plan, const ResNetCudaSettings& s)
      : plan_(plan), s_(s), t_(s.dtype), ts_(dtype_size(s.dtype)), amp_(s.dtype != DType::f32) {
    for (const ResNetCudaLayer& l : plan_.layers) {
      if (l.kind == Kind::fc && l.acc_in)
        throw Error("GPU ResNet: the classifier's input has another reader");
    }
    AISCALE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    order_ = resnet_gradient_order(plan_, kSegmentValues);
    completed_by_.resize(plan_.layers.size());
    for (const parallel::dp::GradientSegment& g : order_) completed_by_[size_t(g.point)].push_back(g);
    create_reducer();
    cudnn_ = std::make_unique<cv::CudnnContext>(stream_);
    allocate();
    choose_algorithms();
    if (s_.cudnn_batchnorm) choose_batchnorm();
    gemm_ = std::make_unique<cuda::Gemm>(gemm_ws_, cuda::Gemm::kWorkspaceBytes);
    AISCALE_CUDA_CHECK(cudaMemsetAsync(arena_, 0, layout_bytes_, stream_));
    AISCALE_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (reducer_) {
      // No bf16 bucket copies: the ResNet's gradients travel in fp32.
      reducer_->connect({grads_, /*comm_buffer=*/nullptr, sum_squares_, sum_squares_scratch_,
                         host_sum_squares_},
                        stream_, arena_, layout_bytes_);
      if (s_.zero_stage == 1) zero1_ = std::make_unique<optim::Zero1>(*reducer_, plan_.num_params);
    }
  }

  ~Device() override {
    zero1_.reset();
    reducer_.reset();  // waits for collectives still using the arena
    gemm_.reset();
    convs_.clear();
    cudnn_bn_.clear();
    cudnn_.reset();
    if (host_out_) cudaFreeHost(host_out_);
    if (host_sum_squares_) cudaFreeHost(host_sum_squares_);
    if (arena_) cudaFree(arena_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  void set_state(const float* params, const float* buffers, const float* velocity) override {
    const size_t pb = size_t(plan_.num_params) * sizeof(float);
    AISCALE_CUDA_CHECK(cudaMemcpyAsync(params_, params, pb, cudaMemcpyHostToDevice, stream_));
    AISCALE_CUDA_CHECK(cudaMemcpyAsync(buffers_, buffers, size_t(plan_.num_buffers) * sizeof(float),
                                       cudaMemcpyHostToDevice, stream_));
    if (velocity && zero1_) {
      zero1_->scatter(velocity, velocity_, stream_);  // this rank's parts
    } else if (velocity) {
      AISCALE_CUDA_CHECK(cudaMemcpyAsync(velocity_, velocity, pb, cudaMemcpyHostToDevice, stream_));
    } else {
      AISCALE_CUDA_CHECK(cudaMemsetAsync(velocity_, 0, size_t(state_values()) * sizeof(float), stream_));
    }
    if (amp_) cv::convert_from_f32(weights_, t_, params_, plan_.weight_end, stream_);
    synchronize();
  }

  void get_state(float* params, float* buffers, float* velocity) override {
    const size_t pb = size_t(plan_.num_params) * sizeof(float);
    AISCALE_CUDA_CHECK(cudaMemcpyAsync(params, params_, pb, cudaMemcpyDeviceToHost, stream_));
    AISCALE_CUDA_CHECK(cudaMemcpyAsync(buffers, buffers_, size_t(plan_.num_buffers) * sizeof(float),
                                       cudaMemcpyDeviceToHost, stream_));
    if (velocity && zero1_) {
      synchronize();
      // Every rank's shard (collective; the gradient buffer is its scratch: a checkpoint
      // falls between steps, whose first act is zero_grad).
      zero1_->gather(velocity_, velocity, grads_, stream_);
    } else if (velocity) {
      AISCALE_CUDA_CHECK(cudaMemcpyAsync(velocity, velocity_, pb, cudaMemcpyDeviceToHost, stream_));
    }
    synchronize();
  }

  void get_grads(float* grads) override {
    AISCALE_CUDA_CHECK(cudaMemcpyAsync(grads, grads_, size_t(plan_.num_params) * sizeof(float),
                                       cudaMemcpyDeviceToHost, stream_));
    synchronize();
    if (s_.loss_scale != 1.0f) {
      for (int64_t i = 0; i < plan_.num_params; ++i) grads[i] /= s_.loss_scale;
    }
  }

  void load_batch(const float* images, const int32_t* labels, int64_t n) override {
    if (n < 1 || n > plan_.max_batch)
      throw Error("GPU ResNet: batch of " + std::to_string(n) + " images, the model was built "
                  "for 1.." + std::to_string(plan_.max_batch));
    const ResNetCudaAct& in = plan_.acts[0];
    AISCALE_CUDA_CHECK(cudaMemcpyAsync(staging_, images, size_t(n * in.per_image()) * sizeof(float),
                                       cudaMemcpyHostToDevice, stream_));
    AISCALE_CUDA_CHECK(cudaMemcpyAsync(labels_, labels, size_t(n) * sizeof(int32_t),
                                       cudaMemcpyHostToDevice, stream_));
    cv::nchw_to_nhwc(t_, act(0), staging_, n, in.C, in.H * in.W, stream_);
    n_ = n;
    synchronize();  // the host arrays may change once this returns
  }

  double forward(bool train) override {
    const int64_t n = n_;
    if (n < 1) throw Error("GPU ResNet: forward before any batch was loaded");
    for (size_t i = 0; i < plan_.layers.size(); ++i) {
      const ResNetCudaLayer& l = plan_.layers[i];
      switch (l.kind) {
        case Kind::conv:
          convs_[i]->forward(act(l.out), act(l.in), weight(l.weight), n, workspace_, stream_);
          break;
        case Kind::bn: {
          float* st = bn_state(l);
          float *mean = st, *rstd = st + l.C, *scale = st + 2 * l.C, *shift = st + 3 * l.C;
          const int64_t R = n * l.H * l.W;
          if (train && cudnn_bn_[size_t(l.bn_index)]) {
            cudnn_bn_[size_t(l.bn_index)]->forward(bn_buffers(l), s_.bn_momentum, s_.bn_eps, n,
                                                   workspace_, bn_reserve(l), stream_);
            break;
          }
          if (train) {
            cv::batchnorm_stats(t_, mean, rstd, scale, shift, buffers_ + l.running_mean,
                                buffers_ + l.running_var, act(l.in), params_ + l.gamma,
                                params_ + l.beta, R, l.C, s_.bn_eps, s_.bn_momentum,
                                bn_scratch_, stream_);
          } else {
            cv::batchnorm_eval_coefficients(scale, shift, buffers_ + l.running_mean,
                                            buffers_ + l.running_var, params_ + l.gamma,
                                            params_ + l.beta, l.C, s_.bn_eps, stream_);
          }
          cv::batchnorm_apply(t_, act(l.out), act(l.in), l.z >= 0 ? act(l.z) : nullptr, scale,
                              shift, R, l.C, l.relu, stream_);
          break;
        }
        case Kind::maxpool:
          cv::maxpool_forward(t_, act(l.out), argmax_[l.pool_index], act(l.in), n, l.H, l.W, l.C,
                              l.K, l.stride, l.pad, stream_);
          break;
        case Kind::avgpool:
          cv::avgpool_forward(t_, act(l.out), act(l.in), n, l.H * l.W, l.C, stream_);
          break;
        case Kind::fc:
          cuda::linear_forward(*gemm_, t_, act(l.out), nullptr, act(l.in), weight(l.weight),
                               weight(l.bias), nullptr, n, l.C, l.OC, cuda::LinearOptions{},
                               stream_);
          break;
      }
    }
    const int logits = plan_.logits;
    cv::xent_smooth(t_, losses_, train ? grad(logits) : nullptr, correct_, act(logits), labels_, n,
                    plan_.num_classes, s_.label_smoothing, s_.loss_scale / float(n), stream_);
    AISCALE_CUDA_CHECK(cudaMemcpyAsync(host_out_, losses_, size_t(n) * sizeof(float),
                                       cudaMemcpyDeviceToHost, stream_));
    AISCALE_CUDA_CHECK(cudaMemcpyAsync(host_out_ + plan_.max_batch, correct_, 2 * sizeof(int32_t),
                                       cudaMemcpyDeviceToHost, stream_));
    synchronize();
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += host_out_[i];
    int32_t counts[2];
    std::memcpy(counts, host_out_ + plan_.max_batch, sizeof counts);
    top1_ = counts[0];
    top5_ = counts[1];
    trained_ = train;
    return sum / double(n);
  }

  void correct(int64_t& top1, int64_t& top5) const override {
    top1 = top1_;
    top5 = top5_;
  }

  void zero_grad() override {
    AISCALE_CUDA_CHECK(cudaMemsetAsync(grads_, 0, size_t(padded_) * sizeof(float), stream_));
  }

  // Layer by layer from the top; as each layer's backward is queued, the segments it
  // completes are made fp32 (AMP) and announced to the reducer, which sums every bucket
  // whose last segment that was.
  void backward() override {
    if (!trained_) throw Error("GPU ResNet: backward without a training forward");
    const int64_t n = n_;
    const bool sync = reducer_ && reducer_->begin_step(true);
    for (size_t i = plan_.layers.size(); i-- > 0;) {
      backward_layer(i, n);
      for (const parallel::dp::GradientSegment& g : completed_by_[i])
        if (amp_ && g.end <= plan_.weight_end) complete_weight_grads(g.begin, g.end);
      if (sync && !completed_by_[i].empty()) reducer_->gradients_ready(int(i), stream_);
    }
    // Without overlap the reducer's one bucket waits for the whole backward.
    if (sync) reducer_->gradients_ready(parallel::dp::kAfterBackward, stream_);
  }

  // The sums the backward queued (none on one rank).
  void reduce_gradients() override {
    if (reducer_) reducer_->wait_for_sums();
  }

  int64_t state_values() const override {
    return zero1_ ? zero1_->shard_size() : plan_.num_params;
  }

 private:
  // The reducer GPT's data parallelism uses, over the plan's gradient order; null on one
  // rank. Every communicator of several GPU ranks has a device stream (NCCL's, or the
  // host-staged MPI and TCP ones: parallel/host_staged.cpp).
  void create_reducer() {
    padded_ = plan_.num_params;
    parallel::Communicator* comm = s_.comm;
    if (!comm || comm->world() <= 1) return;  // one rank: nothing to sum or shard
    parallel::dp::ReducerOptions ro;
    ro.zero_stage = s_.zero_stage;
    ro.overlap = s_.overlap;
    ro.bucket_mib = s_.bucket_mib;
    ro.grad_transport = "nccl";  // the communicator's own collectives
    ro.timeout_s = s_.timeout_s;
    reducer_ = parallel::dp::Reducer::create(comm, ro, order_, plan_.num_params, nullptr);
    AISCALE_CUDA_REQUIRE(reducer_ != nullptr, "GPU ResNet: the communicator of several ranks "
                                              "has no device stream");
    padded_ = reducer_->plan().padded_size;
  }

  // AMP: the convolutions wrote 16-bit weight gradients; add [lo, hi) of them to the fp32
  // ones (the classifier's part of that buffer stays zero: it wrote fp32 directly).
  void complete_weight_grads(int64_t lo, int64_t hi) {
    cv::add_to_f32(grads_ + lo, static_cast<char*>(weight_grads_) + lo * int64_t(ts_), t_, hi - lo,
                   stream_);
  }

  void backward_layer(size_t i, int64_t n) {
    {
      const ResNetCudaLayer& l = plan_.layers[i];
      switch (l.kind) {
        case Kind::conv:
          if (l.in > 0)
            convs_[i]->backward_data(grad(l.in), grad(l.out), weight(l.weight), n, l.acc_in,
                                     workspace_, stream_);
          convs_[i]->backward_filter(weight_grad(l.weight), grad(l.out), act(l.in), n,
                                     /*accumulate=*/!amp_, workspace_, stream_);
          break;
        case Kind::bn: {
          if (cudnn_bn_[size_t(l.bn_index)]) {
            cudnn_bn_[size_t(l.bn_index)]->backward(
                grad(l.in), l.z >= 0 ? grad(l.z) : nullptr, grads_ + l.gamma, grads_ + l.beta,
                grad(l.out), bn_buffers(l), s_.bn_eps, n, l.acc_in, workspace_, bn_reserve(l),
                stream_);
            break;
          }
          const float* st = bn_state(l);
          cv::batchnorm_backward(t_, grad(l.in), l.z >= 0 ? grad(l.z) : nullptr,
                                 grads_ + l.gamma, grads_ + l.beta, grad(l.out), act(l.out),
                                 act(l.in), st, st + l.C, params_ + l.gamma, n * l.H * l.W, l.C,
                                 l.relu, l.acc_in, l.acc_z, bn_scratch_, stream_);
          break;
        }
        case Kind::maxpool:
          cv::maxpool_backward(t_, grad(l.in), grad(l.out), argmax_[l.pool_index], n, l.H, l.W,
                               l.C, l.K, l.stride, l.pad, l.acc_in, stream_);
          break;
        case Kind::avgpool:
          cv::avgpool_backward(t_, grad(l.in), grad(l.out), n, l.H * l.W, l.C, l.acc_in, stream_);
          break;
        case Kind::fc:
          cuda::linear_backward_input(*gemm_, t_, grad(l.in), grad(l.out), weight(l.weight), n,
                                      l.C, l.OC, l.OC, 1.0f, nullptr, nullptr, nullptr,
                                      cuda::LinearOptions{}, stream_);
          cuda::linear_backward_weight(*gemm_, t_, grads_ + l.weight, nullptr, grad(l.out),
                                       act(l.in), n, l.C, l.OC, l.OC, 1.0f, nullptr,
                                       cuda::LinearOptions{}, stream_);
          cv::column_sum_add(t_, grads_ + l.bias, grad(l.out), n, l.OC, stream_);
          break;
      }
    }
  }

 public:
  void sgd_step(double lr, float grad_scale) override {
    const float scale = grad_scale / s_.loss_scale;
    if (!zero1_) {
      cv::sgd_step(params_, grads_, velocity_, plan_.num_params, float(lr), s_.momentum,
                   s_.nesterov, s_.weight_decay, plan_.decay_end, scale, t_,
                   amp_ ? weights_ : nullptr, plan_.weight_end, stream_);
      return;
    }
    // ZeRO-1: SGD on this rank's part of every bucket (its momentum in the shard), the
    // fp32 parameters all-gathered, then the 16-bit copies of the whole weights region.
    zero1_->update_parts(
        [&](int64_t lo, int64_t hi, int64_t state_offset) {
          const int64_t decay_end = std::clamp<int64_t>(plan_.decay_end - lo, 0, hi - lo);
          cv::sgd_step(params_ + lo, grads_ + lo, velocity_ + state_offset, hi - lo, float(lr),
                       s_.momentum, s_.nesterov, s_.weight_decay, decay_end, scale, t_, nullptr,
                       0, stream_);
        },
        DType::f32, params_, stream_);
    if (amp_) cv::convert_from_f32(weights_, t_, params_, plan_.weight_end, stream_);
  }

  void synchronize() override { AISCALE_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

  std::string describe() const override {
    std::string d = std::string(cuda::dtype_str(t_)) + (amp_ ? " AMP" : "") +
                    (!amp_ && s_.tf32 ? " (TF32 convolutions)" : "") + ", " +
                    std::to_string(unique_convs_) + " convolution shapes (" +
                    std::to_string(graph_engines_) + " directions on cuDNN graph engines), batch norm: " +
                    (cudnn_bn_layers_ > 0 ? std::to_string(cudnn_bn_layers_) + " of " +
                                                std::to_string(bn_offsets_.size()) + " layers cuDNN"
                                          : std::string("own kernels")) +
                    (zero1_ ? ", ZeRO-1 over " + std::to_string(reducer_->world()) + " ranks"
                     : reducer_ ? ", gradients summed over " + std::to_string(reducer_->world()) +
                                      " ranks in " + std::to_string(reducer_->buckets().size()) +
                                      " bucket(s)"
                                : std::string()) +
                    ", cuDNN workspace " +
                    std::to_string(s_.workspace_bytes >> 20) + " MiB, arena " +
                    std::to_string(layout_bytes_ >> 20) + " MiB";
    return d;
  }

  int64_t arena_bytes() const override { return int64_t(layout_bytes_); }

 private:
  void* act(int a) const { return act_data_[size_t(a)]; }
  void* grad(int a) const {
    const int slot = plan_.acts[size_t(a)].grad_slot;
    return slot >= 0 ? slots_[size_t(slot)] : nullptr;
  }
  // The compute copy of a weight (device offset): the fp32 master itself without AMP.
  void* weight(int64_t offset) const {
    return amp_ ? static_cast<void*>(static_cast<char*>(weights_) + offset * int64_t(ts_))
                : static_cast<void*>(params_ + offset);
  }
  void* weight_grad(int64_t offset) const {
    return amp_ ? static_cast<void*>(static_cast<char*>(weight_grads_) + offset * int64_t(ts_))
                : static_cast<void*>(grads_ + offset);
  }
  float* bn_state(const ResNetCudaLayer& l) const { return bn_state_ + bn_offsets_[size_t(l.bn_index)]; }
  void* bn_reserve(const ResNetCudaLayer& l) const {
    return static_cast<char*>(bn_reserve_) + bn_reserve_offsets_[size_t(l.bn_index)];
  }
  cv::BatchNormBuffers bn_buffers(const ResNetCudaLayer& l) const {
    float* st = bn_state(l);
    return {act(l.out), act(l.in), l.z >= 0 ? act(l.z) : nullptr, params_ + l.gamma,
            params_ + l.beta, buffers_ + l.running_mean, buffers_ + l.running_var, st, st + l.C};
  }

  // cuDNN's fused batch norm for every layer it takes: sized in allocate() (reserve bytes
  // > 0), then run once here on the arena; a refusal keeps the own kernels for the layer.
  // The automatic cuDNN workspace: what the GPU has free beside the rest of the arena, less
  // 2 GiB for the libraries (cuBLAS, cuDNN's handles, NCCL), between 512 MiB and 16 GiB.
  // Engines that need gigabytes are what real fp32 runs fastest with: ResNet-50 at batch 256
  // ran 234 images/s within 512 MiB and 977 within 16 GiB (H100, 2026-11-27).
  static size_t automatic_workspace(size_t rest) {
    size_t free = 0, total = 0;
    AISCALE_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    constexpr size_t kMiB = size_t(1) << 20, kMin = 512 * kMiB, kMax = size_t(16) << 30,
                     kMargin = size_t(2) << 30;
    const size_t spare = free > rest + kMargin ? free - rest - kMargin : 0;
    return std::clamp(spare / kMiB * kMiB, kMin, kMax);
  }

  void choose_batchnorm() {
    for (const ResNetCudaLayer& l : plan_.layers) {
      if (l.kind != Kind::bn || bn_reserve_bytes_[size_t(l.bn_index)] == 0 || l.acc_z) continue;
      // cuDNN reads these vectors with 16-byte loads (the plan's layout aligns them; a
      // layout that did not would fault on the device, not be refused).
      const cv::BatchNormBuffers b = bn_buffers(l);
      bool aligned = true;
      for (const void* p : {static_cast<const void*>(b.gamma), static_cast<const void*>(b.beta),
                            static_cast<const void*>(b.running_mean),
                            static_cast<const void*>(b.running_var),
                            static_cast<const void*>(b.save_mean),
                            static_cast<const void*>(b.save_rstd),
                            static_cast<const void*>(grads_ + l.gamma),
                            static_cast<const void*>(grads_ + l.beta)})
        aligned = aligned && reinterpret_cast<uintptr_t>(p) % 16 == 0;
      if (!aligned) continue;
      try {
        cudnn_bn_[size_t(l.bn_index)] = std::make_unique<cv::CudnnBatchNorm>(
            *cudnn_, t_, plan_.max_batch, l.H, l.W, l.C, l.relu, l.z >= 0, bn_buffers(l),
            grad(l.in), l.z >= 0 ? grad(l.z) : nullptr, grads_ + l.gamma, grads_ + l.beta,
            grad(l.out), workspace_, s_.workspace_bytes, bn_reserve(l),
            bn_reserve_bytes_[size_t(l.bn_index)]);
        ++cudnn_bn_layers_;
      } catch (const Error&) {
        // A refusal keeps the own kernels; a fault on the device is no refusal (it leaves
        // the context unusable), so it goes on up with its own message.
        if (cudaStreamSynchronize(stream_) != cudaSuccess) throw;
        cudnn_bn_[size_t(l.bn_index)].reset();
      }
    }
    synchronize();
  }

  void allocate() {
    const int64_t B = plan_.max_batch;
    // Parameters and gradients padded to the reducer's multiple of the ranks (ZeRO-1), the
    // tail zero; the momentum is the rank's shard under ZeRO-1.
    const size_t np = size_t(padded_);
    const size_t nv = size_t(s_.zero_stage == 1 && reducer_ ? reducer_->plan().shard_size
                                                            : plan_.num_params);
    Layout L;
    const size_t o_params = L.take(np * 4), o_grads = L.take(np * 4), o_vel = L.take(nv * 4);
    const size_t n_squares = reducer_ ? reducer_->sum_squares_slots() : 1;
    const size_t o_squares = L.take(n_squares * 8);
    const size_t o_squares_scratch = L.take(size_t(cuda::sum_squares_scratch_doubles()) * 8);
    const size_t o_buf = L.take(size_t(plan_.num_buffers) * 4);
    const size_t o_w = amp_ ? L.take(size_t(plan_.weight_end) * ts_) : 0;
    const size_t o_dw = amp_ ? L.take(size_t(plan_.weight_end) * ts_) : 0;
    std::vector<size_t> o_acts;
    int64_t largest = 0;
    for (const ResNetCudaAct& a : plan_.acts) {
      o_acts.push_back(L.take(size_t(B * a.per_image()) * ts_));
      largest = std::max(largest, B * a.per_image());
    }
    std::vector<size_t> o_slots;
    for (int i = 0; i < plan_.grad_slots; ++i) o_slots.push_back(L.take(size_t(largest) * ts_));
    const ResNetCudaAct& in = plan_.acts[0];
    const size_t o_staging = L.take(size_t(B * in.per_image()) * 4);
    const size_t o_labels = L.take(size_t(B) * 4);
    std::vector<size_t> o_argmax;
    int64_t bn_floats = 0, bn_scratch = 0;
    size_t bn_reserve_total = 0;
    for (const ResNetCudaLayer& l : plan_.layers) {
      if (l.kind == Kind::maxpool)
        o_argmax.push_back(L.take(size_t(B * plan_.acts[size_t(l.out)].per_image()) * 4));
      if (l.kind == Kind::bn) {
        size_t reserve = 0;
        if (s_.cudnn_batchnorm) {
          try {
            reserve = cv::CudnnBatchNorm::reserve_bytes_for(*cudnn_, t_, B, l.H, l.W, l.C, l.relu,
                                                            l.z >= 0);
            reserve = std::max<size_t>(reserve, 1);  // > 0 marks "cuDNN may take it"
          } catch (const Error&) {
            reserve = 0;
          }
        }
        bn_reserve_offsets_.push_back(int64_t(bn_reserve_total));
        bn_reserve_bytes_.push_back(reserve);
        bn_reserve_total += (reserve + 255) / 256 * 256;
        bn_offsets_.push_back(bn_floats);
        bn_floats += 4 * l.C;
        bn_scratch = std::max(bn_scratch, cv::batchnorm_scratch_floats(B * l.H * l.W, l.C));
      }
    }
    const size_t o_bn = L.take(size_t(bn_floats) * 4), o_bn_scratch = L.take(size_t(bn_scratch) * 4);
    const size_t o_bn_reserve = L.take(bn_reserve_total);
    const size_t o_losses = L.take(size_t(B) * 4), o_correct = L.take(8);
    if (s_.workspace_auto) s_.workspace_bytes = automatic_workspace(L.bytes() + cuda::Gemm::kWorkspaceBytes);
    const size_t o_ws = L.take(s_.workspace_bytes);
    const size_t o_gemm = L.take(cuda::Gemm::kWorkspaceBytes);
    layout_bytes_ = L.bytes();
    AISCALE_CUDA_CHECK(cudaMalloc(&arena_, layout_bytes_));
    char* base = static_cast<char*>(arena_);
    params_ = reinterpret_cast<float*>(base + o_params);
    grads_ = reinterpret_cast<float*>(base + o_grads);
    velocity_ = reinterpret_cast<float*>(base + o_vel);
    sum_squares_ = reinterpret_cast<double*>(base + o_squares);
    sum_squares_scratch_ = reinterpret_cast<double*>(base + o_squares_scratch);
    AISCALE_CUDA_CHECK(cudaMallocHost(&host_sum_squares_, n_squares * 8));
    buffers_ = reinterpret_cast<float*>(base + o_buf);
    weights_ = amp_ ? base + o_w : nullptr;
    weight_grads_ = amp_ ? base + o_dw : nullptr;
    for (size_t o : o_acts) act_data_.push_back(base + o);
    for (size_t o : o_slots) slots_.push_back(base + o);
    staging_ = reinterpret_cast<float*>(base + o_staging);
    labels_ = reinterpret_cast<int32_t*>(base + o_labels);
    for (size_t o : o_argmax) argmax_.push_back(reinterpret_cast<int32_t*>(base + o));
    bn_state_ = reinterpret_cast<float*>(base + o_bn);
    bn_scratch_ = reinterpret_cast<float*>(base + o_bn_scratch);
    bn_reserve_ = base + o_bn_reserve;
    cudnn_bn_.resize(bn_offsets_.size());
    losses_ = reinterpret_cast<float*>(base + o_losses);
    correct_ = reinterpret_cast<int32_t*>(base + o_correct);
    workspace_ = base + o_ws;
    gemm_ws_ = base + o_gemm;
    AISCALE_CUDA_CHECK(cudaMallocHost(&host_out_, size_t(B + 2) * sizeof(float)));
  }

  // One cuDNN plan per distinct convolution (shape, and whether it needs backward-data),
  // timed on this model's own buffers at the largest batch.
  void choose_algorithms() {
    AISCALE_CUDA_CHECK(cudaMemsetAsync(arena_, 0, layout_bytes_, stream_));
    std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool>,
             std::shared_ptr<cv::CudnnConv>>
        cache;
    convs_.resize(plan_.layers.size());
    for (size_t i = 0; i < plan_.layers.size(); ++i) {
      const ResNetCudaLayer& l = plan_.layers[i];
      if (l.kind != Kind::conv) continue;
      cv::ConvGeometry g{plan_.max_batch, l.C, l.H, l.W, l.OC, l.K, l.stride, l.pad};
      const bool bwd_data = l.in > 0;
      auto key = std::make_tuple(l.C, l.H, l.W, l.OC, l.K, l.stride, l.pad, bwd_data);
      auto it = cache.find(key);
      if (it == cache.end()) {
        cv::ConvBuffers b{act(l.in), weight(l.weight), act(l.out),
                          bwd_data ? slots_.at(0) : nullptr, weight_grad(l.weight)};
        it = cache.emplace(key, std::make_shared<cv::CudnnConv>(*cudnn_, t_, s_.tf32, g, bwd_data,
                                                                b, workspace_, s_.workspace_bytes))
                 .first;
      }
      convs_[i] = it->second;
    }
    unique_convs_ = int(cache.size());
    graph_engines_ = 0;
    for (const auto& [key, conv] : cache) graph_engines_ += conv->graph_engines();
    synchronize();
  }

  ResNetCudaPlan plan_;
  ResNetCudaSettings s_;
  DType t_;
  size_t ts_;
  bool amp_;
  cudaStream_t stream_ = nullptr;
  void* arena_ = nullptr;
  size_t layout_bytes_ = 0;
  float *params_ = nullptr, *grads_ = nullptr, *velocity_ = nullptr, *buffers_ = nullptr;
  void *weights_ = nullptr, *weight_grads_ = nullptr, *workspace_ = nullptr, *gemm_ws_ = nullptr;
  std::vector<void*> act_data_, slots_;
  std::vector<int32_t*> argmax_;
  std::vector<int64_t> bn_offsets_, bn_reserve_offsets_;
  std::vector<size_t> bn_reserve_bytes_;
  void* bn_reserve_ = nullptr;
  std::vector<std::unique_ptr<cv::CudnnBatchNorm>> cudnn_bn_;
  int cudnn_bn_layers_ = 0;
  float *staging_ = nullptr, *bn_state_ = nullptr, *bn_scratch_ = nullptr, *losses_ = nullptr;
  int32_t *labels_ = nullptr, *correct_ = nullptr;
  float* host_out_ = nullptr;
  double *sum_squares_ = nullptr, *sum_squares_scratch_ = nullptr, *host_sum_squares_ = nullptr;
  std::unique_ptr<cv::CudnnContext> cudnn_;
  std::vector<std::shared_ptr<cv::CudnnConv>> convs_;
  std::unique_ptr<cuda::Gemm> gemm_;
  int unique_convs_ = 0;
  int graph_engines_ = 0;  // convolution directions run by a graph-API engine
  // Segments of at least 1 MiB of fp32 gradients: the reducer's buckets (about 25 MiB)
  // merge them, and each is one 16-bit-to-fp32 addition under AMP.
  static constexpr int64_t kSegmentValues = int64_t(1) << 18;
  parallel::dp::GradientOrder order_;
  std::vector<parallel::dp::GradientOrder> completed_by_;  // order_'s segments by layer
  std::unique_ptr<parallel::dp::Reducer> reducer_;
  std::unique_ptr<optim::Zero1> zero1_;
  int64_t padded_ = 0;  // values of the parameter and gradient buffers
  int64_t n_ = 0, top1_ = 0, top5_ = 0;
  bool trained_ = false;
};

}  // namespace

bool resnet_cuda_has_cudnn() { return cv::vision_cudnn_compiled(); }

std::unique_ptr<ResNetCudaDevice> ResNetCudaDevice::create(const ResNetCudaPlan& plan,
                                                           const ResNetCudaSettings& settings) {
  return std::make_unique<Device>(plan, settings);
}

}  // namespace aiscale::nn::detail
