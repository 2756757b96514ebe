// The training run configuration: TOML file + `--set section.key=value` overrides,
// validated against a schema so that an unknown key or a bad value fails with a
// message naming it, the value and what is allowed.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "aiscale/core/config_key_info.h"
#include "aiscale/nn/models/gpt_config.h"

namespace aiscale::train {

struct TrainConfig {
  // [model]
  std::string model_preset = "gpt-mini";
  nn::GptConfig model = nn::gpt_preset("gpt-mini");

  // [data]
  std::string train_data;   // glob of token shards, e.g. "data/fortunes_train_*.bin"
  std::string val_data;     // glob of validation shards (optional)
  std::string tokenizer = "gpt2";  // for decoding samples: "gpt2" or "byte"

  // [train]
  std::string device = "cpu";
  std::string precision = "fp32";
  int64_t fp8_history = 16;  // precision fp8: steps of amax history behind each scale
  int64_t fp8_margin = 1;    // precision fp8: scales divided by 2^margin (headroom)
  int64_t batch_size = 8;   // micro-batch per rank
  int64_t seq_len = 128;
  int64_t grad_accum = 1;   // micro-steps per optimizer step
  int64_t steps = 100;
  uint64_t seed = 1337;
  double lr = 6e-4;
  double min_lr_ratio = 0.1;  // final lr = lr * min_lr_ratio (cosine)
  int64_t warmup_steps = 10;
  std::string schedule = "cosine";  // cosine | linear | constant
  double weight_decay = 0.1;
  bool decay_embeddings = true;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double grad_clip = 1.0;   // global-norm clip; 0 disables
  bool recompute = false;
  bool recompute_layers = false;
  std::string attention = "auto";  // GPU attention kernels: auto | cudnn | flash | simple
  int64_t threads = 0;      // OpenMP/BLAS threads; 0 = all cores
  int64_t eval_every = 0;   // steps between validation passes; 0 = only at the end
  int64_t eval_batches = 8;
  int64_t log_every = 1;
  int64_t max_nonfinite_steps = 10;  // skipped updates (NaN/Inf) before the run stops
  double divergence_factor = 5.0;    // stop when a loss exceeds this x its running level; 0: off
  int64_t divergence_window = 20;    // steps in the running level (their mean loss)
  double divergence_climb_factor = 1.5;  // stop when the median loss of the last climb window
                                     // exceeds this x the lowest such median; 0: off
  int64_t divergence_climb_window = 100;  // steps in a climb window
  // A Hugging Face model folder whose weights start the run at step 0 (fresh optimizer
  // state); empty: the seed's initialisation. A resumed run continues from its checkpoint.
  std::string init_from;

  // [parallel]
  std::string communicator = "auto";  // auto | mpi | nccl | none
  std::string rendezvous = "auto";    // auto | mpi | file:/shared/path (how NCCL ranks meet)
  std::string grad_reduce = "average";  // average | sum (of the gradients over ranks)
  double timeout_s = 300;             // a collective stalled this long ends the rank
  int64_t zero_stage = 0;             // 0: every rank holds the optimizer state; 1: ZeRO-1;
                                      // 2: also sharded gradients; 3: also sharded parameters
  // The layout of the ranks: dp = world / (tensor_parallel x pipeline_parallel)
  // (train/parallel_layout.h checks it).
  int64_t tensor_parallel = 1;        // ranks that split every layer's matrices
  int64_t pipeline_parallel = 1;      // stages the layers are split into
  std::string pipeline_schedule = "1f1b";  // gpipe | 1f1b
  int64_t microbatches = 1;           // micro-batches per batch in a pipeline
  bool sequence_parallel = false;     // LayerNorm/residual regions split over the tensor ranks
  bool overlap = true;                // GPU: gradient buckets reduced during backward
  bool offload_optimizer = false;     // GPU ZeRO-3: master weights and AdamW moments on the host
  double bucket_mib = 25;             // GPU: gradient bucket size
  std::string grad_comm = "fp32";     // GPU: type the gradients are reduced in (fp32 | bf16)
  std::string grad_transport = "auto";  // GPU: auto | nccl | copy-engine (see grad_transport_of)
  // Communication choices (docs/guide/communication.md).
  std::string allreduce = "library";  // library | ring | hierarchical (GPUs: data parallelism only)
  int64_t ranks_per_node = 0;         // hierarchical: ranks per node; 0: where they run
  std::string grad_mixing = "average";  // average | sum | adasum (see grad_mixing_of)
  std::string compression = "none";   // CPU data parallelism: none | topk | int8
  double topk_ratio = 0.01;           // top-k: share of the values each rank sends
  // Asynchronous training (parallel/param_server/): the last parameter_servers ranks hold
  // the weights and AdamW state in shards, the others push gradients and pull weights
  // without a barrier; 0: synchronous data parallelism.
  int64_t parameter_servers = 0;
  int64_t max_staleness = 0;          // gradients staler than this are discarded; 0: none are

