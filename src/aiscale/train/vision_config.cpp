#include "aiscale/train/vision_config.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <sstream>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/core/toml_errors.h"
#include "aiscale/core/validate.h"
#include "aiscale/nn/models/resnet_config.h"
#include "aiscale/train/config_origins.h"

namespace aiscale::train {
namespace {

using Config = VisionTrainConfig;

std::string node_text(const toml::node& n) {
  std::ostringstream os;
  n.visit([&](auto&& v) { os << v; });
  return os.str();
}

std::string quote(const std::string& s) {
  std::ostringstream os;
  os << toml::value<std::string>(s);
  return os.str();
}

struct Key {
  std::string name, type, doc;
  std::vector<std::string> choices;
  std::function<void(Config&, const toml::node&)> set;
  std::function<std::string(const Config&)> get;
  int64_t min_int = 0, max_int = 0;  // integers: the range
};

template <typename T>
Key int_key(std::string name, T Config::*member, std::string doc, int64_t min, int64_t max) {
  Key k{name, "integer", std::move(doc), {}, nullptr, nullptr, min, max};
  k.set = [=](Config& c, const toml::node& n) {
    auto v = n.value_exact<int64_t>();
    if (!v) fail("config key '{}' = {} must be an integer", name, node_text(n));
    validate::in_range(*v, min, max, fmt::format("config key '{}'", name));
    c.*member = static_cast<T>(*v);
  };
  k.get = [=](const Config& c) { return std::to_string(c.*member); };
  return k;
}

Key real_key(std::string name, double Config::*member, std::string doc, double min, double max) {
  Key k{name, "number", std::move(doc), {}, nullptr, nullptr};
  k.set = [=](Config& c, const toml::node& n) {
    auto v = n.value<double>();
    if (!v || !n.is_number()) fail("config key '{}' = {} must be a number", name, node_text(n));
    validate::in_range(*v, min, max, fmt::format("config key '{}'", name));
    c.*member = *v;
  };
  k.get = [=](const Config& c) { return fmt::format("{}", c.*member); };
  return k;
}

Key string_key(std::string name, std::string Config::*member, std::string doc,
               std::vector<std::string> choices = {}) {
  Key k{name, "string", std::move(doc), choices, nullptr, nullptr};
  k.set = [=](Config& c, const toml::node& n) {
    auto v = n.value_exact<std::string>();
    if (!v) fail("config key '{}' = {} must be a string (in quotes)", name, node_text(n));
    if (!choices.empty() && std::find(choices.begin(), choices.end(), *v) == choices.end())
      fail("config key '{}' = \"{}\" is not allowed: choose one of {}", name, *v,
           fmt::format("{}", fmt::join(choices, ", ")));
    c.*member = *v;
  };
  k.get = [=](const Config& c) { return quote(c.*member); };
  return k;
}

Key bool_key(std::string name, bool Config::*member, std::string doc) {
  Key k{name, "boolean", std::move(doc), {}, nullptr, nullptr};
  k.set = [=](Config& c, const toml::node& n) {
    auto v = n.value_exact<bool>();
    if (!v) fail("config key '{}' = {} must be true or false", name, node_text(n));
    c.*member = *v;
  };
  k.get = [=](const Config& c) { return c.*member ? "true" : "false"; };
  return k;
}

constexpr int64_t kBig = int64_t{1} << 40;

const std::vector<Key>& schema() {
  static const std::vector<Key> keys = [] {
    std::vector<Key> k;
    k.push_back(string_key("model.kind", &Config::kind, "resnet: an image classifier", {"resnet"}));
    k.push_back(string_key("model.preset", &Config::preset,
                           "resnet18, resnet34, resnet50 (ImageNet stem) or resnet-small "
                           "(3x3 stem, 16/32/64 channels, for 28x28 images)",
                           nn::resnet_preset_names()));
    k.push_back(int_key("model.num_classes", &Config::num_classes,
                        "classifier outputs; 0 = the training data's classes", 0, 1 << 24));
    k.push_back(int_key("model.image_size", &Config::image_size,
                        "square size images are served at; 0 = the stored size", 0, 1 << 16));
    k.push_back(int_key("model.blocks_per_stage", &Config::blocks_per_stage,
                        "residual blocks in every stage; 0 = the preset's", 0, 64));
    k.push_back(int_key("model.stem_stride", &Config::stem_stride,
                        "resnet-small: stride of the 3x3 stem (2 quarters stage 1's work); "
                        "0 = the preset's 1", 0, 2));
    k.push_back(real_key("model.label_smoothing", &Config::label_smoothing,
                         "cross-entropy against (1 - e) onehot + e / classes", 0.0, 0.999));
    k.push_back(bool_key("model.zero_init_residual", &Config::zero_init_residual,
                         "start each block's last batch norm scale at 0"));
    k.push_back(string_key("data.kind", &Config::data_kind,
                           "lmdb (written by aiscale data pack-images), idx (MNIST-style "
                           "files) or synthetic (generated images, for benchmarks and tests)",
                           {"lmdb", "idx", "synthetic"}));
    k.push_back(string_key("data.train", &Config::train_data,
                           "training images: the LMDB directory, or the IDX images file (its "
                           "labels file beside it)"));
    k.push_back(string_key("data.val", &Config::val_data,
                           "validation images (same kind); empty = no validation"));
    k.push_back(int_key("data.repeat", &Config::repeat,
                        "read each record this many times per epoch", 1, 1 << 20));
    k.push_back(int_key("data.loader_threads", &Config::loader_threads,
                        "decoding workers per rank; 0 = the rank's cores", 0, 4096));
    k.push_back(string_key("data.stage", &Config::stage,
                           "none, ram (copy the store into memory first) or local:DIR"));
    k.push_back(string_key("data.augment", &Config::augment,
                           "training images: crop-flip (random-resized-crop + horizontal "
                           "flip), flip (resize + flip) or none (resize)",
                           {"crop-flip", "flip", "none"}));
    k.push_back(bool_key("data.skip_corrupt", &Config::skip_corrupt,
                         "false: a record of the image store that cannot be decoded stops the "
                         "run with an error naming it; true: it is skipped (the batch takes the "
                         "next record), with one warning and the count in summary.json"));
    k.push_back(int_key("data.synthetic_images", &Config::synthetic_images,
                        "synthetic: images in the set", 1, kBig));
    k.push_back(int_key("data.synthetic_channels", &Config::synthetic_channels,
                        "synthetic: channels per image", 1, 64));
    k.push_back(int_key("data.synthetic_classes", &Config::synthetic_classes,
                        "synthetic: classes", 2, 1 << 20));
    k.push_back(string_key("train.device", &Config::device,
                           "where to train: cpu, or cuda (one GPU per rank: NHWC, cuDNN)",
                           {"cpu", "cuda"}));
    k.push_back(string_key("train.precision", &Config::precision,
                           "cuda: fp32, or bf16 / fp16 AMP (16-bit activations, fp32 master "
                           "weights and batch norm); the CPU trains in fp32",
                           {"fp32", "bf16", "fp16"}));
    k.push_back(bool_key("train.tf32", &Config::tf32,
                         "cuda fp32: let cuDNN use TF32 tensor cores (off: true fp32)"));
    k.push_back(string_key("train.batchnorm", &Config::batchnorm,
                           "cuda: batch norm kernels, own (deterministic) or cudnn (cuDNN's "
                           "fused kernels where cuDNN takes the layer; bf16 and fp16 only, fp32 keeps "
                           "the own)",
                           {"own", "cudnn"}));
    k.push_back(int_key("train.cudnn_workspace_mib", &Config::cudnn_workspace_mib,
                        "cuda: MiB of cuDNN workspace, allocated once; the convolution search "
                        "only times engines that fit it; -1: the GPU's free memory beside the "
                        "model, less 2 GiB, within 512 MiB..16 GiB", -1, int64_t{1} << 20));
    k.push_back(int_key("train.batch_size", &Config::batch_size, "images per rank per step", 1,
                        1 << 20));
    k.push_back(int_key("train.steps", &Config::steps,
                        "optimizer steps; 0 = train.epochs of the training set", 0, kBig));
    k.push_back(real_key("train.epochs", &Config::epochs, "epochs when train.steps = 0", 0.0,
                         1e6));
    k.push_back(int_key("train.seed", &Config::seed, "initialisation and shuffling", 0,
                        std::numeric_limits<int64_t>::max()));
    k.push_back(real_key("train.lr", &Config::lr,
                         "base learning rate, for a global batch of train.reference_batch",
                         0.0, 1e3));
    k.push_back(string_key("train.lr_scaling", &Config::lr_scaling,
                           "linear: peak lr = train.lr x global batch / train.reference_batch "
                           "(Goyal et al.); none: train.lr as given",
                           {"linear", "none"}));
    k.push_back(int_key("train.reference_batch", &Config::reference_batch,
                        "the batch train.lr was tuned for", 1, 1 << 30));
    k.push_back(real_key("train.warmup_epochs", &Config::warmup_epochs,
                         "linear warm-up to the peak lr", 0.0, 1e6));
    k.push_back(string_key("train.schedule", &Config::schedule, "decay after warm-up",
                           {"cosine", "step", "constant"}));
    k.push_back(real_key("train.step_epochs", &Config::step_epochs,
                         "step: multiply the lr by train.step_gamma every this many epochs",
                         1e-6, 1e6));
    k.push_back(real_key("train.step_gamma", &Config::step_gamma, "step: the factor", 0.0, 1.0));
    k.push_back(real_key("train.min_lr_ratio", &Config::min_lr_ratio,
                         "cosine: final lr as a fraction of the peak", 0.0, 1.0));
    k.push_back(real_key("train.momentum", &Config::momentum, "SGD momentum", 0.0, 0.999999));
    k.push_back(bool_key("train.nesterov", &Config::nesterov, "Nesterov momentum"));
    k.push_back(real_key("train.weight_decay", &Config::weight_decay,
                         "L2 weight decay on convolution and classifier weights", 0.0, 1.0));
    k.push_back(bool_key("train.decay_bn_and_bias", &Config::decay_bn_and_bias,
                         "apply weight decay to batch norm scales/shifts and biases too"));
    k.push_back(int_key("train.threads", &Config::threads, "CPU threads; 0 = all cores", 0,
                        validate::kMaxThreads));
    k.push_back(int_key("train.eval_every", &Config::eval_every,
                        "steps between validation passes; 0 = at each epoch's end", 0, kBig));
    k.push_back(int_key("train.eval_batches", &Config::eval_batches,
                        "batches per validation pass; 0 = the whole validation set", 0,
                        1 << 30));
    k.push_back(int_key("train.log_every", &Config::log_every, "steps between metrics lines", 1,
                        kBig));
    k.push_back(string_key("parallel.communicator", &Config::communicator,
                           "auto: several ranks talk over NCCL on GPUs, MPI on CPUs (TCP "
                           "without an MPI launcher: torchrun); one process otherwise",
                           {"auto", "mpi", "tcp", "nccl", "none"}));
    k.push_back(bool_key("parallel.sync_batchnorm", &Config::sync_batchnorm,
                         "batch norm statistics over every rank's images (one all-reduce per "
                         "layer) instead of each rank's own"));
    k.push_back(bool_key("parallel.overlap_allreduce", &Config::overlap_allreduce,
                         "GPU ranks over NCCL: all-reduce ~25 MiB buckets of gradients while "
                         "the backward goes on (false: one all-reduce after it)"));
    k.push_back(int_key("parallel.zero_stage", &Config::zero_stage,
                        "0: every rank keeps the whole SGD momentum (DDP); 1: ZeRO-1, the "
                        "gradients reduce-scattered and the momentum sharded over the CPU "
                        "ranks, the parameters all-gathered after each step", 0, 1));
    k.push_back(real_key("parallel.timeout_s", &Config::timeout_s,
                         "a collective stalled this long ends the rank", 1.0, 2592000.0));
    k.push_back(string_key("run.dir", &Config::run_dir, "parent folder of run directories"));
    k.push_back(string_key("run.name", &Config::run_name,
                           "run directory name; empty = <preset>-<date>-<time>"));
    k.push_back(int_key("run.checkpoint_every", &Config::checkpoint_every,
                        "steps between checkpoints; 0 = only at the end", 0, kBig));
    k.push_back(int_key("run.keep_checkpoints", &Config::keep_checkpoints,
                        "checkpoints kept (oldest removed)", 1, 1000000));
    return k;
  }();
  return keys;
}

const Key* find_key(const std::string& name) {
  for (const Key& k : schema())
    if (k.name == name) return &k;
  return nullptr;
}

// `from_file`: the nodes carry their line in `source`; otherwise `source` is the override.
// Records where each key came from (config_origins.h).
void apply(Config& c, const toml::table& root, const std::string& source, bool from_file,
           Origins& origins) {
  for (const auto& [section_key, section_node] : root) {
    const std::string section(section_key.str());
    const toml::table* table = section_node.as_table();
    if (!table)
      fail("{}: '{}' must be a [section] of the vision config",
           node_origin(section_node, source, from_file), section);
    for (const auto& [key, node] : *table) {
      const std::string name = section + "." + std::string(key.str());
      const Key* k = find_key(name);
      if (!k) {
        std::vector<std::string> in_section;
        for (const Key& s : schema())
          if (s.name.starts_with(section + ".")) in_section.push_back(s.name);
        fail("{}: unknown vision config key '{}'; {}", node_origin(node, source, from_file), name,
             in_section.empty()
                 ? std::string("sections are [model], [data], [train], [parallel], [run]")
                 : fmt::format("keys of [{}] are {}", section, fmt::join(in_section, ", ")));
      }
      try {
        k->set(c, node);
      } catch (const Error& e) {
        fail("{}: {}", node_origin(node, source, from_file), e.what());
      }
      origins[name] = node_origin(node, source, from_file);
    }
  }
}

IntRange integer_range(const std::string& key) {
  const Key* k = find_key(key);
  if (!k || k->type != "integer") return std::nullopt;
  return std::make_pair(k->min_int, k->max_int);
}

void validate_config(const Config& c, const std::string& source) {
  if (c.data_kind != "synthetic" && c.train_data.empty())
    fail("{}: data.train is empty: name the training images (data.kind = \"{}\"), or use "
         "data.kind = \"synthetic\"", source, c.data_kind);
  if (c.stage != "none" && c.stage != "ram" && !c.stage.starts_with("local:"))
    fail("{}: data.stage = \"{}\": use none, ram or local:DIR", source, c.stage);
  if (c.stem_stride > 0 && c.preset != "resnet-small")
    fail("{}: model.stem_stride applies to resnet-small's 3x3 stem, not to {}'s ImageNet stem",
         source, c.preset);
  if (c.device == "cpu" && (c.precision != "fp32" || c.tf32))
    fail("{}: train.precision = \"{}\"{} needs train.device = \"cuda\"; the CPU trains in fp32",
         source, c.precision, c.tf32 ? " with train.tf32" : "");
  if (c.device == "cpu" && c.batchnorm != "own")
    fail("{}: train.batchnorm = \"{}\" needs train.device = \"cuda\"", source, c.batchnorm);
  if (c.device == "cuda" && c.sync_batchnorm)
    fail("{}: parallel.sync_batchnorm is not available on the GPU yet: set it to false (each "
         "rank normalises with its own batch) or train on the CPU", source);
  if (c.device == "cuda" && c.zero_stage > 0)
    fail("{}: parallel.zero_stage = {} shards the optimizer state of CPU ranks; the GPU ResNet "
         "keeps its momentum on each GPU: set parallel.zero_stage = 0 or train.device = \"cpu\"",
         source, c.zero_stage);
  if (c.steps == 0 && c.epochs <= 0)
    fail("{}: train.steps = 0 and train.epochs = {}: set one of them above 0", source, c.epochs);
}

}  // namespace

bool is_vision_config(const std::string& toml_text, const std::vector<std::string>& overrides) {
  for (const std::string& o : overrides) {
    if (o == "model.kind=resnet" || o == "model.kind=\"resnet\"") return true;
  }
  try {
    const toml::table root = toml::parse(toml_text);
    if (auto kind = root["model"]["kind"].value<std::string>()) return *kind == "resnet";
    if (auto preset = root["model"]["preset"].value<std::string>()) {
      const auto names = nn::resnet_preset_names();
      return std::find(names.begin(), names.end(), *preset) != names.end();
    }
  } catch (const toml::parse_error&) {
  }
  return false;
}

VisionTrainConfig parse_vision_config(const std::string& text, const std::string& source,
                                      const std::vector<std::string>& overrides) {
  Config c;
  Origins origins;
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    if (auto m = toml_integer_out_of_range(e, text, source, integer_range)) fail("{}", *m);
    fail("{}:{}:{}: malformed TOML: {}", source, e.source().begin.line, e.source().begin.column,
         e.description());
  }
  apply(c, root, source, true, origins);
  for (const std::string& o : overrides) {
    const auto eq = o.find('='), dot = o.find('.');
    if (eq == std::string::npos || dot == std::string::npos || dot > eq)
      fail("--set '{}' is malformed: write --set section.key=value (e.g. --set train.steps=50)",
           o);
    const std::string key = o.substr(0, eq), value = o.substr(eq + 1);
    const Key* known = find_key(key);
    toml::table t;
    const bool quoted = !value.empty() && (value.front() == '"' || value.front() == '\'');
    if (known && known->type == "string" && !quoted) {
      t = toml::table{{"v", value}};
    } else {
      try {
        t = toml::parse("v = " + value);
      } catch (const toml::parse_error&) {
        // Digits beyond 64 bits are a number out of range, not a word.
        if (validate::looks_integer(value)) {
          const IntRange range = integer_range(key);
          fail("{}: {}", override_origin(o),
               validate::out_of_range_text(fmt::format("config key '{}'", key), value,
                                           range ? range->first : std::numeric_limits<int64_t>::min(),
                                           range ? range->second : std::numeric_limits<int64_t>::max()));
        }
        t = toml::table{{"v", value}};
      }
    }
    toml::table section{{key.substr(dot + 1), *t.get("v")}};
    apply(c, toml::table{{key.substr(0, dot), section}}, override_origin(o), false, origins);
  }
  try {
    validate_config(c, source);
  } catch (const Error& e) {
    fail("{}", with_origins(e.what(), source, origins));
  }
  return c;
}

VisionTrainConfig load_vision_config(const std::string& path,
                                     const std::vector<std::string>& overrides) {
  return parse_vision_config(read_file(path), path, overrides);
}

std::string to_toml(const VisionTrainConfig& c) {
  std::string out = "# resolved aiscale vision training configuration (every key, with defaults)\n";
  std::string section;
  for (const Key& k : schema()) {
    const std::string s = k.name.substr(0, k.name.find('.'));
    if (s != section) {
      out += fmt::format("{}[{}]\n", section.empty() ? "" : "\n", s);
      section = s;
    }
    out += fmt::format("{} = {}\n", k.name.substr(k.name.find('.') + 1), k.get(c));
  }
  return out;
}

std::string vision_config_reference() {
  std::string out;
  for (const Key& k : schema()) {
    const std::string extra =
        k.choices.empty() ? "" : fmt::format(" [{}]", fmt::join(k.choices, "|"));
    out += fmt::format("  {:<26} {:<8} {}{}\n", k.name, k.type, k.doc, extra);
  }
  return out;
}

}  // namespace aiscale::train
