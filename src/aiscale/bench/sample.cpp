#include "aiscale/bench/sample.h"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "aiscale/core/build_info.h"
#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/core/rng.h"
#include "aiscale/core/stats.h"
#include "aiscale/core/timer.h"
#include "aiscale/nn/models/gpt.h"
#include "aiscale/nn/models/gpt_decoder.h"
#include "aiscale/profile/device_info.h"

namespace aiscale::bench {
namespace {

// The most likely token of each stream's logits: decoding goes on from it, as greedy
// sampling does (its cost, a pass over the vocabulary per stream, is part of a step; the
// streams over the cores, as `aiscale sample` picks them).
void argmax_rows(const std::vector<float>& logits, int64_t S, int64_t V, std::vector<int32_t>& out) {
#pragma omp parallel for if (S > 1)
  for (int64_t s = 0; s < S; ++s) {
    const float* row = logits.data() + s * V;
    out[size_t(s)] = static_cast<int32_t>(std::max_element(row, row + V) - row);
  }
}

}  // namespace

nlohmann::json run_sample_bench(const SampleBenchOptions& o) {
  const nn::GptConfig c = nn::gpt_preset(o.model);
  const int64_t context = o.context > 0 ? o.context : c.block_size;
  if (o.prompt_len + o.warmup + o.tokens > context)
    fail("--prompt-len {} + --warmup {} + --tokens {} = {} positions do not fit the window of {} "
         "(--context, at most the model's block_size {}): lower them",
         o.prompt_len, o.warmup, o.tokens, o.prompt_len + o.warmup + o.tokens, context,
         c.block_size);
  const int64_t S = o.streams, V = c.vocab_size, P = o.prompt_len;
  nn::GptDecoderOptions d;
  d.streams = S;
  d.context = context;
  auto dec = nn::make_gpt_decoder(o.device, c, d);
  dec->set_params(nn::gpt_init_params(c, o.seed).data());

  Rng rng(o.seed + 1);
  std::vector<int32_t> prompts(static_cast<size_t>(S * P)), next(static_cast<size_t>(S));
  for (int32_t& t : prompts) t = static_cast<int32_t>(rng.below(uint64_t(V)));
  std::vector<int64_t> prompt_counts(static_cast<size_t>(S), P), ones(static_cast<size_t>(S), 1);
  std::vector<float> logits(static_cast<size_t>(S * V));

  // Untimed: a prefill and the warm-up steps (first use of the buffers, BLAS's threads).
  dec->feed(prompts.data(), prompt_counts.data(), logits.data());
  for (int64_t i = 0; i < o.warmup; ++i) {
    argmax_rows(logits, S, V, next);
    dec->feed(next.data(), ones.data(), logits.data());
  }
  dec->reset_all();

  Timer timer;
  dec->feed(prompts.data(), prompt_counts.data(), logits.data());
  const double prefill_s = timer.seconds();
  std::vector<double> steps;
  for (int64_t i = 0; i < o.tokens; ++i) {
    timer.reset();
    argmax_rows(logits, S, V, next);
    dec->feed(next.data(), ones.data(), logits.data());
    steps.push_back(timer.seconds());
  }
  double decode_s = 0.0;
  for (double t : steps) decode_s += t;

  nlohmann::json j;
  j["benchmark"] = "sample";
  j["model"] = o.model;
  j["n_params"] = c.num_params();
  j["n_layer"] = c.n_layer;
  j["n_head"] = c.n_head;
  j["n_embd"] = c.n_embd;
  j["vocab_size"] = c.vocab_size;
  j["streams"] = S;
  j["prompt_len"] = P;
  j["tokens"] = o.tokens;
  j["context"] = context;
  const bool cpu = o.device == "cpu";
  j["device_kind"] = cpu ? "cpu" : "gpu";
  j["device"] = cpu ? cpu_model_name() : dec->device_name();
  if (cpu) j["threads"] = omp_get_max_threads();
  // The CPU decoder computes in fp32; the GPU decoder holds bf16 weights and cache.
  j["precision"] = cpu ? "fp32" : "bf16";
  j["prefill_s"] = prefill_s;
  j["prefill_tokens_per_s"] = double(S * P) / prefill_s;
  j["decode_s"] = decode_s;
  j["decode_tokens_per_s"] = double(S * o.tokens) / decode_s;
  j["decode_tokens_per_s_per_stream"] = double(o.tokens) / decode_s;
  j["decode_step_median_s"] = median(steps);
  j["decode_step_p90_s"] = percentile(steps, 0.9);
  // A step reads every weight once: the rate it streams them at, against the memory's.
  j["decode_weight_gb_per_s"] = double(c.num_params()) * 4.0 / median(steps) / 1e9;
  j["memory_bytes"] = dec->memory_bytes();
  j["cache_bytes"] = dec->cache_bytes();
  j["peak_memory_bytes"] = profile::peak_rss_bytes();
  j["host"] = host_name();
  j["date"] = utc_iso8601();
  j["aiscale_version"] = build_info().version;
  j["git_commit"] = build_info().git_commit;
  return j;
}

}  // namespace aiscale::bench
