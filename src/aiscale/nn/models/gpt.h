// The GPT-2 language model behind one interface, with a CPU implementation (this
// folder, gpt_cpu.cpp) and a CUDA implementation (gpt_cuda.cu). The trainer, the
// benchmarks, data parallelism and checkpoints only speak to this interface.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "aiscale/core/dtype.h"
#include "aiscale/nn/model.h"
#include "aiscale/nn/models/gpt_config.h"
#include "aiscale/ops/ops.h"

namespace aiscale::parallel {
class Communicator;
class ProcessGroups;
}
namespace aiscale::profile {
class OpProfiler;
}

namespace aiscale::nn {

struct GptRunOptions {
  int64_t batch = 4;        // B: micro-batch per step (per rank)
  int64_t seq = 64;         // T: sequence length (<= block_size)
  DType precision = DType::f32;  // activations / matmul inputs; master weights stay fp32
  // train.precision = "fp8" (CUDA GPUs with FP8 tensor cores): precision bf16, and the
  // GEMMs of the transformer blocks' linear layers in FP8 (e4m3 forward, e5m2 gradients,
  // ops/cuda/fp8.cuh) with delayed scaling over the amaxes of the last fp8_history steps
  // and 2^-fp8_margin of headroom (docs/design/fp8.md: the defaults' measurements). The LM
  // head, attention and norms stay bf16.
  bool fp8 = false;
  int fp8_history = 16;
  int fp8_margin = 1;
  bool recompute = false;   // recompute GELU/LayerNorm outputs in backward (saves memory)
  // Full activation recomputation: forward keeps each layer's input only; backward runs
  // the layer's forward again before its backward (one layer's activations held).
  bool recompute_layers = false;
  bool decay_embeddings = true;  // weight decay on wte/wpe too (GPT-2/nanoGPT: yes)
  std::string cpu_backend = "cpu";  // "cpu" (fast) or "reference"
  uint64_t seed = 1337;

  // Data parallelism. A GPU model given a communicator with a device stream (NCCL) and
  // more than one rank synchronises its gradients itself: buckets of about bucket_mib are
  // summed on the communicator's stream as soon as backward has produced them, overlapped
  // with the rest of backward (see data_parallel()). Other models leave it to the trainer.
  parallel::Communicator* comm = nullptr;  // not owned; must outlive the model
  // The CPU model's model-parallel layout (not owned; must outlive the model): its tensor
  // group splits every layer (tensor parallelism), its data group carries ZeRO-2/3. With a
  // tensor group of more than one rank or zero_stage >= 2 the model synchronises its
  // gradients over the data group itself (data_parallel() is true). Null: one tensor rank.
  parallel::ProcessGroups* groups = nullptr;
  bool sequence_parallel = false;  // LayerNorm regions split over the tensor ranks by token
  // Pipeline parallelism (the groups' pipeline group): each batch split into
  // `microbatches`, run through the stages in the order of `pipeline_schedule` (gpipe |
  // 1f1b: parallel/pipeline/schedule.h).
  int microbatches = 1;
  std::string pipeline_schedule = "1f1b";
  // 1: ZeRO-1: reduce-scatter instead of all-reduce, fp32 master weights and AdamW moments
  // sharded over the ranks (1/world each), AdamW on the local shard, then an all-gather of
  // the working copy. Needs a data-parallel GPU model. 2 (CPU model with groups): also the
  // gradients reduce-scattered into shards; 3: also the parameters sharded, each block's
  // gathered before it computes (optim/zero_shards.h).
  int zero_stage = 0;
  // ZeRO-3 on GPUs (also with one GPU): the fp32 master weights and AdamW moments in pinned
  // host memory, AdamW on the CPU (nn/models/gpt_zero3.cuh).
  bool offload_optimizer = false;
  bool overlap = true;      // false: one bucket after the whole backward (for measurements)
  double bucket_mib = 25;
  // Type the gradients travel in: f32, or bf16 (half the bytes; each bucket is rounded to
  // bf16 before the sum and widened back after it, like PyTorch DDP's bf16 compression
  // hook). Accumulation and the optimizer stay fp32.
  DType grad_comm = DType::f32;
  // How the buckets travel between the GPUs of one node: "nccl" (NCCL's kernels),
  // "copy-engine" (CUDA IPC copies by the copy engines, no SMs held while waiting for the
  // peers; plain data parallelism on one node only: parallel/cuda/copy_engine_group.h), or
  // "auto": the copy engines for plain data parallelism (ZeRO 0 or 1) where every rank can
  // set them up, else NCCL (docs/design/defaults.md).
  std::string grad_transport = "auto";
  double comm_timeout_s = 300;  // device collectives not complete after this long fail
  // GPU attention kernels: "auto" (cuDNN's fused engines where the build has cuDNN 9 and
  // they take the shape, else the own flash kernels, else CUDA cores; the environment
  // variable AISCALE_CUDA_ATTENTION may pick one of the others), "cudnn", "flash",
  // "simple". The CPU model has one attention and accepts only "auto".
  std::string attention = "auto";
};

// A GPT model is an nn::Model (nn/model.h) of token batches; the models that synchronise
// their gradients themselves (data_parallel()) also run their own AdamW (update()).
class GptModel : public Model {
 public:
  virtual const GptConfig& config() const = 0;
  virtual const GptRunOptions& options() const = 0;
  virtual std::string device_name() const = 0;
  // Which attention kernels run (for benchmark records), e.g. "cudnn (engines 2 / 2, cuDNN
  // 91400, workspace 256 B)", "flash", "simple", "cpu".
  virtual std::string attention_kernels() const { return "cpu"; }
  // How the data-parallel gradients travel once the model is built: "nccl" or
  // "copy-engine" on GPU ranks (parallel.grad_transport = "auto" resolved), "host" where
  // the communicator sums them on the host, "none" on one rank.
  virtual std::string gradient_transport() const { return options().comm ? "host" : "none"; }
  int64_t num_params() const override { return config().num_params(); }

