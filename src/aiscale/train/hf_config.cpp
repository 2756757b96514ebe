#include "aiscale/train/hf_config.h"

#include <cmath>
#include <optional>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "aiscale/core/error.h"

namespace aiscale::train {
namespace {

nlohmann::ordered_json gpt2_json(const nn::GptConfig& c) {
  return {{"architectures", {"GPT2LMHeadModel"}},
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
}

nlohmann::ordered_json llama_json(const nn::GptConfig& c) {
  nlohmann::ordered_json scaling;  // null: no scaling
  if (c.rope_scaling.enabled())
    scaling = {{"rope_type", "llama3"},
               {"factor", c.rope_scaling.factor},
               {"low_freq_factor", c.rope_scaling.low_freq_factor},
               {"high_freq_factor", c.rope_scaling.high_freq_factor},
               {"original_max_position_embeddings", c.rope_scaling.original_context}};
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"vocab_size", c.vocab_size},
          {"hidden_size", c.n_embd},
          {"intermediate_size", c.ffn()},
          {"num_hidden_layers", c.n_layer},
          {"num_attention_heads", c.n_head},
          {"num_key_value_heads", c.kv_heads()},
          {"head_dim", c.head_size()},
          {"hidden_act", "silu"},
          {"max_position_embeddings", c.block_size},
          {"rms_norm_eps", c.norm_eps},
          {"rope_theta", c.rope_theta},
          {"rope_scaling", scaling},
          {"attention_bias", false},
          {"mlp_bias", false},
          {"tie_word_embeddings", c.tied()},
          {"torch_dtype", "float32"}};
}

// What a check finds: fields that differ from the model (with the --set that matches the
// checkpoint), fields that are missing or of the wrong type, variants aiscale does not train.
struct Findings {
  std::vector<std::string> differ, sets, broken, variants;
};

std::string number_text(double v) { return fmt::format("{}", v); }

bool same_real(double a, double b) { return std::fabs(a - b) <= 1e-9 * std::max(std::fabs(a), std::fabs(b)); }

void compare_int(const nlohmann::json& j, const char* hf, const char* key, int64_t ours, Findings& f,
                 std::optional<int64_t> fallback = std::nullopt) {
  int64_t v = 0;
  if (j.contains(hf) && j.at(hf).is_number_integer()) {
    v = j.at(hf).get<int64_t>();
  } else if (!j.contains(hf) && fallback) {
    v = *fallback;
  } else {
    f.broken.push_back(fmt::format("\"{}\" is {} (an integer is needed)", hf,
                                   j.contains(hf) ? j.at(hf).dump() : "missing"));
    return;
  }
  if (v == ours) return;
  f.differ.push_back(fmt::format("{} = {}, the model's {} = {}", hf, v, key, ours));
  f.sets.push_back(fmt::format("{}={}", key, v));
}

void compare_real(const nlohmann::json& j, const char* hf, const char* key, double ours,
                  double fallback, Findings& f, const std::string& where = "") {
  double v = fallback;
  if (j.contains(hf)) {
    if (!j.at(hf).is_number()) {
      f.broken.push_back(fmt::format("\"{}{}\" is {} (a number is needed)", where, hf, j.at(hf).dump()));
      return;
    }
    v = j.at(hf).get<double>();
  }
  if (same_real(v, ours)) return;
  f.differ.push_back(fmt::format("{}{} = {}, the model's {} = {}", where, hf, number_text(v), key,
                                 number_text(ours)));
  f.sets.push_back(fmt::format("{}={}", key, number_text(v)));
}

void compare_bool(const nlohmann::json& j, const char* hf, const char* key, bool ours, bool fallback,
                  Findings& f) {
  bool v = fallback;
  if (j.contains(hf)) {
    if (!j.at(hf).is_boolean()) {
      f.broken.push_back(fmt::format("\"{}\" is {} (true or false is needed)", hf, j.at(hf).dump()));
      return;
    }
    v = j.at(hf).get<bool>();
  }
  if (v == ours) return;
  f.differ.push_back(fmt::format("{} = {}, the model's {} = {}", hf, v, key, ours));
  f.sets.push_back(fmt::format("{}={}", key, v));
}

void check_gpt2(const nlohmann::json& j, const nn::GptConfig& m, Findings& f) {
  compare_int(j, "n_layer", "model.n_layer", m.n_layer, f);
  compare_int(j, "n_head", "model.n_head", m.n_head, f);
  compare_int(j, "n_embd", "model.n_embd", m.n_embd, f);
  compare_int(j, "n_positions", "model.block_size", m.block_size, f);
  compare_int(j, "vocab_size", "model.vocab_size", m.vocab_size, f);
  const auto text = [&](const char* key) { return j.at(key).dump(); };
  if (j.contains("activation_function")) {
    const auto& a = j.at("activation_function");
    if (!a.is_string() || (a != "gelu_new" && a != "gelu_pytorch_tanh" && a != "gelu_fast"))
      f.variants.push_back(fmt::format("activation_function = {} (aiscale's GPT-2 uses the tanh "
                                       "GELU, \"gelu_new\")", text("activation_function")));
  }
  if (j.contains("n_inner") && !j.at("n_inner").is_null() &&
      !(j.at("n_inner").is_number_integer() && j.at("n_inner").get<int64_t>() == 4 * m.n_embd))
    f.variants.push_back(fmt::format("n_inner = {} (aiscale's GPT-2 MLP is 4 x n_embd = {})",
                                     text("n_inner"), 4 * m.n_embd));
  if (j.contains("layer_norm_epsilon") &&
      !(j.at("layer_norm_epsilon").is_number() && same_real(j.at("layer_norm_epsilon").get<double>(), 1e-5)))
    f.variants.push_back(fmt::format("layer_norm_epsilon = {} (aiscale's LayerNorm uses 1e-05)",
                                     text("layer_norm_epsilon")));
  const auto flag_is = [&](const char* key, bool want) {
    return !j.contains(key) || (j.at(key).is_boolean() && j.at(key).get<bool>() == want);
  };
  if (!flag_is("tie_word_embeddings", true))
    f.variants.push_back("tie_word_embeddings = false (aiscale's GPT-2 ties the LM head to wte)");
  if (!flag_is("scale_attn_weights", true))
    f.variants.push_back("scale_attn_weights = false (aiscale scales attention by 1/sqrt(head size))");
  if (!flag_is("scale_attn_by_inverse_layer_idx", false))
    f.variants.push_back("scale_attn_by_inverse_layer_idx = true (aiscale does not scale by layer)");
}

void check_llama(const nlohmann::json& j, const nn::GptConfig& m, Findings& f) {
  compare_int(j, "num_hidden_layers", "model.n_layer", m.n_layer, f);
  compare_int(j, "num_attention_heads", "model.n_head", m.n_head, f);
  // Absent: one key/value head per query head (LlamaConfig's default).
  std::optional<int64_t> heads;
  if (j.contains("num_attention_heads") && j.at("num_attention_heads").is_number_integer())
    heads = j.at("num_attention_heads").get<int64_t>();
  compare_int(j, "num_key_value_heads", "model.n_kv_head", m.kv_heads(), f, heads);
  compare_int(j, "hidden_size", "model.n_embd", m.n_embd, f);
  compare_int(j, "intermediate_size", "model.ffn_hidden", m.ffn(), f);
  compare_int(j, "vocab_size", "model.vocab_size", m.vocab_size, f);
  // LlamaConfig's defaults for the fields a config.json may leave out.
  compare_bool(j, "tie_word_embeddings", "model.tie_embeddings", m.tied(), false, f);
  compare_real(j, "rms_norm_eps", "model.norm_eps", m.norm_eps, 1e-6, f);
  compare_real(j, "rope_theta", "model.rope_theta", m.rope_theta, 10000.0, f);
  const nlohmann::json none = nlohmann::json::object();
  const nlohmann::json& rs = j.contains("rope_scaling") && !j.at("rope_scaling").is_null() ? j.at("rope_scaling") : none;
  if (!rs.is_object()) {
    f.broken.push_back(fmt::format("\"rope_scaling\" is {} (an object or null is needed)", rs.dump()));
  } else if (rs.empty()) {
    if (m.rope_scaling.enabled()) {
      f.differ.push_back(fmt::format("rope_scaling = null, the model's model.rope_scaling_factor = {}",
                                     number_text(m.rope_scaling.factor)));
      f.sets.push_back("model.rope_scaling_factor=0");
    }
  } else {
    const std::string type = rs.value("rope_type", rs.value("type", std::string("?")));
    if (type != "llama3") {
      f.variants.push_back(fmt::format("rope_scaling of rope_type \"{}\" (aiscale scales rotary "
                                       "frequencies as Llama 3 does, rope_type \"llama3\", or not at all)", type));
    } else {
      compare_real(rs, "factor", "model.rope_scaling_factor", m.rope_scaling.factor, 0.0, f, "rope_scaling.");
      compare_real(rs, "low_freq_factor", "model.rope_low_freq_factor", m.rope_scaling.low_freq_factor, 1.0, f, "rope_scaling.");
      compare_real(rs, "high_freq_factor", "model.rope_high_freq_factor", m.rope_scaling.high_freq_factor, 4.0, f, "rope_scaling.");
      compare_int(rs, "original_max_position_embeddings", "model.rope_original_context",
                  m.rope_scaling.original_context, f);
    }
  }
  if (j.contains("hidden_act") && j.at("hidden_act") != "silu")
    f.variants.push_back(fmt::format("hidden_act = {} (aiscale's SwiGLU uses silu)", j.at("hidden_act").dump()));
  for (const char* bias : {"attention_bias", "mlp_bias"})
    if (j.contains(bias) && j.at(bias) != false)
      f.variants.push_back(fmt::format("{} = {} (aiscale's Llama has no biases)", bias, j.at(bias).dump()));
  if (j.contains("head_dim") && !j.at("head_dim").is_null() &&
      !(j.at("head_dim").is_number_integer() && j.at("head_dim").get<int64_t>() == m.head_size()))
    f.variants.push_back(fmt::format("head_dim = {} (aiscale's head size is hidden_size / "
                                     "num_attention_heads = {})", j.at("head_dim").dump(), m.head_size()));
}

// The model the checkpoint describes where only the fields that differ are taken from it.
bool preset_matches(const nn::GptConfig& p, const nn::GptConfig& m, const std::vector<std::string>& sets) {
  // Each --set is "model.key=value": apply them to the model and compare with the preset.
  nn::GptConfig t = m;
  for (const auto& s : sets) {
    const std::string key = s.substr(0, s.find('=')), v = s.substr(s.find('=') + 1);
    if (key == "model.n_layer") t.n_layer = std::stoll(v);
    else if (key == "model.n_head") t.n_head = std::stoll(v);
    else if (key == "model.n_embd") t.n_embd = std::stoll(v);
    else if (key == "model.block_size") t.block_size = std::stoll(v);
    else if (key == "model.vocab_size") t.vocab_size = std::stoll(v);
    else if (key == "model.n_kv_head") t.n_kv_head = std::stoll(v);
    else if (key == "model.ffn_hidden") t.ffn_hidden = std::stoll(v);
    else if (key == "model.tie_embeddings") t.tie_embeddings = v == "true";
    else if (key == "model.norm_eps") t.norm_eps = std::stod(v);
    else if (key == "model.rope_theta") t.rope_theta = std::stod(v);
    else if (key == "model.rope_scaling_factor") t.rope_scaling.factor = std::stod(v);
    else if (key == "model.rope_low_freq_factor") t.rope_scaling.low_freq_factor = std::stod(v);
    else if (key == "model.rope_high_freq_factor") t.rope_scaling.high_freq_factor = std::stod(v);
    else if (key == "model.rope_original_context") t.rope_scaling.original_context = std::stoll(v);
  }
  if (p.family != t.family || p.n_layer != t.n_layer || p.n_head != t.n_head || p.n_embd != t.n_embd ||
      p.vocab_size != t.vocab_size || p.kv_heads() != t.kv_heads() || p.ffn() != t.ffn() ||
      p.tied() != t.tied())
    return false;
  if (!t.llama()) return p.block_size == t.block_size;
  return same_real(p.norm_eps, t.norm_eps) && same_real(p.rope_theta, t.rope_theta) &&
         same_real(p.rope_scaling.factor, t.rope_scaling.factor) &&
         (!p.rope_scaling.enabled() ||
          (same_real(p.rope_scaling.low_freq_factor, t.rope_scaling.low_freq_factor) &&
           same_real(p.rope_scaling.high_freq_factor, t.rope_scaling.high_freq_factor) &&
           p.rope_scaling.original_context == t.rope_scaling.original_context));
}

}  // namespace