  // [run]
  std::string run_dir = "runs";  // parent folder of run directories
  std::string run_name;          // default: <model>-<timestamp>
  int64_t checkpoint_every = 0;  // steps; 0 = only at the end
  int64_t keep_checkpoints = 2;
  bool tensorboard = false;      // TensorBoard event files in <run>/tensorboard/
  bool mllog = false;            // MLPerf-style :::MLLOG lines in <run>/mllog.txt
  double max_shard_gb = 5;       // largest weights file of a checkpoint (10^9 bytes)

  int64_t tokens_per_step(int world_size = 1) const {
    return batch_size * seq_len * grad_accum * world_size;
  }
};

// The gradient mixing a run uses: parallel.grad_mixing, or "sum" where only the older
// key parallel.grad_reduce asked for it.
std::string grad_mixing_of(const TrainConfig& c);

// The gradient transport handed to the model: parallel.grad_transport, with "auto" made
// "nccl" where parallel.allreduce names an all-reduce of aiscale's own (it sums the NCCL
// buckets itself). The model resolves "auto" further (nn/models/gpt.h).
std::string grad_transport_of(const TrainConfig& c);

// Called on a parsed configuration before it is validated, with the keys the overrides
// set ("parallel.microbatches", ...): a resumed run resets there the keys of its old
// layout that the new one cannot take (train/resume_layout.h).
using ConfigAdjustment =
    std::function<void(TrainConfig& c, const std::vector<std::string>& set_keys)>;

// Parse a TOML file (path for messages), then apply overrides "section.key=value". Errors
// name where each value they are about came from: the file and line ("run.toml:7"), the
// override ("--set train.steps=50"), or the option it was made from (below).
TrainConfig load_train_config(const std::string& path, const std::vector<std::string>& overrides,
                              const ConfigAdjustment& adjust = {});
// Same from TOML text (tests).
TrainConfig parse_train_config(const std::string& toml_text, const std::string& source_name,
                               const std::vector<std::string>& overrides,
                               const ConfigAdjustment& adjust = {});

// Every key with its value, as TOML: written into the run directory.
// The checks of a whole configuration after its keys are read (config_validate.cpp); throws
// Error naming `source` and the keys.
void validate_train_config(const TrainConfig& c, const std::string& source);

std::string to_toml(const TrainConfig& c);
// Documentation of every key (for `aiscale train --help-config` and docs).
std::string config_reference();

// What the schema says about one key, for the command-line options named after the keys
// (cli/run_options.h): its type ("integer", "number", "string", "boolean"), its meaning,
// its choices (strings with a fixed set), its integer or number range and its default (a
// TOML literal, from a default TrainConfig). Empty for an unknown key.
using ConfigKeyInfo = config::KeyInfo;
std::optional<ConfigKeyInfo> config_key_info(const std::string& key);
// Every key of the schema, in its order.
std::vector<ConfigKeyInfo> config_keys();
// The reference page of every key, as Markdown: docs/reference/config.md is its output
// (`aiscale train --config-reference`; a unit test holds the page to it).
std::string config_reference_markdown();

}  // namespace aiscale::train
