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
#include "aiscale/train/config_origins.h"
#include "aiscale/train/parallel_layout.h"

namespace aiscale::train {

namespace {

enum class Kind { integer, real, string, boolean };

struct Key {
  std::string name;  // "section.key"
  Kind kind;
  std::string doc;
  std::vector<std::string> choices;  // for strings with a fixed set
  int64_t min_int = 0;               // for integers
  int64_t max_int = 0;
  std::function<void(TrainConfig&, const toml::node&)> set;
  std::function<std::string(const TrainConfig&)> get;  // TOML literal
  double min_real = 0, max_real = 0;                    // for numbers
};

std::string quote(const std::string& s) {
  std::ostringstream os;
  os << toml::value<std::string>(s);
  return os.str();
}

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::integer: return "an integer";
    case Kind::real: return "a number";
    case Kind::string: return "a string";
    case Kind::boolean: return "true or false";
  }
  return "?";
}

std::string node_text(const toml::node& n) {
  std::ostringstream os;
  n.visit([&](auto&& v) { os << v; });
  return os.str();
}

// Functions that build schema entries bound to a member.
// Integers are bounded on both sides: a count that reaches OpenMP, an allocator or a
// loop bound must be refused here, with the key named, rather than crash there.
template <typename T>
Key int_key(std::string name, T TrainConfig::*member, std::string doc, int64_t min, int64_t max) {
  Key k{std::move(name), Kind::integer, std::move(doc), {}, min, max, nullptr, nullptr};
  std::string key_name = k.name;
  k.set = [member, min, max, key_name](TrainConfig& c, const toml::node& n) {
    auto v = n.value_exact<int64_t>();
    if (!v) fail("config key '{}' = {} must be an integer", key_name, node_text(n));
    validate::in_range(*v, min, max, fmt::format("config key '{}'", key_name));
    c.*member = static_cast<T>(*v);
  };
  k.get = [member](const TrainConfig& c) { return std::to_string(c.*member); };
  return k;
}

Key model_int_key(std::string name, int64_t nn::GptConfig::*member, std::string doc, int64_t max) {
  Key k{std::move(name), Kind::integer, std::move(doc), {}, 1, max, nullptr, nullptr};
  std::string key_name = k.name;
  k.set = [member, max, key_name](TrainConfig& c, const toml::node& n) {
    auto v = n.value_exact<int64_t>();
    if (!v) fail("config key '{}' = {} must be an integer", key_name, node_text(n));
    validate::in_range(*v, int64_t{1}, max, fmt::format("config key '{}'", key_name));
    c.model.*member = *v;
  };
  k.get = [member](const TrainConfig& c) { return std::to_string(c.model.*member); };
  return k;
}

// The llama family's architecture keys: counts where 0 means "derived" (n_kv_head,
// ffn_hidden), reals, a flag, the family's name.
template <typename Get>
Key model_count_key(std::string name, Get field, std::string doc, int64_t max) {
  Key k{std::move(name), Kind::integer, std::move(doc), {}, 0, max, nullptr, nullptr};
  std::string key_name = k.name;
  k.set = [field, max, key_name](TrainConfig& c, const toml::node& n) {
    auto v = n.value_exact<int64_t>();
    if (!v) fail("config key '{}' = {} must be an integer", key_name, node_text(n));
    validate::in_range(*v, int64_t{0}, max, fmt::format("config key '{}'", key_name));
    field(c.model) = *v;
  };
  k.get = [field](const TrainConfig& c) {
    nn::GptConfig m = c.model;
    return std::to_string(field(m));
  };
  return k;
}

template <typename Get>
Key model_real_key(std::string name, Get field, std::string doc, double min, double max) {
  Key k{std::move(name), Kind::real, std::move(doc), {}, 0, 0, nullptr, nullptr, min, max};
  std::string key_name = k.name;
  k.set = [field, min, max, key_name](TrainConfig& c, const toml::node& n) {
    auto v = n.value<double>();
    if (!v || !n.is_number()) fail("config key '{}' = {} must be a number", key_name, node_text(n));
    if (!std::isfinite(*v) || *v < min || *v > max)
      fail("config key '{}' = {} is out of range: it must be in [{}, {}]", key_name, *v, min, max);
    field(c.model) = *v;
  };
  k.get = [field](const TrainConfig& c) {
    nn::GptConfig m = c.model;
    return fmt::format("{}", static_cast<double>(field(m)));
  };
  return k;
}

