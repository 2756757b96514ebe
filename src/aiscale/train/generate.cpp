#include "aiscale/train/generate.h"

#include <omp.h>

#include <algorithm>
#include <span>

#include "aiscale/core/enum_names.h"
#include "aiscale/core/error.h"
#include "aiscale/core/rng.h"
#include "aiscale/core/timer.h"
#include "aiscale/data/tokenizer.h"
#include "aiscale/nn/models/gpt_decoder.h"

namespace aiscale::train {

const char* stop_reason_name(StopReason r) {
  static constexpr EnumName<StopReason> reasons[] = {{StopReason::length, "length"},
                                                     {StopReason::end_of_text, "end_of_text"},
                                                     {StopReason::stop_sequence, "stop_sequence"}};
  return enum_name(reasons, r);
}

int64_t slide_keep(int64_t context) { return std::max<int64_t>(1, context / 2); }

uint64_t stream_seed(uint64_t seed, int64_t stream) {
  // Rng seeds through splitmix64, so neighbouring seeds already give unrelated streams.
  return seed + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(stream);
}

namespace {

// One decoder stream and the prompt it is continuing.
struct Slot {
  bool active = false;
  std::vector<int32_t> history;  // the prompt and every token generated since
  int64_t feed_from = 0;         // the next feed is history[feed_from, end)
  SampleResult result;
  StopText text;
  size_t shown = 0;              // bytes of text passed to on_text
  Rng rng;
};

class Generator {
 public:
  Generator(nn::GptDecoder& d, const data::Tokenizer& tok,
            const std::vector<std::vector<int32_t>>& prompts, const SampleOptions& o,
            const GenerateCallbacks& cb, GenerateStats& stats)
      : dec_(d), tok_(tok), prompts_(prompts), o_(o), cb_(cb), stats_(stats),
        slots_(size_t(d.streams())), results_(prompts.size()) {
    const int64_t S = d.streams();
    tokens_.resize(size_t(S * d.context()));
    counts_.assign(size_t(S), 0);
    logits_.assign(size_t(S * d.vocab_size()), 0.0f);
    picked_.assign(size_t(S), 0);
    samplers_.resize(size_t(std::max(1, omp_get_max_threads())));
  }

  std::vector<SampleResult> run() {
    Timer timer;
    for (int64_t s = 0; s < dec_.streams(); ++s) start(s);
    while (std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) { return s.active; })) {
      int64_t n = 0;
      for (size_t s = 0; s < slots_.size(); ++s) {
        const Slot& slot = slots_[s];
        counts_[s] = 0;
        if (!slot.active) continue;
        counts_[s] = int64_t(slot.history.size()) - slot.feed_from;
        AISCALE_CHECK(counts_[s] > 0, "an active stream with nothing to feed");  // it would never end
        std::copy(slot.history.begin() + slot.feed_from, slot.history.end(), tokens_.begin() + n);
        n += counts_[s];
      }
      dec_.feed(tokens_.data(), counts_.data(), logits_.data());
      pick_tokens();
      for (int64_t s = 0; s < dec_.streams(); ++s)
        if (counts_[s] > 0) next_token(s);
    }
    stats_.seconds += timer.seconds();
    return std::move(results_);
  }

 private:
  // Puts the next prompt, if any, into stream s.
  void start(int64_t s) {
    Slot& slot = slots_[size_t(s)];
    slot.active = next_ < prompts_.size();
    if (!slot.active) return;
    const int64_t index = static_cast<int64_t>(next_++);
    slot.history = prompts_[size_t(index)];
    if (slot.history.empty()) {
      if (o_.end_of_text < 0) fail("prompt {} is empty: give some text", index + 1);
      slot.history.push_back(o_.end_of_text);
    }
    const int64_t P = static_cast<int64_t>(slot.history.size());
    slot.feed_from = P - std::min(P, dec_.context());
    slot.result = SampleResult{};
    slot.result.index = index;
    slot.text = StopText(o_.stop);
    slot.shown = 0;
    slot.rng.reseed(stream_seed(o_.seed, index));
    dec_.reset(s);
    stats_.prompt_tokens += P - slot.feed_from;
  }

