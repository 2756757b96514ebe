#include "aiscale/train/config.h"

#include <algorithm>
#include <cmath>
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
#include "aiscale/data/tokenizer.h"
#include "aiscale/parallel/launch_env.h"
#include "aiscale/core/config_schema.h"
#include "aiscale/train/config_common_keys.h"
#include "aiscale/train/parallel_layout.h"

namespace aiscale::train {

namespace {

using Key = config::Key<TrainConfig>;
using config::Kind;

using config::bool_key;
using config::int_key;
using config::real_key;
using config::string_key;

// Keys bound to the model's fields.
Key model_int_key(std::string name, int64_t nn::GptConfig::*member, std::string doc, int64_t max) {
  return config::integer_key<TrainConfig>(
      std::move(name), [member](TrainConfig& c) -> int64_t& { return c.model.*member; }, std::move(doc),
      1, max);
}

// The llama family's architecture keys: counts where 0 means "derived" (n_kv_head,
// ffn_hidden), reals.
template <typename Get>
Key model_count_key(std::string name, Get field, std::string doc, int64_t max) {
  return config::integer_key<TrainConfig>(
      std::move(name), [field](TrainConfig& c) -> int64_t& { return field(c.model); }, std::move(doc), 0,
      max);
}

template <typename Get>
Key model_real_key(std::string name, Get field, std::string doc, double min, double max) {
  return config::real_key<TrainConfig>(
      std::move(name), [field](TrainConfig& c) -> double& { return field(c.model); }, std::move(doc), min,
      max);
}

std::vector<Key> keys() {
  {  // one block: the keys in the order the reference lists them
    std::vector<Key> k;
    Key preset = string_key("model.preset", &TrainConfig::model_preset,
                            "named architecture (gpt2-124m ... gpt2-1558m, gpt-mini, gpt-tiny; "
                            "llama3-1b-shape, llama3-3b-shape, llama3-8b-shape, llama-mini, "
                            "llama-tiny); the other model keys override its fields",
                            nn::gpt_preset_names());
    preset.set = [](TrainConfig& c, const toml::node& n) {
      const std::string v = config::read_string(n, "model.preset", {});
      c.model = nn::gpt_preset(v);  // an unknown name is refused with the list
      c.model_preset = v;
    };
    k.push_back(preset);
    k.push_back(model_int_key("model.n_layer", &nn::GptConfig::n_layer, "transformer blocks", 1024));
    k.push_back(model_int_key("model.n_head", &nn::GptConfig::n_head, "attention heads", 1024));
    k.push_back(model_int_key("model.n_embd", &nn::GptConfig::n_embd, "width C (divisible by n_head)", 65536));
    k.push_back(model_int_key("model.block_size", &nn::GptConfig::block_size, "maximum context length", int64_t{1} << 20));
    k.push_back(model_int_key("model.vocab_size", &nn::GptConfig::vocab_size,
                              "vocabulary size (50257 for GPT-2 BPE, 256 for bytes)", int64_t{1} << 24));
    {
      Key family{"model.family", Kind::string,
                 "architecture family: gpt2 (LayerNorm, learned positions, GELU, biases, tied "
                 "head) or llama (RMSNorm, rotary positions, SwiGLU, grouped-query attention, "
                 "no biases); set by the preset",
                 {"gpt2", "llama"}};
      family.set = [](TrainConfig& c, const toml::node& n) {
        c.model.family = nn::parse_gpt_family(config::read_string(n, "model.family", {"gpt2", "llama"}));
      };
      family.get = [](const TrainConfig& c) { return config::toml_quote(nn::to_string(c.model.family)); };
      k.push_back(family);
    }
    k.push_back(model_count_key("model.n_kv_head", [](nn::GptConfig& m) -> int64_t& { return m.n_kv_head; },
                                "llama: key/value heads (grouped-query attention; divides n_head); "
                                "0 = n_head", 1024));
    k.push_back(model_count_key("model.ffn_hidden", [](nn::GptConfig& m) -> int64_t& { return m.ffn_hidden; },
                                "llama: MLP hidden width; 0 = 4 x n_embd", int64_t{1} << 20));
    k.push_back(config::boolean_key<TrainConfig>(
        "model.tie_embeddings", [](TrainConfig& c) -> bool& { return c.model.tie_embeddings; },
        "llama: the LM head is the token embedding (gpt2: always)"));
    k.push_back(model_real_key("model.rope_theta", [](nn::GptConfig& m) -> double& { return m.rope_theta; },
                               "llama: rotary base (Llama 2: 10000, Llama 3: 500000)", 1.0, 1e12));
    k.push_back(model_real_key("model.rope_scaling_factor",
                               [](nn::GptConfig& m) -> double& { return m.rope_scaling.factor; },
                               "llama: Llama 3's rotary frequency scaling factor; 0 = none", 0.0, 1e6));
    k.push_back(model_real_key("model.rope_low_freq_factor",
                               [](nn::GptConfig& m) -> double& { return m.rope_scaling.low_freq_factor; },
                               "llama: Llama 3 scaling's low-frequency factor", 0.0, 1e6));
    k.push_back(model_real_key("model.rope_high_freq_factor",
                               [](nn::GptConfig& m) -> double& { return m.rope_scaling.high_freq_factor; },
                               "llama: Llama 3 scaling's high-frequency factor", 0.0, 1e6));
    k.push_back(model_count_key("model.rope_original_context",
                                [](nn::GptConfig& m) -> int64_t& { return m.rope_scaling.original_context; },
                                "llama: Llama 3 scaling's original context length", int64_t{1} << 24));
    k.push_back(model_real_key("model.norm_eps", [](nn::GptConfig& m) -> double& { return m.norm_eps; },
                               "llama: RMSNorm epsilon", 1e-12, 1.0));
    k.push_back(string_key("data.train", &TrainConfig::train_data,
                           "token shards to train on: a path or glob (llm.c format)"));
    k.push_back(string_key("data.val", &TrainConfig::val_data,
                           "validation shards: a path or glob; empty = no validation"));
    Key tokenizer = string_key("data.tokenizer", &TrainConfig::tokenizer,
                               "tokenizer of the shards, used to decode samples: gpt2, byte, a "
                               "tokenizer.json or a SentencePiece *.model");
    tokenizer.set = [set = tokenizer.set](TrainConfig& c, const toml::node& n) {
      set(c, n);
      data::check_tokenizer_spec(c.tokenizer, "config key 'data.tokenizer' =");
    };
    k.push_back(tokenizer);
    k.push_back(string_key("train.device", &TrainConfig::device, "where to train", {"cpu", "cuda"}));
    k.push_back(string_key("train.precision", &TrainConfig::precision,
                           "activation/matmul precision (CPU: fp32 only); fp8: bf16 with the "
                           "transformer blocks' linear layers in FP8 (GPUs with FP8 tensor cores)",
                           {"fp32", "bf16", "fp16", "fp8"}));
    k.push_back(int_key("train.fp8_history", &TrainConfig::fp8_history,
                        "precision fp8: each tensor's scale follows the largest |value| of "
                        "its last this many steps (delayed scaling)", 1, 1024));
    k.push_back(int_key("train.fp8_margin", &TrainConfig::fp8_margin,
                        "precision fp8: scales divided by 2^margin, headroom for values "
                        "growing between steps", 0, 16));
    k.push_back(int_key("train.batch_size", &TrainConfig::batch_size, "micro-batch B per rank", 1, int64_t{1} << 20));
    k.push_back(int_key("train.seq_len", &TrainConfig::seq_len, "sequence length T (<= model.block_size)", 1,
                        int64_t{1} << 20));
    k.push_back(int_key("train.grad_accum", &TrainConfig::grad_accum,
                        "micro-steps accumulated per optimizer step", 1, int64_t{1} << 20));
    k.push_back(int_key("train.steps", &TrainConfig::steps, "optimizer steps", 1, int64_t{1} << 40));
    add_common_train_keys(k);  // train.seed, train.threads, train.log_every
    k.push_back(real_key("train.lr", &TrainConfig::lr, "peak learning rate", 0.0, 1e3));
    k.push_back(real_key("train.min_lr_ratio", &TrainConfig::min_lr_ratio,
                         "final learning rate as a fraction of train.lr"));
    k.push_back(int_key("train.warmup_steps", &TrainConfig::warmup_steps, "linear warm-up steps", 0, int64_t{1} << 40));
    k.push_back(string_key("train.schedule", &TrainConfig::schedule, "decay after warm-up",
                           {"cosine", "linear", "constant"}));
    k.push_back(real_key("train.weight_decay", &TrainConfig::weight_decay,
                         "decoupled AdamW weight decay on 2D weight matrices"));
    k.push_back(bool_key("train.decay_embeddings", &TrainConfig::decay_embeddings,
                         "apply weight decay to the embeddings too"));
    k.push_back(real_key("train.beta1", &TrainConfig::beta1, "AdamW beta1", 0.0, 0.999999));
    k.push_back(real_key("train.beta2", &TrainConfig::beta2, "AdamW beta2", 0.0, 0.999999));
    k.push_back(real_key("train.eps", &TrainConfig::eps, "AdamW epsilon", 0.0, 1.0));
    k.push_back(real_key("train.grad_clip", &TrainConfig::grad_clip,
                         "clip the global gradient norm to this; 0 disables"));
    k.push_back(bool_key("train.recompute", &TrainConfig::recompute,
                         "recompute the norm and GELU (llama: SwiGLU) outputs in backward to save memory"));
    k.push_back(bool_key("train.recompute_layers", &TrainConfig::recompute_layers,
                         "full activation recomputation: keep only each transformer layer's "
                         "input in forward and run the layer's forward again in its backward "
                         "(one layer's activations in memory instead of all; about a third "
                         "more compute)"));
    k.push_back(string_key("train.attention", &TrainConfig::attention,
                           "GPU attention kernels: auto (cuDNN's fused engines where built in, "
                           "else the own flash kernels), cudnn, flash (own), simple (CUDA cores)",
                           {"auto", "cudnn", "flash", "simple"}));
    k.push_back(int_key("train.eval_every", &TrainConfig::eval_every,
                        "steps between validation passes; 0 = only at the end", 0, int64_t{1} << 40));
    k.push_back(int_key("train.eval_batches", &TrainConfig::eval_batches, "batches per validation pass", 1, int64_t{1} << 30));
    k.push_back(int_key("train.max_nonfinite_steps", &TrainConfig::max_nonfinite_steps,
                        "updates skipped for a NaN/Inf loss or gradient before the run stops", 0,
                        int64_t{1} << 40));
    k.push_back(real_key("train.divergence_factor", &TrainConfig::divergence_factor,
                         "stop the run (exit 3) when a step's loss exceeds this many times the "
                         "mean of the train.divergence_window steps before; 0 turns it off",
                         0.0, 1e6));
    k.push_back(int_key("train.divergence_window", &TrainConfig::divergence_window,
                        "steps whose mean loss is the running level divergence is judged by", 1,
                        100000));
    k.push_back(real_key("train.divergence_climb_factor", &TrainConfig::divergence_climb_factor,
                         "stop the run (exit 3) when the median loss of the last "
                         "train.divergence_climb_window steps exceeds this many times the "
                         "lowest median of that many consecutive steps so far (a sustained "
                         "climb, which no single step shows); 0 turns it off",
                         0.0, 1e6));
    k.push_back(int_key("train.divergence_climb_window", &TrainConfig::divergence_climb_window,
                        "steps whose median loss a sustained climb is judged by", 2, 100000));
    k.push_back(string_key("train.init_from", &TrainConfig::init_from,
                           "Hugging Face model folder (config.json with model.safetensors, or "
                           "shards and model.safetensors.index.json; a GPT-2 or Llama checkpoint "
                           "of the model's shape, e.g. an aiscale checkpoint folder) whose weights start "
                           "the run at step 0 with a fresh optimizer; empty = initialise from "
                           "train.seed; a resumed run continues from its own checkpoint instead "
                           "(docs/guide/checkpoints.md)"));
    k.push_back(string_key("parallel.communicator", &TrainConfig::communicator,
                           "auto: one process unless launched as several ranks (mpirun, srun, "
                           "aiscale launch, torchrun), then NCCL on GPUs (train.device = cuda); on "
                           "CPUs MPI under an MPI launcher, else TCP (torchrun, srun without MPI "
                           "given parallel.rendezvous). mpi or tcp on GPUs: every layout, the "
                           "device buffers staged through host memory (slower; several ranks may "
                           "share a GPU)", {"auto", "mpi", "tcp", "nccl", "none"}));
    k.push_back(string_key("parallel.rendezvous", &TrainConfig::rendezvous,
                           "how NCCL and TCP ranks meet: auto (MPI when launched by mpirun or "
                           "srun --mpi=pmix; the TCP store at MASTER_ADDR, port MASTER_PORT (or "
                           "MASTER_PORT+1 beside torchrun's own store, or AISCALE_STORE_PORT), "
                           "when launched with RANK/WORLD_SIZE), mpi (NCCL only), "
                           "file:/shared/path (rank 0 writes the NCCL id or its store's address "
                           "there; ranks from the launcher) or tcp://host:port (rank 0 serves a "
                           "TCP store there)"));
    k.push_back(string_key("parallel.grad_reduce", &TrainConfig::grad_reduce,
                           "older spelling of parallel.grad_mixing's average and sum: average: "
                           "gradients are averaged over ranks (DDP); sum: summed, world-size "
                           "times larger (see docs/guide/launching.md for the learning rate)",
                           {"average", "sum"}));
    k.push_back(string_key("parallel.grad_mixing", &TrainConfig::grad_mixing,
                           "how the ranks' gradients combine: average (DDP), sum (world-size "
                           "times larger: AdamW's steps barely change, an SGD rule needs lr / "
                           "world) or adasum "
                           "(pairwise adaptive sum per tensor: the sum where gradients are "
                           "orthogonal, the average where they agree; CPU data parallelism, "
                           "power-of-two ranks); docs/guide/communication.md",
                           {"average", "sum", "adasum"}));
    k.push_back(string_key("parallel.allreduce", &TrainConfig::allreduce,
                           "CPU ranks (MPI, TCP): how float buffers are summed: library (MPI's "
                           "own all-reduce; over TCP every rank adds small buffers in rank order, "
                           "the ring sums large ones), ring (chunked, pipelined ring over point-to-point "
                           "messages) or hierarchical (reduce inside each node, ring between "
                           "one rank per node, broadcast inside the node); GPU ranks (NCCL, fp32 "
                           "gradients, no ZeRO, tensor or pipeline parallelism) run ring and "
                           "hierarchical over NCCL send/receive",
                           {"library", "ring", "hierarchical"}));
    k.push_back(int_key("parallel.ranks_per_node", &TrainConfig::ranks_per_node,
                        "hierarchical all-reduce: ranks per node (rank / ranks_per_node is its "
                        "node; simulates nodes on one host); 0 takes the nodes the ranks run on",
                        0, 1 << 20));
    k.push_back(string_key("parallel.compression", &TrainConfig::compression,
                           "CPU data parallelism: gradients sent compressed, with error feedback "
                           "(what a rank leaves out is added to its next gradient): none, topk "
                           "(the parallel.topk_ratio largest values and their indices) or int8 "
                           "(8 bits per value, one scale per 4096 values)",
                           {"none", "topk", "int8"}));
    k.push_back(real_key("parallel.topk_ratio", &TrainConfig::topk_ratio,
                         "top-k compression: share of the gradient's values each rank sends",
                         1e-9, 1.0));
    k.push_back(int_key("parallel.parameter_servers", &TrainConfig::parameter_servers,
                        "asynchronous training on CPU ranks: the last N ranks are parameter "
                        "servers holding shards of the weights and AdamW state, the others "
                        "workers that push gradients and pull weights without a barrier (at "
                        "least one worker); 0: synchronous data parallelism; "
                        "docs/guide/communication.md", 0, 1 << 20));
    k.push_back(int_key("parallel.max_staleness", &TrainConfig::max_staleness,
                        "parameter servers: a gradient computed from weights more than this many "
                        "server updates old is discarded and its worker pulls fresh weights; 0: "
                        "every gradient is applied (unbounded)", 0, int64_t{1} << 40));
    k.push_back(timeout_key<TrainConfig>());
    k.push_back(int_key("parallel.zero_stage", &TrainConfig::zero_stage,
                        "0: every rank keeps the whole optimizer state; 1: ZeRO-1, fp32 master "
                        "weights and AdamW moments sharded over the data-parallel ranks (GPU "
                        "ranks; CPU ranks: the trainer's ZeRO-1 wrapper); 2: ZeRO-2, also the "
                        "gradients reduce-scattered and kept as shards; 3: ZeRO-3, also the "
                        "parameters sharded, gathered block by block (CPU and GPU ranks)", 0, 3));
    k.push_back(int_key("parallel.tensor_parallel", &TrainConfig::tensor_parallel,
                        "ranks that split each layer's matrices, attention heads and the "
                        "vocabulary (divides model.n_head and model.n_embd; the vocabulary in "
                        "padded slices; GPU ranks: ZeRO 0 to 3, not with "
                        "parallel.offload_optimizer; ZeRO 0 or 1 with pipeline stages); "
                        "data-parallel ranks = world / (tensor_parallel x pipeline_parallel), "
                        "tensor ranks consecutive",
                        1, 1024));
    k.push_back(int_key("parallel.pipeline_parallel", &TrainConfig::pipeline_parallel,
                        "pipeline stages the layers are split into (at most model.n_layer; GPU "
                        "ranks: ZeRO 0 or 1, each stage holding its layers, the embeddings and the "
                        "final norm)", 1,
                        1024));
    k.push_back(string_key("parallel.pipeline_schedule", &TrainConfig::pipeline_schedule,
                           "order of the micro-batches' forward and backward passes in a pipeline: "
                           "gpipe (all forwards, then all backwards) or 1f1b (one forward, one "
                           "backward; parallel.microbatches >= pipeline_parallel)",
                           {"gpipe", "1f1b"}));
    k.push_back(int_key("parallel.microbatches", &TrainConfig::microbatches,
                        "micro-batches each batch of train.batch_size rows is split into for the "
                        "pipeline (divides train.batch_size)", 1, int64_t{1} << 20));
    k.push_back(bool_key("parallel.sequence_parallel", &TrainConfig::sequence_parallel,
                         "split the LayerNorm and residual regions over the tensor-parallel "
                         "ranks by token (all-gather / reduce-scatter around them); needs "
                         "parallel.tensor_parallel > 1"));
    k.push_back(bool_key("parallel.offload_optimizer", &TrainConfig::offload_optimizer,
                         "GPU ranks with parallel.zero_stage = 3 (also one GPU; not with tensor "
                         "parallelism): keep the fp32 "
                         "master weights and AdamW moments in host memory and run AdamW on the "
                         "CPU (6 instead of 18 bytes per parameter on the GPUs, before sharding)"));
    k.push_back(bool_key("parallel.overlap", &TrainConfig::overlap,
                         "GPU ranks (NCCL): reduce gradient buckets during backward; false "
                         "reduces them all after backward"));
    k.push_back(real_key("parallel.bucket_mib", &TrainConfig::bucket_mib,
                         "GPU ranks (NCCL): gradient bucket size in MiB; CPU ranks: ZeRO-1's "
                         "reduce-scatter buckets (a CPU all-reduce travels in the "
                         "communicator's own 25 MiB buckets)", 0.001, 1048576.0));
    k.push_back(string_key("parallel.grad_comm", &TrainConfig::grad_comm,
                           "GPU ranks: type the gradients are summed in; bf16 halves the bytes "
                           "(rounded before the sum, fp32 again after it; MPI and TCP ranks add "
                           "the bf16 values in fp32 on the host)",
                           {"fp32", "bf16"}));
    k.push_back(string_key("parallel.grad_transport", &TrainConfig::grad_transport,
                           "GPU ranks: how gradient buckets move; nccl (the communicator's own "
                           "collectives: NCCL's kernels, host staging over MPI or TCP), "
                           "copy-engine (CUDA IPC copies on one node, no SMs held; also with "
                           "ZeRO-1), or auto (the copy engines for plain data parallelism where "
                           "every rank can set them up, else the communicator's own; never over MPI "
                           "or TCP)",
                           {"auto", "nccl", "copy-engine"}));
    add_common_run_keys(k);  // run.dir, run.name, run.checkpoint_every, run.keep_checkpoints
    k.push_back(bool_key("run.tensorboard", &TrainConfig::tensorboard,
                         "also write the step scalars (loss, lr, grad norm, tokens/s, MFU, memory, "
                         "GPU power) as TensorBoard event files in <run>/tensorboard/"));
    k.push_back(bool_key("run.mllog", &TrainConfig::mllog,
                         "also write MLPerf-style :::MLLOG lines (run_start/stop, blocks, epochs, "
                         "eval_accuracy, hyperparameters) to <run>/mllog.txt"));
    k.push_back(real_key("run.max_shard_gb", &TrainConfig::max_shard_gb,
                         "largest weights file of a checkpoint in GB (10^9 bytes); a larger "
                         "model is written as shards model-0000i-of-0000N.safetensors with "
                         "model.safetensors.index.json, as transformers writes them",
                         1e-6, 1e6));
    return k;
  }
}

const config::Schema<TrainConfig>& schema() {
  static const config::Schema<TrainConfig> s(keys(), "config key",
                                             "resolved aiscale training configuration");
  return s;
}

}  // namespace

TrainConfig parse_train_config(const std::string& text, const std::string& source,
                               const std::vector<std::string>& overrides,
                               const ConfigAdjustment& adjust) {
  // The preset first, so that explicit model keys override its fields; the model keys it
  // set are said to come from it.
  auto preset_origins = [](const std::string&, const std::string& origin, config::Origins& origins) {
    origins["model.preset"] = origin;
    for (const auto& k : schema().keys())
      if (k.name.starts_with("model.") && k.name != "model.preset")
        origins[k.name] = origin + " (model.preset)";
  };
  auto adjust_keys = [&](TrainConfig& c) {
    if (!adjust) return;
    std::vector<std::string> set_keys;
    for (const auto& o : overrides) set_keys.push_back(o.substr(0, o.find('=')));
    adjust(c, set_keys);
  };
  return schema().parse(text, source, overrides, {"model.preset"}, preset_origins, adjust_keys,
                        validate_train_config);
}

TrainConfig load_train_config(const std::string& path, const std::vector<std::string>& overrides,
                              const ConfigAdjustment& adjust) {
  if (!std::filesystem::exists(path))
    fail("cannot read config file '{}': no such file; check the path (examples are in configs/)", path);
  validate::regular_file(path, "config file");
  std::ifstream in(path);
  if (!in) fail("cannot read config file '{}': check the path (examples are in configs/)", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_train_config(ss.str(), path, overrides, adjust);
}

std::string to_toml(const TrainConfig& c) { return schema().to_toml(c); }

std::optional<ConfigKeyInfo> config_key_info(const std::string& key) { return schema().info(key); }

std::vector<ConfigKeyInfo> config_keys() { return schema().infos(); }

std::string config_reference() { return config::key_lines(schema().infos()); }

}  // namespace aiscale::train
