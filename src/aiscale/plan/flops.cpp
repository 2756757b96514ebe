#include "aiscale/plan/flops.h"

#include <cmath>

#include <fmt/format.h>

#include "aiscale/core/error.h"
#include "aiscale/plan/units.h"

namespace aiscale::plan {

LinearWidths linear_widths(const nn::GptConfig& g) {
  LinearWidths w;
  w.d = static_cast<double>(g.n_embd);
  w.f = static_cast<double>(g.ffn());
  w.qkv = static_cast<double>(g.qkv_rows());
  w.up = g.llama() ? 2.0 * w.f : w.f;
  return w;
}

TransformerOpFlops transformer_op_flops(const nn::GptConfig& g, int64_t seq_len) {
  const double d = static_cast<double>(g.n_embd);
  TransformerOpFlops f;
  f.qkv = 2.0 * d * static_cast<double>(g.qkv_rows());
  f.attention = 4.0 * static_cast<double>(seq_len) * d;
  f.out = 2.0 * d * d;
  f.mlp = 2.0 * d * static_cast<double>(g.fc_rows() + g.ffn());
  f.head = 2.0 * static_cast<double>(g.vocab_size) * d;
  return f;
}

ComputeEstimate transformer_training_flops(const Workload& w, double tokens) {
  if (!w.is_transformer()) fail("model '{}' is not a transformer: give images and epochs", w.name);
  if (!(tokens > 0)) fail("--tokens must be positive (got {}): e.g. --tokens 10e9", tokens);
  const auto& g = w.gpt;
  // The engine's one formula (nn/models/gpt_config.h gpt_train_flops_per_token); its two
  // terms are taken apart here for the worked line: attention's 12·L·d·T, and 6·N for the
  // rest, N the parameters it multiplies (GPT-2: all of them; Llama: all but an untied
  // input embedding, which is a lookup).
  const double per_token = nn::gpt_train_flops_per_token(g, w.seq_len);
  const double attention_per_token = 12.0 * g.n_layer * g.n_embd * static_cast<double>(w.seq_len);
  const double n = (per_token - attention_per_token) / 6.0;
  const double dense = 6.0 * n * tokens;
  const double attention = attention_per_token * tokens;
  ComputeEstimate e;
  e.flops = per_token * tokens;
  e.flops_per_sample = per_token;
  e.samples = tokens;
  e.formula = "6·N·D + 12·L·d·T·D";
  const int64_t n_exact = static_cast<int64_t>(std::llround(n));
  e.substituted = fmt::format("6 × {} × {} + 12 × {} × {} × {} × {} = {} + {} = {} FLOP{}",
                              with_commas(n_exact), sci(tokens), g.n_layer, g.n_embd,
                              w.seq_len, sci(tokens), sci(dense), sci(attention), sci(e.flops),
                              n_exact != w.params()
                                  ? " (N: the parameters multiplied, the untied input "
                                    "embedding being a lookup)"
                                  : "");
  return e;
}

ComputeEstimate cnn_training_flops(double macs, double images, double epochs) {
  if (!(images > 0)) fail("--images must be positive (got {})", images);
  if (!(epochs > 0)) fail("--epochs must be positive (got {})", epochs);
  ComputeEstimate e;
  e.flops = macs * 2.0 * 3.0 * images * epochs;
  e.flops_per_sample = macs * 6.0;
  e.samples = images * epochs;
  e.formula = "MACs × 2 × 3 × samples × epochs";
  e.substituted = fmt::format("{} × 2 × 3 × {} × {} = {} FLOP", sci(macs),
                              with_commas(static_cast<int64_t>(images)), epochs, sci(e.flops));
  return e;
}

ComputeEstimate training_flops(const Workload& w, double tokens, double images, double epochs) {
  if (w.is_transformer()) return transformer_training_flops(w, tokens);
  return cnn_training_flops(w.cnn.macs_per_sample, images, epochs);
}

GpuHours ideal_gpu_hours(double flops, double peak, double u) {
  if (!(peak > 0) || !(u > 0)) fail("GPU-hours need a positive peak and utilisation");
  GpuHours h;
  h.hours = flops / (peak * u) / 3600.0;
  h.substituted = fmt::format("{} / ({:.1f} TFLOP/s × {:.0f}%) / 3600 = {} GPU-hours", sci(flops),
                              peak / 1e12, u * 100.0, with_commas(static_cast<int64_t>(h.hours + 0.5)));
  return h;
}

}  // namespace aiscale::plan
