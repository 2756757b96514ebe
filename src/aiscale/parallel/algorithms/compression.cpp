#include "aiscale/parallel/algorithms/compression.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "aiscale/core/error.h"

namespace aiscale::parallel::algorithms {
namespace {

// Integers and bytes ride in float slots as their bits (MPI's all-gather copies bytes; no
// arithmetic ever touches these slots).
float bits_of(uint32_t v) {
  float f;
  std::memcpy(&f, &v, 4);
  return f;
}
uint32_t uint_of(float f) {
  uint32_t v;
  std::memcpy(&v, &f, 4);
  return v;
}

int64_t buckets_of(int64_t n) { return (n + kInt8Bucket - 1) / kInt8Bucket; }

}  // namespace

int64_t topk_count(int64_t n, double ratio) {
  return std::clamp<int64_t>(static_cast<int64_t>(std::ceil(ratio * static_cast<double>(n))), 1, std::max<int64_t>(n, 1));
}

int64_t topk_payload_bytes(int64_t n, double ratio) { return 8 * topk_count(n, ratio); }

int64_t int8_payload_bytes(int64_t n) { return n + 4 * buckets_of(n); }

CompressedExchange::CompressedExchange(std::string kind, int64_t n, double topk_ratio)
    : kind_(std::move(kind)), n_(n), residual_(static_cast<size_t>(n), 0.0f) {
  if (kind_ == "topk") {
    if (!(topk_ratio > 0 && topk_ratio <= 1))
      fail("parallel.topk_ratio = {} must be in (0, 1]: the share of the gradient's values each "
           "rank sends (e.g. 0.01)", topk_ratio);
    if (n > int64_t{0xFFFFFFFF})
      fail("top-k compression indexes the gradient with 32-bit indices; {} values are too many: "
           "use parallel.compression = \"int8\"", n);
    k_ = topk_count(n, topk_ratio);
    message_floats_ = 2 * k_;
    payload_bytes_ = topk_payload_bytes(n, topk_ratio);
  } else if (kind_ == "int8") {
    message_floats_ = (n + 3) / 4 + buckets_of(n);
    payload_bytes_ = int8_payload_bytes(n);
  } else {
    fail("unknown gradient compression '{}': use none, topk or int8", kind_);
  }
}

std::vector<float> CompressedExchange::encode(float* grads) {
  for (int64_t i = 0; i < n_; ++i) grads[i] += residual_[static_cast<size_t>(i)];
  std::vector<float> msg(static_cast<size_t>(message_floats_), 0.0f);
  if (kind_ == "topk") {
    std::vector<uint32_t> idx(static_cast<size_t>(n_));
    std::iota(idx.begin(), idx.end(), 0u);
    // NaN ranks as the largest magnitude, so that it is sent and the step is seen to be
    // non-finite (and the comparison stays a strict weak order).
    auto magnitude = [grads](uint32_t i) {
      const float a = std::abs(grads[i]);
      return std::isnan(a) ? std::numeric_limits<float>::infinity() : a;
    };
    auto larger = [&magnitude](uint32_t x, uint32_t y) {
      const float ax = magnitude(x), ay = magnitude(y);
      return ax > ay || (ax == ay && x < y);
    };
    std::nth_element(idx.begin(), idx.begin() + (k_ - 1), idx.end(), larger);
    std::sort(idx.begin(), idx.begin() + k_);  // ascending indices: the decode walks memory in order
    std::copy(grads, grads + n_, residual_.begin());
    for (int64_t j = 0; j < k_; ++j) {
      const uint32_t i = idx[static_cast<size_t>(j)];
      msg[static_cast<size_t>(j)] = grads[i];
      msg[static_cast<size_t>(k_ + j)] = bits_of(i);
      residual_[i] = 0.0f;  // sent in full
    }
    drop_non_finite_residual();
    return msg;
  }
  // int8: the bytes first (4 per float slot), then one scale per bucket.
  auto* bytes = reinterpret_cast<int8_t*>(msg.data());
  float* scales = msg.data() + (n_ + 3) / 4;
  for (int64_t b = 0; b < buckets_of(n_); ++b) {
    const int64_t begin = b * kInt8Bucket, end = std::min(n_, begin + kInt8Bucket);
    float top = 0;
    bool finite = true;
    for (int64_t i = begin; i < end; ++i) {
      finite = finite && std::isfinite(grads[i]);
      top = std::max(top, std::abs(grads[i]));
    }
    // A non-finite bucket sends a NaN scale, so that every rank sees the step as non-finite.
    const float scale = !finite ? std::numeric_limits<float>::quiet_NaN() : top / 127.0f;
    scales[b] = scale;
    for (int64_t i = begin; i < end; ++i) {
      const float q = finite && scale > 0
                          ? std::clamp(std::nearbyint(grads[i] / scale), -127.0f, 127.0f)
                          : 0.0f;
      bytes[i] = static_cast<int8_t>(q);
      residual_[static_cast<size_t>(i)] = grads[i] - q * scale;
    }
  }
  drop_non_finite_residual();
  return msg;
}

// A NaN/Inf gradient skips its step; carried in the residual it would poison every later
// step, so it is dropped there.
void CompressedExchange::drop_non_finite_residual() {
  for (float& r : residual_)
    if (!std::isfinite(r)) r = 0.0f;
}

void CompressedExchange::decode_add(const float* msg, float* out) const {
  if (kind_ == "topk") {
    for (int64_t j = 0; j < k_; ++j) {
      const uint32_t i = uint_of(msg[k_ + j]);
      if (i >= static_cast<uint64_t>(n_)) fail("a top-k message names value {} of a gradient of {}", i, n_);
      out[i] += msg[j];
    }
    return;
  }
  const auto* bytes = reinterpret_cast<const int8_t*>(msg);
  const float* scales = msg + (n_ + 3) / 4;
  for (int64_t b = 0; b < buckets_of(n_); ++b) {
    const int64_t begin = b * kInt8Bucket, end = std::min(n_, begin + kInt8Bucket);
    const float scale = scales[b];
    // A non-finite bucket (NaN/Inf gradient) stays non-finite, so the trainer skips the step.
    if (!std::isfinite(scale)) {
      for (int64_t i = begin; i < end; ++i) out[i] += scale;
      continue;
    }
    for (int64_t i = begin; i < end; ++i) out[i] += static_cast<float>(bytes[i]) * scale;
  }
}

void CompressedExchange::exchange(Communicator& comm, float* grads) {
  const std::vector<float> mine = encode(grads);
  const int world = comm.world();
  std::vector<float> all(static_cast<size_t>(message_floats_) * static_cast<size_t>(world));
  comm.allgather(mine.data(), all.data(), message_floats_);
  std::fill(grads, grads + n_, 0.0f);
  for (int r = 0; r < world; ++r) decode_add(all.data() + static_cast<size_t>(r) * message_floats_, grads);
}

}  // namespace aiscale::parallel::algorithms
