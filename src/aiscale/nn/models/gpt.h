// The GPT-2 language model behind one interface, with a CPU implementation (this
// folder, gpt_cpu.cpp) and a CUDA implementation (gpt_cuda.cu). The trainer, the
// benchmarks, data parallelism and checkpoints only speak to this interface.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "aiscale/core/dtype.h"
#include "aiscale/nn/models/gpt_config.h"
#include "aiscale/ops/ops.h"

namespace aiscale::nn {

struct GptRunOptions {
  int64_t batch = 4;        // B: micro-batch per step (per rank)
  int64_t seq = 64;         // T: sequence length (<= block_size)
  DType precision = DType::f32;  // activations / matmul inputs; master weights stay fp32
  bool recompute = false;   // recompute GELU/LayerNorm outputs in backward (saves memory)
  bool decay_embeddings = true;  // weight decay on wte/wpe too (GPT-2/nanoGPT: yes)
  std::string cpu_backend = "cpu";  // "cpu" (fast) or "reference"
  uint64_t seed = 1337;
};

class GptModel {
 public:
  virtual ~GptModel() = default;
  virtual const GptConfig& config() const = 0;
  virtual const GptRunOptions& options() const = 0;
  virtual std::string device_name() const = 0;
  int64_t num_params() const { return config().num_params(); }

  // Forward pass on host tokens (B, T). With targets, returns the mean cross-entropy
  // loss and keeps what backward needs; targets may be null (then returns NaN and only
  // logits are computed).
  virtual float forward(const int32_t* inputs, const int32_t* targets) = 0;
  // Backward of the last forward; parameter gradients ACCUMULATE (gradient
  // accumulation), scaled by loss_scale / ... : d(mean loss) * grad_multiplier.
  virtual void backward(float grad_multiplier = 1.0f) = 0;
  virtual void zero_grad() = 0;
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

  // Raw gradient buffer for collective communication (device memory for GPU models),
  // fp32, num_params() values.
  virtual float* grad_buffer() = 0;
  virtual float* param_buffer() = 0;
  // Bytes of device (or host) memory this model holds.
  virtual size_t memory_bytes() const = 0;
};

// Initialise GPT-2 style: N(0, 0.02) for weights, residual projections scaled by
// 1/sqrt(2*n_layer), zeros for biases, ones for LayerNorm weights. Deterministic in seed.
std::vector<float> gpt_init_params(const GptConfig& c, uint64_t seed);

// 1 for parameters that get weight decay (2D matrices), 0 otherwise, one per value.
std::vector<uint8_t> gpt_decay_mask(const GptConfig& c, bool decay_embeddings = true);

std::unique_ptr<GptModel> make_gpt_cpu(const GptConfig& c, const GptRunOptions& o);
// The CUDA model (throws Error when built without CUDA or when no GPU is present).
std::unique_ptr<GptModel> make_gpt_cuda(const GptConfig& c, const GptRunOptions& o);
bool cuda_available();
// By device name: "cpu" or "cuda".
std::unique_ptr<GptModel> make_gpt(const std::string& device, const GptConfig& c, const GptRunOptions& o);

}  // namespace aiscale::nn