// Reals must be finite (TOML allows nan and inf, and NaN passes every `<` test) and in
// [min, max].
Key real_key(std::string name, double TrainConfig::*member, std::string doc, double min = 0.0,
             double max = std::numeric_limits<double>::max()) {
  Key k{std::move(name), Kind::real, std::move(doc), {}, 0, 0, nullptr, nullptr, min, max};
  std::string key_name = k.name;
  k.set = [member, min, max, key_name](TrainConfig& c, const toml::node& n) {
    auto v = n.value<double>();  // accepts integers too
    if (!v || !n.is_number()) fail("config key '{}' = {} must be a number", key_name, node_text(n));
    validate::in_range(*v, min, max, fmt::format("config key '{}'", key_name));
    c.*member = *v;
  };
  k.get = [member](const TrainConfig& c) { return fmt::format("{}", c.*member); };
  return k;
}

// Strings name files, globs and runs: they must be UTF-8 text (TOML's own rule, which a
// --set bare word would otherwise bypass) without control characters (a NUL would cut a
// path short; written back, an invalid byte would read as another character).
void check_text(const std::string& key_name, const std::string& v) {
  for (size_t i = 0; i < v.size();) {
    const auto b = static_cast<unsigned char>(v[i]);
    size_t len = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
    char32_t cp = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
    bool ok = len > 0 && i + len <= v.size();
    for (size_t j = 1; ok && j < len; ++j) {
      const auto c = static_cast<unsigned char>(v[i + j]);
      ok = (c >> 6) == 0x2;
      cp = (cp << 6) | (c & 0x3F);
    }
    static constexpr char32_t kMinOfLength[] = {0, 0, 0x80, 0x800, 0x10000};
    ok = ok && cp >= kMinOfLength[len] && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    if (!ok)
      fail("config key '{}': the value is not valid UTF-8 text (byte {} of it): write it as "
           "UTF-8", key_name, i + 1);
    if (cp < 0x20 || cp == 0x7F)
      fail("config key '{}': the value holds the control character U+{:04X}: remove it",
           key_name, static_cast<uint32_t>(cp));
    i += len;
  }
}

Key string_key(std::string name, std::string TrainConfig::*member, std::string doc,
               std::vector<std::string> choices = {}) {
  Key k{std::move(name), Kind::string, std::move(doc), std::move(choices), 0, 0, nullptr, nullptr};
  std::string key_name = k.name;
  auto allowed = k.choices;
  k.set = [member, key_name, allowed](TrainConfig& c, const toml::node& n) {
    auto v = n.value_exact<std::string>();
    if (!v) fail("config key '{}' = {} must be a string (in quotes)", key_name, node_text(n));
    check_text(key_name, *v);
    if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), *v) == allowed.end())
      fail("config key '{}' = \"{}\" is not allowed: choose one of {}", key_name, *v,
           fmt::format("{}", fmt::join(allowed, ", ")));
    c.*member = *v;
  };
  k.get = [member](const TrainConfig& c) { return quote(c.*member); };
  return k;
}

Key bool_key(std::string name, bool TrainConfig::*member, std::string doc) {
  Key k{std::move(name), Kind::boolean, std::move(doc), {}, 0, 0, nullptr, nullptr};
  std::string key_name = k.name;
  k.set = [member, key_name](TrainConfig& c, const toml::node& n) {
    auto v = n.value_exact<bool>();
    if (!v) fail("config key '{}' = {} must be true or false", key_name, node_text(n));
    c.*member = *v;
  };
  k.get = [member](const TrainConfig& c) { return c.*member ? "true" : "false"; };
  return k;
}