  // Each fed stream's next token, the streams over the cores (each draws from its own
  // random stream with a sampler of its thread: the same tokens as one by one). With many
  // streams a pass over the vocabulary per stream costs as much as a step of the GPU.
  void pick_tokens() {
    const int64_t S = dec_.streams(), V = dec_.vocab_size();
    const int threads = static_cast<int>(samplers_.size());
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (S > 1)
    for (int64_t s = 0; s < S; ++s)
      if (counts_[s] > 0)
        picked_[size_t(s)] = samplers_[size_t(omp_get_thread_num())].pick(
            logits_.data() + s * V, V, o_.sampling, slots_[size_t(s)].rng);
  }

  void next_token(int64_t s) {
    Slot& slot = slots_[size_t(s)];
    SampleResult& r = slot.result;
    const int32_t token = picked_[size_t(s)];
    r.ids.push_back(token);
    slot.history.push_back(token);
    ++stats_.generated_tokens;
    const int64_t n = static_cast<int64_t>(r.ids.size());
    bool done = true;
    if (token == o_.end_of_text && n >= o_.min_new_tokens) {
      r.reason = StopReason::end_of_text;
    } else if (slot.text.append(token == o_.end_of_text ? std::string("\n")
                                                        : tok_.decode(std::span(&token, 1)))) {
      r.reason = StopReason::stop_sequence;
      r.stop_sequence = slot.text.matched();
    } else if (n >= o_.max_new_tokens) {
      r.reason = StopReason::length;
    } else {
      done = false;
    }
    show(slot, done ? slot.text.text().size() : slot.text.final_length());
    if (!done) {
      // The next feed: the new token, or, when the window is full, the window restarted.
      const int64_t size = static_cast<int64_t>(slot.history.size());
      if (dec_.length(s) < dec_.context()) {
        slot.feed_from = size - 1;
      } else {
        dec_.reset(s);
        slot.feed_from = size - std::min(size, slide_keep(dec_.context()));
        stats_.refed_tokens += size - slot.feed_from - 1;
      }
      return;
    }
    r.text = slot.text.text();
    if (cb_.on_done) cb_.on_done(r);
    results_[size_t(r.index)] = std::move(r);
    start(s);
  }

  void show(Slot& slot, size_t upto) {
    if (upto <= slot.shown) return;
    if (cb_.on_text)
      cb_.on_text(slot.result.index,
                  std::string_view(slot.text.text()).substr(slot.shown, upto - slot.shown));
    slot.shown = upto;
  }

  nn::GptDecoder& dec_;
  const data::Tokenizer& tok_;
  const std::vector<std::vector<int32_t>>& prompts_;
  const SampleOptions& o_;
  const GenerateCallbacks& cb_;
  GenerateStats& stats_;
  std::vector<Slot> slots_;
  std::vector<SampleResult> results_;
  size_t next_ = 0;  // the next prompt to start
  std::vector<int32_t> picked_;          // each stream's token of this step
  std::vector<TokenSampler> samplers_;   // one per thread (their scratch buffers)
  std::vector<int32_t> tokens_;
  std::vector<int64_t> counts_;
  std::vector<float> logits_;
};

}  // namespace

std::vector<SampleResult> generate(nn::GptDecoder& decoder, const data::Tokenizer& tokenizer,
                                   const std::vector<std::vector<int32_t>>& prompts,
                                   const SampleOptions& o, const GenerateCallbacks& cb,
                                   GenerateStats* stats) {
  if (o.max_new_tokens < 1) fail("--tokens {} is invalid: generate at least 1 token", o.max_new_tokens);
  check_sampling_params(o.sampling);
  for (const std::string& s : o.stop)
    if (s.empty()) fail("--stop '' is empty: give the text that ends a sample");
  GenerateStats local;
  return Generator(decoder, tokenizer, prompts, o, cb, stats ? *stats : local).run();
}

}  // namespace aiscale::train
