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
}

int64_t GptConfig::num_params() const {
  const int64_t C = n_embd;
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
const Preset kPresets[] = {
    {"gpt2-124m", {12, 12, 768, 1024, 50257}},
    {"gpt2-350m", {24, 16, 1024, 1024, 50257}},
    {"gpt2-774m", {36, 20, 1280, 1024, 50257}},
    {"gpt2-1558m", {48, 25, 1600, 1024, 50257}},
    // Small models for CPUs, tests and the quick start.
    {"gpt-mini", {4, 4, 256, 128, 50257}},
    {"gpt-tiny", {2, 2, 64, 64, 256}},
};
}  // namespace

GptConfig gpt_preset(std::string_view name) {
  for (const auto& p : kPresets)
    if (name == p.name) return p.config;
  std::string known;
  for (const auto& p : kPresets) known += std::string(known.empty() ? "" : ", ") + p.name;
  fail("unknown model preset '{}': known presets are {}", name, known);
}

std::vector<std::string> gpt_preset_names() {
  std::vector<std::string> out;
  for (const auto& p : kPresets) out.emplace_back(p.name);
  return out;
}

double gpt_train_flops_per_token(const GptConfig& c, int64_t seq_len) {
  return 6.0 * static_cast<double>(c.num_params()) +
         12.0 * static_cast<double>(c.n_layer) * static_cast<double>(c.n_embd) *
             static_cast<double>(seq_len);
}

}  // namespace aiscale::nn