const std::vector<Key>& schema() {
  static const std::vector<Key> keys = [] {
    std::vector<Key> k;
    Key preset{"model.preset", Kind::string,
               "named architecture (gpt2-124m ... gpt2-1558m, gpt-mini, gpt-tiny; llama3-1b-shape, "
               "llama3-3b-shape, llama3-8b-shape, llama-mini, llama-tiny); the other model keys "
               "override its fields",
               nn::gpt_preset_names(), 0, 0, nullptr, nullptr};
    preset.set = [](TrainConfig& c, const toml::node& n) {
      auto v = n.value_exact<std::string>();
      if (!v) fail("config key 'model.preset' = {} must be a string", node_text(n));
      c.model = nn::gpt_preset(*v);
      c.model_preset = *v;
    };
    preset.get = [](const TrainConfig& c) { return quote(c.model_preset); };
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
                 {"gpt2", "llama"}, 0, 0, nullptr, nullptr};
      family.set = [](TrainConfig& c, const toml::node& n) {
        auto v = n.value_exact<std::string>();
        if (!v) fail("config key 'model.family' = {} must be a string", node_text(n));
        c.model.family = nn::parse_gpt_family(*v);
      };
      family.get = [](const TrainConfig& c) { return quote(nn::to_string(c.model.family)); };
      k.push_back(family);
    }
    k.push_back(model_count_key("model.n_kv_head", [](nn::GptConfig& m) -> int64_t& { return m.n_kv_head; },
                                "llama: key/value heads (grouped-query attention; divides n_head); "
                                "0 = n_head", 1024));
    k.push_back(model_count_key("model.ffn_hidden", [](nn::GptConfig& m) -> int64_t& { return m.ffn_hidden; },
                                "llama: MLP hidden width; 0 = 4 x n_embd", int64_t{1} << 20));
    {
      Key tie{"model.tie_embeddings", Kind::boolean,
              "llama: the LM head is the token embedding (gpt2: always)", {}, 0, 0, nullptr, nullptr};
      tie.set = [](TrainConfig& c, const toml::node& n) {
        auto v = n.value_exact<bool>();
        if (!v) fail("config key 'model.tie_embeddings' = {} must be true or false", node_text(n));
        c.model.tie_embeddings = *v;
      };
      tie.get = [](const TrainConfig& c) { return c.model.tie_embeddings ? "true" : "false"; };
      k.push_back(tie);
    }
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
                           "activation/matmul precision (CPU: fp32 only)", {"fp32", "bf16", "fp16"}));
    k.push_back(int_key("train.batch_size", &TrainConfig::batch_size, "micro-batch B per rank", 1, int64_t{1} << 20));
    k.push_back(int_key("train.seq_len", &TrainConfig::seq_len, "sequence length T (<= model.block_size)", 1,
                        int64_t{1} << 20));
    k.push_back(int_key("train.grad_accum", &TrainConfig::grad_accum,
                        "micro-steps accumulated per optimizer step", 1, int64_t{1} << 20));
    k.push_back(int_key("train.steps", &TrainConfig::steps, "optimizer steps", 1, int64_t{1} << 40));
    k.push_back(int_key("train.seed", &TrainConfig::seed, "seed for initialisation and shuffling", 0,
                        std::numeric_limits<int64_t>::max()));
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
    k.push_back(int_key("train.threads", &TrainConfig::threads, "CPU threads; 0 = all cores", 0,
                        validate::kMaxThreads));
    k.push_back(int_key("train.eval_every", &TrainConfig::eval_every,
                        "steps between validation passes; 0 = only at the end", 0, int64_t{1} << 40));
    k.push_back(int_key("train.eval_batches", &TrainConfig::eval_batches, "batches per validation pass", 1, int64_t{1} << 30));
    k.push_back(int_key("train.log_every", &TrainConfig::log_every, "steps between metrics lines", 1, int64_t{1} << 40));
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
                           "given parallel.rendezvous)", {"auto", "mpi", "tcp", "nccl", "none"}));
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
    k.push_back(real_key("parallel.timeout_s", &TrainConfig::timeout_s,
                         "a collective stalled this long ends the rank (dead peer)", 1.0, 2592000.0));
    k.push_back(int_key("parallel.zero_stage", &TrainConfig::zero_stage,
                        "0: every rank keeps the whole optimizer state; 1: ZeRO-1, fp32 master "
                        "weights and AdamW moments sharded over the data-parallel ranks (GPU "
                        "ranks over NCCL; CPU ranks: the trainer's ZeRO-1 wrapper); 2: ZeRO-2, "
                        "also the gradients reduce-scattered and kept as shards (CPU ranks, and "
                        "GPU ranks over NCCL); 3: ZeRO-3, also the parameters sharded, gathered "
                        "block by block (CPU ranks, and GPU ranks over NCCL)", 0, 3));
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
                           "GPU ranks (NCCL): type the gradients are summed in; bf16 halves the "
                           "bytes (rounded before the sum, fp32 again after it)",
                           {"fp32", "bf16"}));
    k.push_back(string_key("parallel.grad_transport", &TrainConfig::grad_transport,
                           "GPU ranks on one node: how gradient buckets move; nccl (NCCL's "
                           "kernels) or copy-engine (CUDA IPC copies, no SMs held; also "
                           "with ZeRO-1)",
                           {"nccl", "copy-engine"}));
    k.push_back(string_key("run.dir", &TrainConfig::run_dir, "parent folder of run directories"));
    k.push_back(string_key("run.name", &TrainConfig::run_name,
                           "run directory name; empty = <preset>-<date>-<time>"));
    k.push_back(int_key("run.checkpoint_every", &TrainConfig::checkpoint_every,
                        "steps between checkpoints; 0 = only at the end", 0, int64_t{1} << 40));
    k.push_back(int_key("run.keep_checkpoints", &TrainConfig::keep_checkpoints,
                        "checkpoints kept (oldest removed)", 1, 1000000));
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
  }();
  return keys;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

