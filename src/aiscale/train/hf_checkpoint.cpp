#include "aiscale/train/hf_checkpoint.h"

#include <cmath>
#include <filesystem>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/train/checkpoint.h"
#include "aiscale/train/hf_mapping.h"

namespace aiscale::train {
namespace fs = std::filesystem;

std::string gpt2_hf_config_json(const nn::GptConfig& c) {
  nlohmann::ordered_json j = {
      {"architectures", {"GPT2LMHeadModel"}},
      {"model_type", "gpt2"},
      {"vocab_size", c.vocab_size},
      {"n_positions", c.block_size},
      {"n_ctx", c.block_size},
      {"n_embd", c.n_embd},
      {"n_layer", c.n_layer},
      {"n_head", c.n_head},
      {"activation_function", "gelu_new"},
      {"layer_norm_epsilon", 1e-5},
      {"resid_pdrop", 0.0},
      {"embd_pdrop", 0.0},
      {"attn_pdrop", 0.0},
      // GPT-2's end-of-text id; only meaningful for the GPT-2 vocabulary (null otherwise).
      {"bos_token_id", c.vocab_size > 50256 ? nlohmann::ordered_json(50256) : nlohmann::ordered_json()},
      {"eos_token_id", c.vocab_size > 50256 ? nlohmann::ordered_json(50256) : nlohmann::ordered_json()},
      {"tie_word_embeddings", true},
      {"torch_dtype", "float32"}};
  return j.dump(2) + "\n";
}

namespace {

// A shape field of config.json: an integer, or a message saying what it is instead.
std::optional<int64_t> int_of(const nlohmann::json& j, const char* key) {
  if (!j.contains(key) || !j.at(key).is_number_integer()) return std::nullopt;
  return j.at(key).get<int64_t>();
}

}  // namespace

void check_gpt2_hf_config(const nlohmann::json& j, const nn::GptConfig& model,
                          const std::string& path) {
  if (!j.is_object()) fail("'{}' is not a model configuration: it is not a JSON object", path);
  const std::string type = j.contains("model_type") && j.at("model_type").is_string()
                               ? j.at("model_type").get<std::string>()
                               : "gpt2";
  if (type != "gpt2")
    fail("'{}' describes a {} model (model_type \"{}\"); this run trains GPT-2: give a GPT-2 "
         "checkpoint (model_type \"gpt2\")", path, type, type);
  struct Field {
    const char* hf;
    const char* key;
    int64_t ours;
  };
  const Field fields[] = {{"n_layer", "model.n_layer", model.n_layer},
                          {"n_head", "model.n_head", model.n_head},
                          {"n_embd", "model.n_embd", model.n_embd},
                          {"n_positions", "model.block_size", model.block_size},
                          {"vocab_size", "model.vocab_size", model.vocab_size}};
  std::vector<std::string> differ, sets;
  nn::GptConfig theirs = model;
  bool complete = true;
  for (const Field& f : fields) {
    const auto v = int_of(j, f.hf);
    if (!v) {
      differ.push_back(fmt::format("\"{}\" is {} (an integer is needed)", f.hf,
                                   j.contains(f.hf) ? j.at(f.hf).dump() : "missing"));
      complete = false;
      continue;
    }
    if (*v != f.ours) {
      differ.push_back(fmt::format("{} = {}, the model's {} = {}", f.hf, *v, f.key, f.ours));
      sets.push_back(fmt::format("{}={}", f.key, *v));
    }
    if (f.hf == std::string("n_layer")) theirs.n_layer = *v;
    if (f.hf == std::string("n_head")) theirs.n_head = *v;
    if (f.hf == std::string("n_embd")) theirs.n_embd = *v;
    if (f.hf == std::string("n_positions")) theirs.block_size = *v;
    if (f.hf == std::string("vocab_size")) theirs.vocab_size = *v;
  }
  if (!differ.empty()) {
    std::string fix;
    if (!complete) {
      fix = "it is not a GPT-2 config.json: give the folder of a GPT-2 checkpoint";
    } else {
      fix = fmt::format("set the model to the checkpoint's: --set {}", fmt::join(sets, " "));
      for (const auto& name : nn::gpt_preset_names()) {
        const nn::GptConfig p = nn::gpt_preset(name);
        if (p.n_layer == theirs.n_layer && p.n_head == theirs.n_head && p.n_embd == theirs.n_embd &&
            p.block_size == theirs.block_size && p.vocab_size == theirs.vocab_size) {
          fix += fmt::format(" (or model.preset = \"{}\", which is that shape)", name);
          break;
        }
      }
    }
    fail("'{}' does not describe the model being trained: {}; {}", path, fmt::join(differ, "; "), fix);
  }
  // Fields under which the same weights compute another function than aiscale's GPT-2.
  std::vector<std::string> other;
  const auto text = [&](const char* key) { return j.at(key).dump(); };
  if (j.contains("activation_function")) {
    const auto& a = j.at("activation_function");
    if (!a.is_string() || (a != "gelu_new" && a != "gelu_pytorch_tanh" && a != "gelu_fast"))
      other.push_back(fmt::format("activation_function = {} (aiscale's GPT-2 uses the tanh GELU, "
                                  "\"gelu_new\")", text("activation_function")));
  }
  if (j.contains("n_inner") && !j.at("n_inner").is_null() &&
      !(j.at("n_inner").is_number_integer() && j.at("n_inner").get<int64_t>() == 4 * model.n_embd))
    other.push_back(fmt::format("n_inner = {} (aiscale's MLP is 4 x n_embd = {})", text("n_inner"),
                                4 * model.n_embd));
  if (j.contains("layer_norm_epsilon") &&
      !(j.at("layer_norm_epsilon").is_number() &&
        std::fabs(j.at("layer_norm_epsilon").get<double>() - 1e-5) <= 1e-12))
    other.push_back(fmt::format("layer_norm_epsilon = {} (aiscale's LayerNorm uses 1e-05)",
                                text("layer_norm_epsilon")));
  const auto flag_is = [&](const char* key, bool want) {
    return !j.contains(key) || (j.at(key).is_boolean() && j.at(key).get<bool>() == want);
  };
  if (!flag_is("tie_word_embeddings", true))
    other.push_back("tie_word_embeddings = false (aiscale's GPT-2 ties the LM head to wte)");
  if (!flag_is("scale_attn_weights", true))
    other.push_back("scale_attn_weights = false (aiscale scales attention by 1/sqrt(head size))");
  if (!flag_is("scale_attn_by_inverse_layer_idx", false))
    other.push_back("scale_attn_by_inverse_layer_idx = true (aiscale does not scale by layer)");
  if (!other.empty())
    fail("'{}' describes a GPT-2 variant aiscale does not train: {}; its weights would compute "
         "another function here: give a checkpoint of the standard GPT-2 architecture", path,
         fmt::join(other, "; "));
}

std::vector<float> read_hf_model(const std::string& dir, const nn::GptConfig& model,
                                 const std::string& what) {
  std::error_code ec;
  const fs::path d(dir);
  if (!fs::exists(d, ec)) fail("{} '{}': no such folder: give a Hugging Face model folder "
                               "(config.json and model.safetensors)", what, dir);
  if (!fs::is_directory(d, ec))
    fail("{} '{}' is a file: give the folder that holds it, with config.json and "
         "model.safetensors", what, dir);
  if (!fs::exists(d / "config.json", ec)) {
    // A run directory or its checkpoints/ folder: name the checkpoint to give instead.
    for (const fs::path& ckpts : {d / "checkpoints", d})
      if (const auto newest = latest_checkpoint(ckpts.string()))
        fail("{} '{}' is not a model folder (no config.json): give a checkpoint folder, e.g. "
             "'{}' (the newest complete one)", what, dir, *newest);
    fail("{} '{}' is not a Hugging Face model folder: it has no config.json", what, dir);
  }
  if (!has_hf_weights(dir))
    fail("{} '{}' has config.json but no weights: neither {} nor {} is there", what, dir,
         kHfWeightsFile, kHfWeightsIndex);
  const std::string config_path = (d / "config.json").string();
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(read_file(config_path));
  } catch (const nlohmann::json::exception& e) {
    fail("'{}' is not valid JSON: {}", config_path, e.what());
  }
  check_gpt2_hf_config(config, model, config_path);
  const HfWeights weights(dir);
  return hf_import(gpt2_hf_map(model), weights,
                   "The checkpoint is of another model or damaged: give the folder of a GPT-2 "
                   "checkpoint of this shape");
}

std::vector<std::pair<std::string, std::string>> gpt2_hf_model_files(
    const nn::GptConfig& c, const std::vector<float>& params, uint64_t max_shard_bytes) {
  auto files = hf_weight_files(hf_export(gpt2_hf_map(c), params.data()), max_shard_bytes,
                               {{"format", "pt"}, {"producer", "aiscale"}});
  files.emplace_back("config.json", gpt2_hf_config_json(c));
  return files;
}

}  // namespace aiscale::train