std::string hf_config_json(const nn::GptConfig& c) {
  return (c.llama() ? llama_json(c) : gpt2_json(c)).dump(2) + "\n";
}

void check_hf_config(const nlohmann::json& j, const nn::GptConfig& model, const std::string& path) {
  if (!j.is_object()) fail("'{}' is not a model configuration: it is not a JSON object", path);
  const std::string family = nn::to_string(model.family);
  // GPT-2's config.json of old saves has no model_type.
  const std::string type = j.contains("model_type") && j.at("model_type").is_string()
                               ? j.at("model_type").get<std::string>()
                               : (j.contains("n_layer") ? "gpt2" : "?");
  if (type != family) {
    const bool known = type == "gpt2" || type == "llama";
    fail("'{}' describes a {} model (model_type \"{}\"); this run trains the {} family: {}", path,
         type, type, family,
         known ? fmt::format("set model.family = \"{}\" and its shape (a {} preset, or the model "
                             "keys), or give a {} checkpoint", type, type, family)
               : fmt::format("give a {} checkpoint (aiscale trains model_type gpt2 and llama)", family));
  }
  Findings f;
  if (model.llama()) check_llama(j, model, f);
  else check_gpt2(j, model, f);
  if (!f.broken.empty())
    fail("'{}' is not a valid {} config.json: {}; give the folder of a {} checkpoint", path, type,
         fmt::join(f.broken, "; "), family);
  if (!f.differ.empty()) {
    std::string fix = fmt::format("set the model to the checkpoint's: --set {}", fmt::join(f.sets, " "));
    for (const auto& name : nn::gpt_preset_names())
      if (preset_matches(nn::gpt_preset(name), model, f.sets)) {
        fix += fmt::format(" (or model.preset = \"{}\", which is that shape)", name);
        break;
      }
    fail("'{}' does not describe the model being trained: {}; {}", path, fmt::join(f.differ, "; "), fix);
  }
  if (!f.variants.empty())
    fail("'{}' describes a {} variant aiscale does not train: {}; its weights would compute "
         "another function here: give a checkpoint of the standard architecture", path, type,
         fmt::join(f.variants, "; "));
}

}  // namespace aiscale::train
