#include "aiscale/train/checkpoint_check.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "aiscale/core/error.h"
#include "aiscale/core/validate.h"
#include "aiscale/train/checkpoint.h"

namespace aiscale::train {
namespace {

// An integer field in [lo, hi]; a float, string, missing key or out-of-range value is named.
int64_t int_field(const nlohmann::json& j, const char* key, int64_t lo, int64_t hi,
                  const std::string& source) {
  if (!j.is_object() || !j.contains(key))
    fail("'{}' is corrupt: it has no \"{}\"; resume from another checkpoint", source, key);
  const auto& v = j.at(key);
  if (!v.is_number_integer())
    fail("'{}' is corrupt: \"{}\" = {} is not an integer; resume from another checkpoint", source,
         key, v.dump());
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    fail("'{}' is corrupt: \"{}\" = {} is out of range", source, key, v.dump());
  return validate::in_range(v.get<int64_t>(), lo, hi, fmt::format("'{}': \"{}\"", source, key),
                            "the file is corrupt or edited; resume from another checkpoint");
}

// An integer key of the resolved configuration a checkpoint carries (state.json's
// config_toml), or `fallback` where the text or the key cannot be read.
int64_t config_toml_int(const toml::table* root, const char* section, const char* key,
                        int64_t fallback) {
  if (!root) return fallback;
  // Integers only: toml++ converts a float to an integer with no range check.
  const auto* v = (*root)[section][key].as_integer();
  return v ? v->get() : fallback;
}

// The layout, the batch and the data position of a checkpoint written before state.json
// recorded them: its position counted global batches of world_size x train.batch_size
// windows, the batch size known from the config it carries.
void read_legacy_position(CheckpointState& s, int64_t index, const std::string& source) {
  std::optional<toml::table> parsed;
  try {
    parsed = toml::parse(s.config_toml, source);
  } catch (const toml::parse_error&) {
  }
  const toml::table* root = parsed ? &*parsed : nullptr;
  s.batch_size = config_toml_int(root, "train", "batch_size", 0);
  s.grad_accum = config_toml_int(root, "train", "grad_accum", 1);
  s.seq_len = config_toml_int(root, "train", "seq_len", 0);
  s.tensor_parallel = config_toml_int(root, "parallel", "tensor_parallel", 1);
  s.pipeline_parallel = config_toml_int(root, "parallel", "pipeline_parallel", 1);
  s.zero_stage = config_toml_int(root, "parallel", "zero_stage", 0);
  if (s.batch_size < 1 && index > 0)
    fail("'{}' counts its data position in global batches (data_index = {}) but its "
         "config_toml does not say train.batch_size, so the position cannot be converted to "
         "samples: the file is damaged or edited; resume from another checkpoint",
         source, index);
  s.data.sample = validate::checked_product(
      validate::checked_product(index, int64_t{s.world_size}, "data_index x world_size"),
      std::max<int64_t>(s.batch_size, 1), "data_index x world_size x batch_size");
  s.position_converted = true;
}


// A number field, any JSON number, in [lo, hi].
double number_field(const nlohmann::json& j, const char* key, double lo, double hi,
                    const std::string& source) {
  if (!j.is_object() || !j.contains(key) || !j.at(key).is_number())
    fail("'{}' is corrupt: \"{}\" is missing or not a number; resume from another checkpoint",
         source, key);
  const double v = j.at(key).get<double>();
  if (!(v >= lo && v <= hi))
    fail("'{}' is corrupt: \"{}\" = {} is outside {}..{}; resume from another checkpoint", source,
         key, v, lo, hi);
  return v;
}

// A Hugging Face LlamaConfig (written by hf_config_json for the llama family).
nn::GptConfig llama_model_from_json(const nlohmann::json& hf, const std::string& source) {
  nn::GptConfig c;
  c.family = nn::GptFamily::llama;
  c.n_layer = int_field(hf, "num_hidden_layers", 1, 1024, source);
  c.n_head = int_field(hf, "num_attention_heads", 1, 1024, source);
  c.n_kv_head = int_field(hf, "num_key_value_heads", 1, 1024, source);
  c.n_embd = int_field(hf, "hidden_size", 1, 65536, source);
  c.ffn_hidden = int_field(hf, "intermediate_size", 1, int64_t{1} << 20, source);
  c.block_size = int_field(hf, "max_position_embeddings", 1, int64_t{1} << 20, source);
  c.vocab_size = int_field(hf, "vocab_size", 2, int64_t{1} << 24, source);
  c.norm_eps = number_field(hf, "rms_norm_eps", 0.0, 1.0, source);
  c.rope_theta = number_field(hf, "rope_theta", 1.0, 1e12, source);
  if (!hf.contains("tie_word_embeddings") || !hf.at("tie_word_embeddings").is_boolean())
    fail("'{}' is corrupt: \"tie_word_embeddings\" must be true or false", source);
  c.tie_embeddings = hf.at("tie_word_embeddings").get<bool>();
  const auto& s = hf.contains("rope_scaling") ? hf.at("rope_scaling") : nlohmann::json();
  if (!s.is_null()) {
    if (!s.is_object() || s.value("rope_type", std::string()) != "llama3")
      fail("'{}': \"rope_scaling\" = {} is not Llama 3's (rope_type \"llama3\"), the only "
           "scaling aiscale implements", source, s.dump());
    c.rope_scaling.factor = number_field(s, "factor", 1.0, 1e6, source);
    c.rope_scaling.low_freq_factor = number_field(s, "low_freq_factor", 0.0, 1e6, source);
    c.rope_scaling.high_freq_factor = number_field(s, "high_freq_factor", 0.0, 1e6, source);
    c.rope_scaling.original_context =
        int_field(s, "original_max_position_embeddings", 1, int64_t{1} << 24, source);
  }
  return c;
}

}  // namespace

nn::GptConfig checkpoint_model_from_json(const nlohmann::json& hf, const std::string& source) {
  if (!hf.is_object()) fail("'{}' is corrupt: not a JSON object", source);
  const bool llama = hf.contains("model_type") && hf.at("model_type") == "llama";
  nn::GptConfig c = llama ? llama_model_from_json(hf, source) : nn::GptConfig{};
  if (!llama) {
  // The same bounds as the model.* config keys.
  c.n_layer = int_field(hf, "n_layer", 1, 1024, source);
  c.n_head = int_field(hf, "n_head", 1, 1024, source);
  c.n_embd = int_field(hf, "n_embd", 1, 65536, source);
  c.block_size = int_field(hf, "n_positions", 1, int64_t{1} << 20, source);
  c.vocab_size = int_field(hf, "vocab_size", 2, int64_t{1} << 24, source);
  }
  try {
    c.validate();
  } catch (const Error& e) {
    fail("'{}' describes an impossible model: {}", source, e.what());
  }
  validate::buffer_bytes(static_cast<uint64_t>(c.num_params()), 16,
                         fmt::format("'{}' ({})", source, model_shape_text(c)));
  return c;
}

void checkpoint_state_from_json(const nlohmann::json& state, CheckpointState& s,
                                const std::string& source) {
  if (!state.is_object()) fail("'{}' is corrupt: not a JSON object", source);
  constexpr int64_t kMaxCount = int64_t{1} << 40;
  s.step = int_field(state, "step", 0, kMaxCount, source);
  s.data.epoch = int_field(state, "data_epoch", 0, kMaxCount, source);
  const auto& seed = state.contains("seed") ? state.at("seed") : nlohmann::json();
  if (!seed.is_number_integer() || (!seed.is_number_unsigned() && seed.get<int64_t>() < 0))
    fail("'{}' is corrupt: \"seed\" must be a non-negative integer", source);
  s.seed = seed.get<uint64_t>();
  s.world_size = static_cast<int>(int_field(state, "world_size", 1, 1 << 20, source));
  s.nonfinite_steps = state.contains("nonfinite_steps")
                          ? int_field(state, "nonfinite_steps", 0, kMaxCount, source)
                          : 0;
  if (!state.contains("config_toml") || !state.at("config_toml").is_string())
    fail("'{}' is corrupt: \"config_toml\" must be a string", source);
  s.config_toml = state.at("config_toml").get<std::string>();
  if (state.contains("data_sample")) {
    s.data.sample = int_field(state, "data_sample", 0, kMaxCount, source);
    s.tensor_parallel = int_field(state, "tensor_parallel", 1, 1 << 20, source);
    s.pipeline_parallel = int_field(state, "pipeline_parallel", 1, 1 << 20, source);
    s.zero_stage = int_field(state, "zero_stage", 0, 3, source);
    s.batch_size = int_field(state, "batch_size", 1, kMaxCount, source);
    s.grad_accum = int_field(state, "grad_accum", 1, kMaxCount, source);
    s.seq_len = int_field(state, "seq_len", 1, kMaxCount, source);
    s.position_converted = false;
  } else {
    read_legacy_position(s, int_field(state, "data_index", 0, kMaxCount, source), source);
  }
  const int64_t n = int_field(state, "n_params", 1, int64_t{1} << 40, source);
  if (n != s.model.num_params())
    fail("'{}' says the checkpoint holds {} parameters, but its config.json describes a model "
         "of {} ({}): the checkpoint is corrupt or mixed from two runs; resume from another",
         source, n, s.model.num_params(), model_shape_text(s.model));
}

std::string model_shape_text(const nn::GptConfig& c) {
  std::string text = fmt::format("n_layer={} n_head={} n_embd={} block_size={} vocab_size={}",
                                 c.n_layer, c.n_head, c.n_embd, c.block_size, c.vocab_size);
  if (c.llama())
    text = fmt::format("family=llama {} n_kv_head={} ffn_hidden={} tie_embeddings={} "
                       "rope_theta={} rope_scaling_factor={} norm_eps={}",
                       text, c.kv_heads(), c.ffn(), c.tie_embeddings, c.rope_theta,
                       c.rope_scaling.factor, c.norm_eps);
  return text;
}

void check_checkpoint_model(const nn::GptConfig& found, const nn::GptConfig& expected,
                            const std::string& where) {
  // The text names every field that changes the model (the family's among them).
  if (model_shape_text(found) == model_shape_text(expected) &&
      found.rope_scaling.low_freq_factor == expected.rope_scaling.low_freq_factor &&
      found.rope_scaling.high_freq_factor == expected.rope_scaling.high_freq_factor &&
      found.rope_scaling.original_context == expected.rope_scaling.original_context)
    return;
  fail("checkpoint '{}' is of another model than the config: the checkpoint has {}, the config "
       "{}; resume with the run's own config.toml, or set the model.* keys to the checkpoint's",
       where, model_shape_text(found), model_shape_text(expected));
}

}  // namespace aiscale::train