  // nn::Model: the tensors of gpt_param_infos with the decay of gpt_decay_mask; a batch of
  // tokens (B x T inputs and targets) through forward_backward / forward.
  const std::vector<ParamTensor>& param_tensors() const override;
  double train_batch(const Batch& b, float grad_multiplier) override {
    return forward_backward(b.tokens, b.targets, grad_multiplier);
  }
  double eval_batch(const Batch& b) override { return forward(b.tokens, b.targets); }
  bool synchronizes_gradients() const override { return data_parallel(); }
  // Activation bytes; the default is the model's memory less its parameters, gradients and
  // optimizer state (a model that knows its activation buffers says so exactly).
  size_t activation_bytes() const override;

  // Forward pass on host tokens (B, T). With targets, returns the mean cross-entropy
  // loss and keeps what backward needs; targets may be null (then returns NaN and only
  // logits are computed).
  virtual float forward(const int32_t* inputs, const int32_t* targets) = 0;
  // Backward of the last forward; parameter gradients ACCUMULATE (gradient
  // accumulation), scaled by loss_scale / ... : d(mean loss) * grad_multiplier.
  virtual void backward(float grad_multiplier = 1.0f) = 0;
  // One micro-step of training: forward and backward of a batch, returning the loss. A
  // pipeline-parallel model runs its schedule of micro-batches here (its forward and
  // backward cannot be separated); the others do forward then backward.
  virtual float forward_backward(const int32_t* inputs, const int32_t* targets,
                                 float grad_multiplier) {
    const float loss = forward(inputs, targets);
    backward(grad_multiplier);
    return loss;
  }
  virtual bool pipelined() const { return false; }
  // Seconds the last forward_backward spent waiting for other pipeline stages (the bubble
  // as this rank saw it).
  virtual double pipeline_wait_s() const { return 0.0; }
  // True when this model synchronises gradients over the ranks of options().comm itself
  // (the trainer then must not all-reduce grad_buffer()): after the backward of a
  // synchronising micro-step, grad_sum_squares(), update(), get_grads() see gradients
  // summed over the ranks (with ZeRO-1, grad_buffer() holds the sums only in this rank's
  // shard; grad_sum_squares() and update() account for that).
  virtual bool data_parallel() const { return false; }
  // Whether the next forward/backward pair synchronises the gradients: the trainer turns
  // it off for all but the last micro-step of gradient accumulation (like DDP's no_sync).
  virtual void set_gradient_sync(bool on) { (void)on; }
  // True when get_params / get_optimizer_state are collectives that every rank must call
  // (ZeRO-1: each rank holds a shard and they are gathered).
  virtual bool collective_state() const { return false; }
  virtual void zero_grad() = 0;
  // --profile: record each op into `profiler` from now on (null: stop; the default model
  // records nothing). Called outside a step.
  virtual void set_profiler(profile::OpProfiler* profiler) { (void)profiler; }
  // Sum of squares of all gradients (for global-norm clipping), in fp32 master units.
  virtual double grad_sum_squares() = 0;
  // AdamW over all parameters; weight decay applies to 2D matrices only (see
  // gpt_decay_mask and GptRunOptions::decay_embeddings).
  virtual void update(const ops::AdamWParams& hp) = 0;

