// The checks of a whole configuration after its keys are read: the model's shape, sizes
// derived from several keys, and the combinations of keys (config.h: validate_train_config).
#include "aiscale/train/config.h"
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>
#include "aiscale/core/error.h"
#include "aiscale/core/toml_errors.h"
#include "aiscale/core/validate.h"
#include "aiscale/parallel/launch_env.h"
#include "aiscale/train/parallel_layout.h"

namespace aiscale::train {

// Fails, naming `source`, the key and the fix, for communication keys the device or the
// layout cannot run (config_communication.cpp).
void check_communication_config(const TrainConfig& c, const std::string& source);

void validate_train_config(const TrainConfig& c, const std::string& source) {
  try {
    c.model.validate();
  } catch (const Error& e) {
    fail("{}: {}", source, e.what());
  }
  // Sizes derived from several keys: refused here rather than overflowing a count or
  // reaching the allocator: one whole fp32 copy of the model (what sampling, export and
  // train.init_from read), and the logits of one micro-batch (B x T x V floats). What one
  // rank allocates for training depends on the layout, and is checked buffer by buffer
  // with it (rank_buffers.h, from parallel_layout()).
  try {
    validate::buffer_bytes(static_cast<uint64_t>(c.model.num_params()), 4,
                           fmt::format("one fp32 copy of the model's parameters ({} "
                                       "parameters from the model.* keys)", c.model.num_params()));
    const int64_t tokens = validate::checked_product(c.batch_size, c.seq_len,
                                                     "train.batch_size x train.seq_len");
    validate::checked_product(tokens, c.grad_accum, "train.batch_size x train.seq_len x train.grad_accum");
    validate::buffer_bytes(static_cast<uint64_t>(validate::checked_product(
                               tokens, c.model.vocab_size, "train.batch_size x train.seq_len x "
                               "model.vocab_size")), 4,
                           "the logits of one micro-batch (train.batch_size x train.seq_len x "
                           "model.vocab_size)");
  } catch (const Error& e) {
    fail("{}: {}", source, e.what());
  }
  if (c.seq_len > c.model.block_size)
    fail("{}: train.seq_len = {} exceeds model.block_size = {}: lower train.seq_len or raise "
         "model.block_size", source, c.seq_len, c.model.block_size);
  if (c.warmup_steps > c.steps)
    fail("{}: train.warmup_steps = {} exceeds train.steps = {}", source, c.warmup_steps, c.steps);
  if (c.divergence_factor > 0 && c.divergence_factor <= 1.0)
    fail("{}: train.divergence_factor = {} would stop a healthy run: use a factor above 1 (the "
         "default is 5), or 0 to turn the check off", source, c.divergence_factor);
  if (c.divergence_climb_factor > 0 && c.divergence_climb_factor <= 1.0)
    fail("{}: train.divergence_climb_factor = {} would stop a healthy run: use a factor above 1 "
         "(the default is 1.5), or 0 to turn the check off", source, c.divergence_climb_factor);
  if (c.min_lr_ratio > 1.0)
    fail("{}: train.min_lr_ratio = {} must be between 0 and 1", source, c.min_lr_ratio);
  if (c.beta1 >= 1.0 || c.beta2 >= 1.0)
    fail("{}: train.beta1 and train.beta2 must be below 1 (got {}, {})", source, c.beta1, c.beta2);
  if (c.communicator == "nccl" && c.device != "cuda")
    fail("{}: parallel.communicator = \"nccl\" needs train.device = \"cuda\" (NCCL connects "
         "GPUs); use \"auto\", \"mpi\" or \"tcp\" for CPU ranks", source);
  try {
    parallel::parse_rendezvous(c.rendezvous);
  } catch (const Error& e) {
    fail("{}: {}", source, e.what());
  }
  try {
    check_parallel_config(c);
  } catch (const Error& e) {
    fail("{}: {}", source, e.what());
  }
  if (c.grad_comm == "bf16" && c.device != "cuda")
    fail("{}: parallel.grad_comm = \"bf16\" is implemented for GPU ranks: set "
         "train.device = \"cuda\", or parallel.grad_comm = \"fp32\"", source);
  if (c.grad_transport == "copy-engine" && c.device != "cuda")
    fail("{}: parallel.grad_transport = \"copy-engine\" moves GPU gradients: it needs "
         "train.device = \"cuda\" (else use \"nccl\")", source);
  if (c.zero_stage >= 2 && c.device == "cuda" &&
      (c.grad_comm != "fp32" || c.grad_transport == "copy-engine"))
    fail("{}: parallel.zero_stage = {} on GPU ranks reduces fp32 gradients: set "
         "parallel.grad_comm = \"fp32\" and parallel.grad_transport = \"nccl\"", source,
         c.zero_stage);
  if (c.offload_optimizer && (c.device != "cuda" || c.zero_stage != 3))
    fail("{}: parallel.offload_optimizer = true keeps ZeRO-3's optimizer state on the host of GPU "
         "ranks: set parallel.zero_stage = 3 and train.device = \"cuda\", or turn it off", source);
  // CPU ZeRO-1 is the trainer's wrapper around plain data parallelism
  // (optim/data_parallel.h): a reduce-scatter of dense gradients.
  if (c.zero_stage == 1 && c.device == "cpu" &&
      (c.tensor_parallel > 1 || c.pipeline_parallel > 1))
    fail("{}: parallel.zero_stage = 1 on CPU ranks shards the optimizer state of plain data "
         "parallelism; with tensor or pipeline parallelism use parallel.zero_stage = 2 (or 0)",
         source);
  if (c.zero_stage == 1 && c.device == "cpu" &&
      (grad_mixing_of(c) == "adasum" || c.compression != "none"))
    fail("{}: parallel.zero_stage = 1 reduce-scatters the dense gradients: set "
         "parallel.grad_mixing = \"average\" (or \"sum\") and parallel.compression = \"none\", "
         "or parallel.zero_stage = 0", source);
  check_communication_config(c, source);
  if (c.device == "cpu" && c.attention != "auto")
    fail("{}: train.attention = \"{}\" chooses GPU kernels: set train.device = \"cuda\", or "
         "leave train.attention = \"auto\" on the CPU", source, c.attention);
  if (c.device == "cpu" && c.precision != "fp32")
    fail("{}: train.precision = \"{}\" needs train.device = \"cuda\"; the CPU trains in fp32",
         source, c.precision);
}


}  // namespace aiscale::train
