// The checks of the communication keys (parallel.allreduce, ranks_per_node, grad_mixing,
// compression) against the device and the layout; part of the train config's validation.
#include <string>

#include "aiscale/core/error.h"
#include "aiscale/train/config.h"

namespace aiscale::train {

std::string grad_mixing_of(const TrainConfig& c) {
  return c.grad_mixing == "average" && c.grad_reduce == "sum" ? "sum" : c.grad_mixing;
}

std::string grad_transport_of(const TrainConfig& c) {
  return c.grad_transport == "auto" && c.allreduce != "library" ? "nccl" : c.grad_transport;
}

namespace {

// Parameter servers: CPU data parallelism of whole models, with nothing of the
// synchronous exchange's choices (they combine gradients the servers apply one by one).
void check_parameter_server_config(const TrainConfig& c, const std::string& source) {
  const int64_t s = c.parameter_servers;
  if (s == 0) {
    if (c.max_staleness > 0)
      fail("{}: parallel.max_staleness = {} bounds the staleness of parameter-server updates: set "
           "parallel.parameter_servers (e.g. 1), or leave max_staleness at 0", source, c.max_staleness);
    return;
  }
  if (c.device != "cpu")
    fail("{}: parallel.parameter_servers = {} runs on CPU ranks in this version: set train.device = "
         "\"cpu\", or parallel.parameter_servers = 0 for synchronous data parallelism on GPUs", source, s);
  if (c.tensor_parallel > 1 || c.pipeline_parallel > 1 || c.zero_stage > 0)
    fail("{}: parallel.parameter_servers = {} trains a whole model on every worker: set "
         "parallel.tensor_parallel = 1, parallel.pipeline_parallel = 1 and parallel.zero_stage = 0 "
         "(the servers already shard the weights and optimiser state), or parallel.parameter_servers "
         "= 0", source, s);
  if (c.compression != "none" || grad_mixing_of(c) != "average" || c.allreduce != "library")
    fail("{}: parallel.parameter_servers = {} applies each worker's gradient on the servers as it "
         "arrives; the synchronous exchange's parallel.compression, grad_mixing and allreduce do not "
         "apply: set parallel.compression = \"none\", parallel.grad_mixing = \"average\" and "
         "parallel.allreduce = \"library\", or parallel.parameter_servers = 0", source, s);
  if (c.checkpoint_every > 0 || c.eval_every > 0 || c.tensorboard || c.mllog)
    fail("{}: parallel.parameter_servers = {} writes metrics.jsonl, one validation pass and one "
         "checkpoint at the end in this version: set run.checkpoint_every = 0, train.eval_every = 0, "
         "run.tensorboard = false and run.mllog = false", source, s);
}

}  // namespace

void check_communication_config(const TrainConfig& c, const std::string& source) {
  check_parameter_server_config(c, source);
  if (c.grad_reduce == "sum" && c.grad_mixing != "average" && c.grad_mixing != "sum")
    fail("{}: parallel.grad_reduce = \"sum\" (the older key) contradicts parallel.grad_mixing = "
         "\"{}\": set only parallel.grad_mixing", source, c.grad_mixing);
  // GPU ranks: the hand-written algorithms sum the fp32 gradient buckets of plain data
  // parallelism over NCCL (parallel/nccl/device_algorithms.h); the other GPU exchanges
  // (bf16 buckets, the copy engines, ZeRO's reduce-scatters, tensor and pipeline groups)
  // would still use NCCL's own, so they are refused rather than half-honoured.
  if (c.allreduce != "library" && c.device == "cuda") {
    const auto refuse = [&](const std::string& what, const std::string& fix) {
      fail("{}: parallel.allreduce = \"{}\" on GPU ranks sums the fp32 gradient buckets of plain "
           "data parallelism; {}: {}, or set parallel.allreduce = \"library\"", source,
           c.allreduce, what, fix);
    };
    if (c.grad_comm != "fp32")
      refuse("bf16 buckets go through NCCL's own all-reduce", "set parallel.grad_comm = \"fp32\"");
    if (c.grad_transport == "copy-engine")
      refuse("the copy-engine transport is an all-reduce of its own",
             "set parallel.grad_transport = \"nccl\"");
    if (c.zero_stage != 0)
      refuse("ZeRO reduce-scatters its gradients with NCCL's own algorithm",
             "set parallel.zero_stage = 0");
    if (c.tensor_parallel > 1 || c.pipeline_parallel > 1)
      refuse("tensor and pipeline parallelism exchange their activations with NCCL's own",
             "set parallel.tensor_parallel = 1 and parallel.pipeline_parallel = 1");
  }
  if (c.ranks_per_node > 0 && c.allreduce != "hierarchical")
    fail("{}: parallel.ranks_per_node = {} sets the nodes of the hierarchical all-reduce: set "
         "parallel.allreduce = \"hierarchical\", or leave ranks_per_node at 0", source,
         c.ranks_per_node);
  const bool model_parallel = c.tensor_parallel > 1 || c.pipeline_parallel > 1;
  const std::string mixing = grad_mixing_of(c);
  if (mixing == "adasum") {
    if (c.device == "cuda")
      fail("{}: parallel.grad_mixing = \"adasum\" is implemented for CPU data parallelism: "
           "set train.device = \"cpu\", or parallel.grad_mixing = \"average\" on GPU ranks", source);
    if (model_parallel || c.zero_stage >= 2)
      fail("{}: parallel.grad_mixing = \"adasum\" combines whole gradients, which tensor or "
           "pipeline parallelism and ZeRO-2/3 shard: set parallel.tensor_parallel = 1, "
           "parallel.pipeline_parallel = 1 and parallel.zero_stage = 0, or use "
           "parallel.grad_mixing = \"average\"", source);
    if (c.compression != "none")
      fail("{}: parallel.grad_mixing = \"adasum\" combines whole gradients and cannot take "
           "compressed ones: set parallel.compression = \"none\"", source);
  }
  if (c.compression != "none") {
    if (c.device == "cuda")
      fail("{}: parallel.compression = \"{}\" is implemented for CPU data parallelism; GPU ranks "
           "can halve the bytes with parallel.grad_comm = \"bf16\": set parallel.compression = "
           "\"none\"", source, c.compression);
    if (c.zero_stage >= 2)
      fail("{}: parallel.compression = \"{}\" compresses whole gradients, but ZeRO-{} "
           "reduce-scatters them into shards: set parallel.zero_stage = 0, or "
           "parallel.compression = \"none\"", source, c.compression, c.zero_stage);
    if (model_parallel)
      fail("{}: parallel.compression = \"{}\" compresses the data-parallel gradient exchange of "
           "whole models; tensor and pipeline parallelism exchange theirs inside the model: set "
           "parallel.tensor_parallel = 1 and parallel.pipeline_parallel = 1, or "
           "parallel.compression = \"none\"", source, c.compression);
  }
}

}  // namespace aiscale::train