  // Logits of the last forward at position t of batch row b (V values), copied to host.
  virtual void logits_at(int64_t b, int64_t t, float* out) = 0;

  // Flat buffers in gpt_param_infos order (fp32 on host, copied for non-host models).
  virtual void get_params(float* out) const = 0;
  virtual void set_params(const float* in) = 0;
  virtual void get_grads(float* out) const = 0;
  virtual void set_grads(const float* in) = 0;
  // Optimizer state m, v (fp32, flat).
  virtual void get_optimizer_state(float* m, float* v) const = 0;
  virtual void set_optimizer_state(const float* m, const float* v) = 0;

  // The same buffers a range [begin, begin + count) at a time, for checkpoints that stream
  // the model (optim::DataParallel's range methods, which the trainer's wrapper forwards
  // here): with collective_state() every rank calls the getters together with the same
  // ranges; setters are local and come in ascending order over the whole model (params,
  // then m, then v). A model whose ranges hold no whole-model buffer says so with
  // streams_state(); the defaults go through the whole-vector methods above (the setters
  // keep the vectors until the range that ends the model, v's applying both moments).
  // k: 0 the first moment m, 1 the second v.
  virtual bool streams_state() const { return false; }
  virtual void get_params_range(int64_t begin, int64_t count, float* out) const;
  virtual void set_params_range(int64_t begin, int64_t count, const float* in);
  virtual void get_optimizer_state_range(int k, int64_t begin, int64_t count, float* out) const;
  virtual void set_optimizer_state_range(int k, int64_t begin, int64_t count, const float* in);

  // Raw gradient buffer for collective communication (device memory for GPU models),
  // fp32, num_params() values.
  float* grad_buffer() override = 0;
  float* param_buffer() override = 0;
  // Bytes of device (or host) memory this model holds.
  virtual size_t memory_bytes() const = 0;
  // Of those, the optimizer state on this rank: fp32 master weights and the AdamW moments
  // (1/world of them with ZeRO-1).
  virtual size_t optimizer_state_bytes() const { return size_t(3 * 4) * size_t(num_params()); }

 private:
  mutable std::vector<ParamTensor> tensors_;  // built on first use
  std::vector<float> pending_params_, pending_m_, pending_v_;  // the default setters' vectors
};

// Initialise GPT-2 style: N(0, 0.02) for weights, residual projections scaled by
// 1/sqrt(2*n_layer), zeros for biases, ones for LayerNorm weights. Deterministic in seed.
std::vector<float> gpt_init_params(const GptConfig& c, uint64_t seed);
// The same values a range at a time (at most 4M values each; every value once, not in
// flat order), so that a rank that holds a part of the model keeps its part of each
// range and never holds the whole initialisation.
using GptInitSink = std::function<void(int64_t begin, int64_t count, const float* values)>;
void gpt_init_ranges(const GptConfig& c, uint64_t seed, const GptInitSink& put);

// 1 for parameters that get weight decay (2D matrices), 0 otherwise, one per value.
std::vector<uint8_t> gpt_decay_mask(const GptConfig& c, bool decay_embeddings = true);

std::unique_ptr<GptModel> make_gpt_cpu(const GptConfig& c, const GptRunOptions& o);
// The CUDA model (throws Error when built without CUDA or when no GPU is present).
std::unique_ptr<GptModel> make_gpt_cuda(const GptConfig& c, const GptRunOptions& o);
bool cuda_available();
// By device name: "cpu" or "cuda".
std::unique_ptr<GptModel> make_gpt(const std::string& device, const GptConfig& c, const GptRunOptions& o);

}  // namespace aiscale::nn