[[noreturn]] void unknown_key(const std::string& key, const std::string& value,
                              const std::string& source) {
  std::string best;
  size_t best_d = 1000;
  std::string section = key.substr(0, key.find('.'));
  std::vector<std::string> in_section;
  for (const auto& k : schema()) {
    size_t d = edit_distance(key, k.name);
    if (d < best_d) best_d = d, best = k.name;
    if (k.name.starts_with(section + ".")) in_section.push_back(k.name);
  }
  std::string hint = best_d <= 3 ? fmt::format(" — did you mean '{}'?", best) : "";
  std::string allowed = in_section.empty()
      ? "sections are [model], [data], [train], [parallel], [run]"
      : fmt::format("keys of [{}] are {}", section, fmt::join(in_section, ", "));
  fail("{}: unknown config key '{}' (value {}){}; {}", source, key, value, hint, allowed);
}

const Key* find_key(const std::string& name) {
  for (const auto& k : schema())
    if (k.name == name) return &k;
  return nullptr;
}

// `from_file`: the nodes carry their line in `source`; otherwise `source` is the override.
void apply_table(TrainConfig& c, const toml::table& root, const std::string& source, bool from_file,
                 Origins& origins) {
  auto origin_of = [&](const toml::node& n) { return node_origin(n, source, from_file); };
  // The preset first, so that explicit model keys override its fields.
  if (auto* model = root["model"].as_table())
    if (auto* p = model->get("preset")) {
      try {
        schema()[0].set(c, *p);
      } catch (const Error& e) {
        fail("{}: {}", origin_of(*p), e.what());
      }
      origins["model.preset"] = origin_of(*p);
      for (const auto& k : schema())
        if (k.name.starts_with("model.") && k.name != "model.preset")
          origins[k.name] = origin_of(*p) + " (model.preset)";
    }
  for (const auto& [section_key, section_node] : root) {
    std::string section(section_key.str());
    const toml::table* table = section_node.as_table();
    if (!table) unknown_key(section, node_text(section_node), origin_of(section_node));
    for (const auto& [key, node] : *table) {
      std::string name = section + "." + std::string(key.str());
      if (name == "model.preset") continue;
      const Key* k = find_key(name);
      if (!k) unknown_key(name, node_text(node), origin_of(node));
      try {
        k->set(c, node);
      } catch (const Error& e) {
        fail("{}: {}", origin_of(node), e.what());
      }
      origins[name] = origin_of(node);
    }
  }
}

}  // namespace

namespace {

IntRange integer_range(const std::string& key) {
  const Key* k = find_key(key);
  if (!k || k->kind != Kind::integer) return std::nullopt;
  return std::make_pair(k->min_int, k->max_int);
}

}  // namespace

