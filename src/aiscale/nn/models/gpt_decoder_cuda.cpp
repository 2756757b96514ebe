// The GPU decoder behind the GptDecoder interface (gpt_decoder.h): feed() turns the
// streams' tokens into rows of (stream, position, token) for the CUDA decoder
// (gpt_cuda_decoder.h), at most max_rows a call, and asks for the logits of each stream's
// last row. When every stream is fed (a decoding step), the logits land in the caller's
// buffer in one copy; otherwise they are copied row by row from the decoder's buffer.
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "aiscale/core/error.h"
#include "aiscale/nn/models/gpt_cuda_decoder.h"
#include "aiscale/nn/models/gpt_decoder.h"
#include "aiscale/nn/models/gpt_layout.h"

namespace aiscale::nn {
namespace {

class GptDecoderCuda final : public GptDecoder {
 public:
  GptDecoderCuda(const GptConfig& c, const GptDecoderOptions& o)
      : config_(c), options_(resolved_decoder_options(c, o)),
        length_(size_t(options_.streams), 0) {
    if (options_.streams > (1 << 20) || options_.max_rows > (1 << 20))
      fail("the GPU decoder holds at most {} streams and rows per call", 1 << 20);
  }

  const GptConfig& config() const override { return config_; }
  const GptDecoderOptions& options() const override { return options_; }
  std::string device_name() const override {
    return decoder_ ? decoder_->device_name() : std::string("cuda");
  }

  void set_params(const float* params) override {
    decoder_.reset();  // the old cache and weights go first
    decoder_ = make_cuda_gpt_decoder(config_, params, static_cast<int>(options_.streams),
                                     static_cast<int>(options_.max_rows),
                                     static_cast<int>(options_.context));
    std::fill(length_.begin(), length_.end(), 0);
  }

  int64_t length(int64_t s) const override { return length_.at(size_t(check_stream(s))); }
  void reset(int64_t s) override { length_.at(size_t(check_stream(s))) = 0; }

  void feed(const int32_t* tokens, const int64_t* counts, float* logits) override {
    if (!decoder_) fail("the decoder has no weights: call set_params() before feed()");
    const int64_t S = options_.streams;
    check_feed(config_, options_, length_.data(), tokens, counts);  // before anything runs
    rows_.clear();
    out_.clear();
    out_stream_.clear();
    int64_t next = 0;
    for (int64_t s = 0; s < S; ++s) {
      for (int64_t i = 0; i < counts[s]; ++i) {
        rows_.push_back({static_cast<int32_t>(s), static_cast<int32_t>(length_[s] + i),
                         tokens[next + i]});
        if (i + 1 == counts[s]) {  // the stream's last row: its logits are wanted
          out_.push_back(static_cast<int32_t>(rows_.size() - 1));
          out_stream_.push_back(s);
        }
        if (static_cast<int64_t>(rows_.size()) == options_.max_rows) run_rows(logits);
      }
      next += counts[s];
    }
    if (!rows_.empty()) run_rows(logits);
    for (int64_t s = 0; s < S; ++s) length_[s] += counts[s];
  }

  size_t memory_bytes() const override {
    const GptLayout layout(config_);
    const size_t C = size_t(config_.n_embd), R = size_t(options_.max_rows),
                 V = size_t(config_.vocab_size);
    const size_t activations = R * C * 2 * 13;  // x, ln, qkv, att, fc, fc_pre, selected (bf16)
    return size_t(layout.size()) * 2 + cache_bytes() + activations + R * V * 4 * 2;
  }
  size_t cache_bytes() const override {
    return size_t(2) * size_t(options_.streams) * size_t(config_.n_layer) *
           size_t(options_.context) * size_t(config_.n_embd) * 2;  // bf16
  }

 private:
  int64_t check_stream(int64_t s) const {
    if (s < 0 || s >= options_.streams)
      fail("stream {} does not exist: the decoder holds streams 0..{}", s, options_.streams - 1);
    return s;
  }

  // The rows gathered so far through the GPU; each stream that ended among them gets its
  // logits row.
  void run_rows(float* logits) {
    const int64_t V = config_.vocab_size;
    bool in_place = static_cast<int64_t>(out_stream_.size()) == options_.streams;
    for (size_t i = 0; in_place && i < out_stream_.size(); ++i) in_place = out_stream_[i] == int64_t(i);
    const float* got = decoder_->run(rows_.data(), static_cast<int>(rows_.size()), out_.data(),
                                     static_cast<int>(out_.size()), in_place ? logits : nullptr);
    if (!in_place)
      for (size_t i = 0; i < out_stream_.size(); ++i)
        std::memcpy(logits + out_stream_[i] * V, got + int64_t(i) * V, size_t(V) * sizeof(float));
    rows_.clear();
    out_.clear();
    out_stream_.clear();
  }

  GptConfig config_;
  GptDecoderOptions options_;
  std::vector<int64_t> length_;
  std::unique_ptr<CudaGptDecoder> decoder_;
  std::vector<DecodeRow> rows_;
  std::vector<int32_t> out_;         // rows whose logits are wanted
  std::vector<int64_t> out_stream_;  // their streams
};

}  // namespace

std::unique_ptr<GptDecoder> make_gpt_decoder_cuda(const GptConfig& c, const GptDecoderOptions& o) {
  return std::make_unique<GptDecoderCuda>(c, o);
}

}  // namespace aiscale::nn
