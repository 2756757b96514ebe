#include "aiscale/cli/run_options.h"

#include <algorithm>

#include <fmt/format.h>

#include "aiscale/cli/options.h"
#include "aiscale/core/config_origins.h"
#include "aiscale/core/error.h"
#include "aiscale/core/validate.h"
#include "aiscale/train/config.h"

namespace aiscale::cli {
namespace {

// One entry per config key that has an option. The option is the key's name with '-' for
// '_' (model.preset is --model, as every command has called it); `aliases` are the older
// spellings that scripts and recorded commands use. Meaning, type, range and choices come
// from the train config's schema (train/config.h), so an option and its key cannot drift.
struct RunOptionDef {
  const char* key;
  const char* aliases;  // "" or ",--layers" (CLI11's list form)
  bool flag = false;    // a boolean given as a bare flag (--recompute)
};

constexpr RunOptionDef kRunOptions[] = {
    {"model.preset", ""},
    {"model.n_layer", ",--layers"},
    {"model.n_head", ",--heads"},
    {"model.n_embd", ",--width"},
    {"model.block_size", ",--context"},
    {"model.vocab_size", ",--vocab"},
    {"model.n_kv_head", ""},
    {"model.ffn_hidden", ""},
    {"model.tie_embeddings", ""},
    {"train.batch_size", ",--batch,-b,--micro-batch"},
    {"train.seq_len", ",--seq,-t"},
    {"train.grad_accum", ""},
    {"train.steps", ""},
    {"train.device", ""},
    {"train.precision", ""},
    {"train.threads", ""},
    {"train.recompute", "", true},
    {"train.recompute_layers", "", true},
    {"train.attention", ""},
    {"train.init_from", ""},
    {"parallel.communicator", ""},
    {"parallel.rendezvous", ""},
    {"parallel.zero_stage", ",--zero"},
    {"parallel.offload_optimizer", "", true},
    {"parallel.tensor_parallel", ",--tp"},
    {"parallel.pipeline_parallel", ",--pp"},
    {"parallel.pipeline_schedule", ""},
    {"parallel.microbatches", ""},
    {"parallel.sequence_parallel", "", true},
    {"parallel.overlap", ""},
    {"parallel.bucket_mib", ""},
    {"parallel.grad_comm", ""},
    {"parallel.grad_transport", ""},
    {"parallel.allreduce", ""},
    {"parallel.ranks_per_node", ""},
    {"parallel.grad_mixing", ""},
    {"parallel.compression", ""},
    {"parallel.topk_ratio", ""},
    {"parallel.parameter_servers", ""},
    {"parallel.max_staleness", ""},
    {"run.tensorboard", "", true},
    {"run.mllog", "", true},
};

const RunOptionDef& def_of(std::string_view key) {
  for (const auto& d : kRunOptions)
    if (key == d.key) return d;
  fail("internal: no command-line option for config key '{}'", key);
}

std::string option_name(std::string_view key) {
  if (key == "model.preset") return "--model";
  std::string name(key.substr(key.find('.') + 1));
  std::replace(name.begin(), name.end(), '_', '-');
  return "--" + name;
}

}  // namespace

std::vector<std::string> RunOptions::overrides() const {
  std::vector<std::string> out;
  for (const auto& [key, value] : values) out.push_back(key + "=" + value);
  return out;
}

std::optional<std::string> RunOptions::text(std::string_view key) const {
  for (const auto& [k, v] : values)
    if (k == key) return v;
  return std::nullopt;
}

std::optional<int64_t> RunOptions::integer(std::string_view key) const {
  const auto t = text(key);
  if (!t) return std::nullopt;
  return validate::parse_int(*t, std::numeric_limits<int64_t>::min(),
                             std::numeric_limits<int64_t>::max(), run_option_names(key));
}

std::string run_option_names(std::string_view key) {
  return option_name(key) + def_of(key).aliases;
}

std::vector<std::string> run_option_keys() {
  std::vector<std::string> keys;
  for (const auto& d : kRunOptions) keys.emplace_back(d.key);
  return keys;
}

std::string with_option_names(const std::string& message) {
  std::string names;
  for (const auto& d : kRunOptions)
    if (message.find(d.key) != std::string::npos)
      names += fmt::format("{}{} is {}", names.empty() ? "" : ", ", d.key, option_name(d.key));
  return names.empty() ? message : fmt::format("{} [{}]", message, names);
}

void add_run_options(CLI::App* app, RunOptions& o, const std::vector<std::string>& keys,
                     const std::string& group) {
  for (const std::string& key : keys) {
    const RunOptionDef& d = def_of(key);
    const auto info = train::config_key_info(key);
    if (!info) fail("internal: option for '{}', which the train config does not know", key);
    const std::string help = fmt::format("{} (config key {})", info->doc, key);
    const std::string names = option_name(key) + d.aliases;
    if (d.flag) {
      app->add_flag_callback(names, [&o, key] {
            o.values.emplace_back(key, "true");
            config::name_override_origin(key + "=true", option_name(key));
          }, help)
          ->group(group);
      continue;
    }
    CLI::Option* opt = app->add_option_function<std::string>(
        names,
        [&o, key, type = info->type](const std::string& v) {
          std::string value = v;
          if (type == "boolean") value = (v == "1" || v == "true") ? "true" : "false";
          o.values.emplace_back(key, value);
          // Errors about the value name this option, not a --set the user did not write.
          config::name_override_origin(key + "=" + value, option_name(key) + " " + v);
        },
        help);
    opt->group(group);
    opt->type_name(info->type == "integer" ? "INT" : info->type == "number" ? "FLOAT"
                   : info->type == "boolean" ? "BOOL" : "TEXT");
    if (!info->choices.empty()) {
      opt->check(CLI::IsMember(info->choices));
    } else if (info->type == "integer") {
      opt->check(integer_in(info->min_int, info->max_int));
    } else if (info->type == "number") {
      opt->check(number_in(0));
    } else if (info->type == "boolean") {
      opt->check(CLI::IsMember({"true", "false", "1", "0"}));
    }
  }
}

}  // namespace aiscale::cli