TrainConfig parse_train_config(const std::string& text, const std::string& source,
                               const std::vector<std::string>& overrides,
                               const ConfigAdjustment& adjust) {
  TrainConfig c;
  Origins origins;
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    if (auto m = toml_integer_out_of_range(e, text, source, integer_range)) fail("{}", *m);
    const auto& where = e.source().begin;
    fail("{}:{}:{}: malformed TOML: {}", source, where.line, where.column, e.description());
  }
  apply_table(c, root, source, true, origins);
  for (const auto& o : overrides) {
    const std::string origin = override_origin(o);
    auto eq = o.find('=');
    if (eq == std::string::npos || eq == 0)
      fail("--set '{}' is malformed: write --set section.key=value (e.g. --set train.steps=50)", o);
    std::string key = o.substr(0, eq), value = o.substr(eq + 1);
    auto dot = key.find('.');
    if (dot == std::string::npos)
      fail("--set '{}': the key must name its section, e.g. train.{}", o, key);
    // Values are TOML literals; a bare word is taken as a string.
    toml::table t;
    const Key* known = find_key(key);
    const bool quoted = !value.empty() && (value.front() == '"' || value.front() == '\'');
    if (known && known->kind == Kind::string && !quoted) {
      t = toml::table{{"v", value}};  // a bare word for a string key is the string itself
    } else {
      try {
        t = toml::parse("v = " + value);
      } catch (const toml::parse_error&) {
        // Digits beyond 64 bits are a number out of range, not a word.
        if (validate::looks_integer(value)) {
          const IntRange range = integer_range(key);
          fail("{}: {}", origin,
               validate::out_of_range_text(fmt::format("config key '{}'", key), value,
                                           range ? range->first : std::numeric_limits<int64_t>::min(),
                                           range ? range->second : std::numeric_limits<int64_t>::max()));
        }
        t = toml::table{{"v", value}};
      }
    }
    toml::table section{{key.substr(dot + 1), *t.get("v")}};
    toml::table wrapper{{key.substr(0, dot), section}};
    apply_table(c, wrapper, origin, false, origins);
  }
  if (adjust) {
    std::vector<std::string> set_keys;
    for (const auto& o : overrides) set_keys.push_back(o.substr(0, o.find('=')));
    adjust(c, set_keys);
  }
  try {
    validate_train_config(c, source);
  } catch (const Error& e) {
    fail("{}", with_origins(e.what(), source, origins));
  }
  return c;
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

std::string to_toml(const TrainConfig& c) {
  std::string out = "# resolved aiscale training configuration (every key, with defaults)\n";
  std::string section;
  for (const auto& k : schema()) {
    std::string s = k.name.substr(0, k.name.find('.'));
    if (s != section) {
      out += fmt::format("{}[{}]\n", section.empty() ? "" : "\n", s);
      section = s;
    }
    out += fmt::format("{} = {}\n", k.name.substr(k.name.find('.') + 1), k.get(c));
  }
  return out;
}

namespace {
ConfigKeyInfo key_info(const Key& k) {
  static constexpr const char* kTypes[] = {"integer", "number", "string", "boolean"};
  ConfigKeyInfo info{k.name, kTypes[static_cast<int>(k.kind)], k.doc, k.choices,
                     k.min_int, k.max_int};
  info.min_real = k.min_real;
  info.max_real = k.max_real;
  info.default_value = k.get(TrainConfig{});
  return info;
}
}  // namespace

std::optional<ConfigKeyInfo> config_key_info(const std::string& key) {
  const Key* k = find_key(key);
  if (!k) return std::nullopt;
  return key_info(*k);
}

std::vector<ConfigKeyInfo> config_keys() {
  std::vector<ConfigKeyInfo> keys;
  for (const auto& k : schema()) keys.push_back(key_info(k));
  return keys;
}

std::string config_reference() {
  std::string out;
  for (const auto& k : schema()) {
    std::string extra = k.choices.empty() ? "" : fmt::format(" [{}]", fmt::join(k.choices, "|"));
    out += fmt::format("  {:<24} {:<13} {}{}\n", k.name, kind_name(k.kind), k.doc, extra);
  }
  return out;
}

}  // namespace aiscale::train
