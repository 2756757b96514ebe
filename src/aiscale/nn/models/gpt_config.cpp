#include "aiscale/nn/models/gpt_config.h"

#include <fmt/format.h>

#include "aiscale/core/error.h"

namespace aiscale::nn {

void GptConfig::validate() const {
  if (n_layer < 1) fail("model.n_layer = {} is invalid: it must be at least 1", n_layer);
  if (n_head < 1) fail("model.n_head = {} is invalid: it must be at least 1", n_head);
  if (n_embd < 1) fail("model.n_embd = {} is invalid: it must be at least 1", n_embd);
  if (n_embd % n_head != 0)
    fail("model.n_embd = {} is not divisible by model.n_head = {}: choose a width that is a "
         "multiple of the head count", n_embd, n_head);
  if (block_size < 1) fail("model.block_size = {} is invalid: it must be at least 1", block_size);
  if (vocab_size < 2) fail("model.vocab_size = {} is invalid: it must be at least 2", vocab_size);
  if (!llama()) {
    if (n_kv_head != 0 && n_kv_head != n_head)
      fail("model.n_kv_head = {} needs model.family = \"llama\": GPT-2 attention has one key/value "
           "head per query head (leave n_kv_head at 0)", n_kv_head);
    if (ffn_hidden != 0 && ffn_hidden != 4 * n_embd)
      fail("model.ffn_hidden = {} needs model.family = \"llama\": GPT-2's MLP is 4 x n_embd = {} "
           "wide (leave ffn_hidden at 0)", ffn_hidden, 4 * n_embd);
    if (!tie_embeddings)
      fail("model.tie_embeddings = false needs model.family = \"llama\": GPT-2's LM head is its "
           "token embedding");
    if (rope_scaling.enabled())
      fail("model.rope_scaling_factor = {} needs model.family = \"llama\": GPT-2 learns its "
           "positions", rope_scaling.factor);
    return;
  }
  if (n_kv_head < 0 || kv_heads() > n_head || n_head % kv_heads() != 0)
    fail("model.n_kv_head = {} must divide model.n_head = {} (each key/value head serves "
         "n_head / n_kv_head query heads)", n_kv_head, n_head);
  if (head_size() % 2 != 0)
    fail("model.n_embd / model.n_head = {} is odd: rotary positions rotate pairs of channels, "
         "so the head size must be even", head_size());
  if (ffn_hidden < 0) fail("model.ffn_hidden = {} must be positive (0: 4 x n_embd)", ffn_hidden);
  if (!(rope_theta > 1.0))
    fail("model.rope_theta = {} must be greater than 1 (Llama 2: 10000, Llama 3: 500000)", rope_theta);
  if (!(norm_eps > 0.0) || norm_eps > 1.0)
    fail("model.norm_eps = {} must be in (0, 1] (Llama: 1e-5 or 1e-6)", norm_eps);
  if (rope_scaling.enabled()) {
    if (!(rope_scaling.factor >= 1.0))
      fail("model.rope_scaling_factor = {} must be at least 1 (0: no scaling)", rope_scaling.factor);
    if (!(rope_scaling.high_freq_factor > rope_scaling.low_freq_factor) ||
        !(rope_scaling.low_freq_factor > 0.0))
      fail("model.rope_high_freq_factor = {} must exceed model.rope_low_freq_factor = {} > 0 "
           "(Llama 3: 4 and 1)", rope_scaling.high_freq_factor, rope_scaling.low_freq_factor);
    if (rope_scaling.original_context < 1)
      fail("model.rope_original_context = {} must be positive (Llama 3: 8192)",
           rope_scaling.original_context);
  }
}

GptFamily parse_gpt_family(std::string_view name) {
  if (name == "gpt2") return GptFamily::gpt2;
  if (name == "llama") return GptFamily::llama;
  fail("model.family = \"{}\" is unknown: choose gpt2 or llama", name);
}

const char* to_string(GptFamily f) { return f == GptFamily::llama ? "llama" : "gpt2"; }

int64_t GptConfig::num_params() const {
  const int64_t C = n_embd;
  if (llama()) {
    const int64_t per_layer = C                    // input_layernorm
                              + qkv_rows() * C     // q, k, v projections
                              + C * C              // o_proj
                              + C                  // post_attention_layernorm
                              + 3 * ffn() * C;     // gate, up, down
    return vocab_size * C * (tied() ? 1 : 2) + n_layer * per_layer + C;
  }
  int64_t per_layer = 2 * C            // ln_1
                      + 3 * C * C + 3 * C  // c_attn
                      + C * C + C          // attn c_proj
                      + 2 * C              // ln_2
                      + 4 * C * C + 4 * C  // c_fc
                      + 4 * C * C + C;     // mlp c_proj
  return vocab_size * C + block_size * C + n_layer * per_layer + 2 * C;
}

namespace {
struct Preset {
  const char* name;
  GptConfig config;
};
// A GPT-2-family shape.
GptConfig gpt2(int64_t layers, int64_t heads, int64_t width, int64_t context, int64_t vocab) {
  GptConfig c;
  c.n_layer = layers, c.n_head = heads, c.n_embd = width, c.block_size = context, c.vocab_size = vocab;
  return c;
}
// A Llama-family shape (no biases, RMSNorm epsilon 1e-5).
GptConfig llama(int64_t layers, int64_t heads, int64_t kv_heads, int64_t width, int64_t ffn,
                int64_t context, int64_t vocab, bool tied, double theta, RopeScaling scaling) {
  GptConfig c = gpt2(layers, heads, width, context, vocab);
  c.family = GptFamily::llama;
  c.n_kv_head = kv_heads, c.ffn_hidden = ffn, c.tie_embeddings = tied;
  c.rope_theta = theta, c.rope_scaling = scaling, c.norm_eps = 1e-5;
  return c;
}
constexpr RopeScaling kLlama3Scaling32{32.0, 1.0, 4.0, 8192};
constexpr RopeScaling kLlama3Scaling8{8.0, 1.0, 4.0, 8192};
// Built on first use (function-local), so that code running during static initialisation
// (a default TrainConfig) finds them.
const std::vector<Preset>& presets() {
  static const std::vector<Preset> kPresets = {
    {"gpt2-124m", gpt2(12, 12, 768, 1024, 50257)},
    {"gpt2-350m", gpt2(24, 16, 1024, 1024, 50257)},
    {"gpt2-774m", gpt2(36, 20, 1280, 1024, 50257)},
    {"gpt2-1558m", gpt2(48, 25, 1600, 1024, 50257)},
    // Larger members of the GPT-2 family (head size 64, the GPT-2 vocabulary and context):
    // 2.7B = 60 layers x 1920 (30 heads), 2,754,168,960 parameters; 6.6B = 84 layers x 2560
    // (40 heads), 6,740,108,800 parameters.
    {"gpt2-2.7b", gpt2(60, 30, 1920, 1024, 50257)},
    {"gpt2-6.6b", gpt2(84, 40, 2560, 1024, 50257)},
    // The ~857M single-GPU model: of GPT-2/GPT-3-style shapes (head size 64 or 128, width a
    // multiple of 128, width/layers between 32 and 128) with the tied 50257 vocabulary and
    // 1024 positions, 33 layers x 1408 (22 heads of 64) is the closest to 857M
    // (857,866,240, +0.10%); tests/plan/workload_test.cpp repeats the search.
    {"gpt-857m", gpt2(33, 22, 1408, 1024, 50257)},
    // GPT-3 175B (Brown et al. 2020, table 2.1): 96 layers, 96 heads of 128, width 12288,
    // context 2048; 174,604,259,328 parameters with the GPT-2 vocabulary. Train it at
    // reduced depth in tests (model.n_layer).
    {"gpt3-175b", gpt2(96, 96, 12288, 2048, 50257)},
    // Small models for CPUs, tests and the quick start.
    {"gpt-mini", gpt2(4, 4, 256, 128, 50257)},
    {"gpt-tiny", gpt2(2, 2, 64, 64, 256)},
    // The Llama family. Shapes of Llama 3 (Meta's Llama 3.2 1B and 3B, Llama 3.1 8B model
    // cards and their config.json files): no weights ship; --init-from loads a checkpoint.
    // 1B: 16 layers x 2048, 32 heads, 8 KV heads, MLP 8192, tied, 1,235,814,400 parameters;
    // 3B: 28 x 3072, 24 heads, 8 KV, 8192, tied; 8B: 32 x 4096, 32 heads, 8 KV, 14336,
    // untied. Vocabulary 128256, rope theta 500000 with Llama 3's scaling (factor 32 for
    // 1B/3B, 8 for 8B; 1 and 4; 8192), RMSNorm epsilon 1e-5, context 131072.
    {"llama3-1b-shape", llama(16, 32, 8, 2048, 8192, 131072, 128256, true, 500000.0, kLlama3Scaling32)},
    {"llama3-3b-shape", llama(28, 24, 8, 3072, 8192, 131072, 128256, true, 500000.0, kLlama3Scaling32)},
    {"llama3-8b-shape", llama(32, 32, 8, 4096, 14336, 131072, 128256, false, 500000.0, kLlama3Scaling8)},
    // Small Llama-family models for CPUs and tests: llama-mini reads GPT-2-tokenized data
    // (the quick start's fortunes), llama-tiny byte data; both split over 2 tensor ranks.
    {"llama-mini", llama(4, 8, 2, 256, 688, 128, 50257, false, 10000.0, {})},
    {"llama-tiny", llama(2, 4, 2, 64, 176, 64, 256, false, 10000.0, {})},
};
  return kPresets;
}
}  // namespace

GptConfig gpt_preset(std::string_view name) {
  for (const auto& p : presets())
    if (name == p.name) return p.config;
  std::string known;
  for (const auto& p : presets()) known += std::string(known.empty() ? "" : ", ") + p.name;
  fail("unknown model preset '{}': known presets are {}", name, known);
}

std::vector<std::string> gpt_preset_names() {
  std::vector<std::string> out;
  for (const auto& p : presets()) out.emplace_back(p.name);
  return out;
}

double gpt_train_flops_per_token(const GptConfig& c, int64_t seq_len) {
  const int64_t lookup = c.llama() && !c.tied() ? c.vocab_size * c.n_embd : 0;
  return 6.0 * static_cast<double>(c.num_params() - lookup) +
         12.0 * static_cast<double>(c.n_layer) * static_cast<double>(c.n_embd) *
             static_cast<double>(seq_len);
}

}  // namespace aiscale::nn
