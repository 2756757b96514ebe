#include "aiscale/train/sampling.h"

#include <algorithm>
#include <cmath>

#include "aiscale/core/error.h"

namespace aiscale::train {

void check_sampling_params(const SamplingParams& p) {
  if (!std::isfinite(p.temperature) || p.temperature < 0.0f)
    fail("--temperature {} is invalid: give 0 (greedy) or a positive number", p.temperature);
  if (p.top_k < 0) fail("--top-k {} is invalid: give 0 (all tokens) or a positive count", p.top_k);
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f))
    fail("--top-p {} is outside (0, 1]: give e.g. 0.9 (1 keeps every token)", p.top_p);
}

void TokenSampler::keep(const float* logits, int64_t vocab, const SamplingParams& p) {
  if (static_cast<int64_t>(order_.size()) != vocab) {
    order_.resize(size_t(vocab));
    weight_.resize(size_t(vocab));
  }
  for (int64_t i = 0; i < vocab; ++i) order_[i] = static_cast<int32_t>(i);
  // Most likely first; equal logits by id, so that every order is one order.
  const auto before = [logits](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  if (p.temperature <= 0.0f) {
    order_[0] = *std::min_element(order_.begin(), order_.end(), before);
    weight_[order_[0]] = 1.0;
    count_ = 1;
    total_ = 1.0;
    return;
  }
  count_ = vocab;
  if (p.top_k > 0 && p.top_k < vocab) {
    std::nth_element(order_.begin(), order_.begin() + (p.top_k - 1), order_.end(), before);
    count_ = p.top_k;
  }
  const float max_logit = logits[*std::min_element(order_.begin(), order_.begin() + count_, before)];
  const double inv_t = 1.0 / static_cast<double>(p.temperature);
  total_ = 0.0;
  for (int64_t i = 0; i < count_; ++i) {
    const int32_t t = order_[i];
    weight_[t] = std::exp((static_cast<double>(logits[t]) - max_logit) * inv_t);
    total_ += weight_[t];
  }
  if (p.top_p >= 1.0f) return;
  // The nucleus is usually a small head of the distribution: sort a few hundred of the
  // most likely tokens, and more only while their mass falls short of top_p.
  const double target = static_cast<double>(p.top_p) * total_;
  for (int64_t sorted = std::min<int64_t>(count_, 256);; sorted = std::min(count_, sorted * 4)) {
    std::partial_sort(order_.begin(), order_.begin() + sorted, order_.begin() + count_, before);
    double sum = 0.0;
    for (int64_t i = 0; i < sorted; ++i) {
      sum += weight_[order_[i]];
      if (sum >= target) {
        count_ = i + 1;
        total_ = sum;
        return;
      }
    }
    if (sorted == count_) return;  // rounding: the whole set is the nucleus
  }
}

std::vector<TokenProbability> TokenSampler::distribution(const float* logits, int64_t vocab,
                                                         const SamplingParams& p) {
  keep(logits, vocab, p);
  std::sort(order_.begin(), order_.begin() + count_, [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  std::vector<TokenProbability> out;
  for (int64_t i = 0; i < count_; ++i) out.push_back({order_[i], weight_[order_[i]] / total_});
  return out;
}

int32_t TokenSampler::pick(const float* logits, int64_t vocab, const SamplingParams& p, Rng& rng) {
  keep(logits, vocab, p);
  if (count_ == 1) return order_[0];
  const double u = static_cast<double>(rng.uniform()) * total_;
  double acc = 0.0;
  for (int64_t i = 0; i < count_; ++i) {
    acc += weight_[order_[i]];
    if (u < acc) return order_[i];
  }
  return order_[count_ - 1];  // u within rounding of the total
}

StopText::StopText(std::vector<std::string> stops) : stops_(std::move(stops)) {
  for (const std::string& s : stops_) {
    AISCALE_CHECK(!s.empty(), "an empty stop sequence");
    longest_ = std::max(longest_, s.size());
  }
}

bool StopText::append(std::string_view bytes) {
  if (stopped_) return true;
  if (stops_.empty()) {
    text_.append(bytes);
    return false;
  }
  const size_t old = text_.size();
  text_.append(bytes);
  // Only a match that ends in the new bytes is new: start far enough back for the longest
  // stop sequence to straddle the boundary.
  const size_t from = old >= longest_ ? old - (longest_ - 1) : 0;
  size_t best = std::string::npos;
  for (const std::string& s : stops_) {
    const size_t at = text_.find(s, from);
    if (at < best) {
      best = at;
      matched_ = s;
    }
  }
  if (best == std::string::npos) return false;
  text_.resize(best);
  stopped_ = true;
  return true;
}

size_t StopText::final_length() const {
  if (stopped_ || longest_ == 0) return text_.size();
  for (size_t k = std::min(longest_ - 1, text_.size()); k > 0; --k) {
    const std::string_view tail = std::string_view(text_).substr(text_.size() - k);
    for (const std::string& s : stops_)
      if (s.size() > k && s.compare(0, k, tail) == 0) return text_.size() - k;
  }
  return text_.size();
}

std::string unescape(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\' || i + 1 == text.size()) {
      out += text[i];
      continue;
    }
    switch (text[++i]) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case '\\': out += '\\'; break;
      case '"': out += '"'; break;
      default: out += '\\', out += text[i];
    }
  }
  return out;
}

}  // namespace aiscale::train
