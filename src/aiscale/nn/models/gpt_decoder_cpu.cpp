// The GPT decoder on the CPU (gpt_decoder.h), both families of gpt_config.h: fp32, the
// training model's ops (ops::cpu_backend: embedding, LayerNorm or RMSNorm, GELU or SwiGLU,
// rotary positions at each row's position, residual, sgemm) over the rows being fed, with
// the kernels of
// gpt_decoder_cpu_kernels.h (attention over the cache, linear layers of a few rows) and
// OpenBLAS's sgemv. Decoding a token reads every weight once, so a step's time is the
// weights' bytes over the memory bandwidth, and streams decoded together share that read.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <vector>

#include "aiscale/core/error.h"
#include "aiscale/nn/models/gpt_decoder.h"
#include "aiscale/nn/models/gpt_decoder_cpu_kernels.h"
#include "aiscale/nn/models/gpt_layout.h"
#include "aiscale/nn/models/gpt_rope.h"
#include "aiscale/ops/ops.h"

namespace aiscale::nn {
namespace {

// Up to this many rows a linear layer streams its weights once (few_rows_linear); beyond,
// sgemm's packing pays for itself.
constexpr int64_t kFewRows = 16;

// While a feed runs, OpenMP may give the decoder's parallel loops fewer threads than asked
// when the machine is busy (omp_set_dynamic; libgomp gives the cores not taken by the load
// average). Decoding several streams is ~50 parallel loops a token, each a few hundred
// microseconds: on the 2-core development VM with other work running, threads spinning at
// the loops' ends while the thread they wait for had no core made a step of 8 streams of
// GPT-2 124M take 500 ms, against 57 ms so (and 57 ms on one thread; docs/results/cpu.md).
// The setting is the calling thread's, restored when the feed returns.
class DynamicThreads {
 public:
  DynamicThreads() : was_(omp_get_dynamic()) { omp_set_dynamic(1); }
  ~DynamicThreads() { omp_set_dynamic(was_); }
  DynamicThreads(const DynamicThreads&) = delete;
  DynamicThreads& operator=(const DynamicThreads&) = delete;

 private:
  int was_;
};

class GptDecoderCpu final : public GptDecoder {
 public:
  GptDecoderCpu(const GptConfig& c, const GptDecoderOptions& o)
      : config_(c), options_(resolved_decoder_options(c, o)), layout_(c),
        ops_(ops::cpu_backend()) {
    const int64_t S = options_.streams, W = options_.context, R = options_.max_rows;
    const int64_t C = c.n_embd, L = c.n_layer, KC = c.kv_rows();
    threads_ = std::max(1, omp_get_max_threads());
    params_.assign(size_t(layout_.size()), 0.0f);
    k_cache_.assign(size_t(S * L * W * KC), 0.0f);
    v_cache_.assign(k_cache_.size(), 0.0f);
    length_.assign(size_t(S), 0);
    x_.assign(size_t(R * C), 0.0f);
    ln_.assign(size_t(R * C), 0.0f);
    mean_.assign(size_t(R), 0.0f);
    rstd_.assign(size_t(R), 0.0f);
    qkv_.assign(size_t(R * c.qkv_rows()), 0.0f);
    atty_.assign(size_t(R * C), 0.0f);
    proj_.assign(size_t(R * C), 0.0f);
    fch_.assign(size_t(R * c.fc_rows()), 0.0f);
    if (c.llama()) {
      swiglu_.assign(size_t(R * c.ffn()), 0.0f);
      RopeTable table = rope_table(c, W);  // positions [0, context)
      rope_cos_ = std::move(table.cos);
      rope_sin_ = std::move(table.sin);
    }
    scores_.assign(size_t(threads_ * W), 0.0f);
    row_stream_.assign(size_t(R), 0);
    row_pos_.assign(size_t(R), 0);
    row_token_.assign(size_t(R), 0);
    cached_.assign(size_t(R), CachedRow{});
    // The rows whose logits a chunk computes: at most one per stream, at most a chunk's.
    const int64_t H = std::min(S, R);
    head_streams_.assign(size_t(H), 0);
    head_x_.assign(size_t(H * C), 0.0f);
    head_ln_.assign(size_t(H * C), 0.0f);
    head_logits_.assign(size_t(H * c.vocab_size), 0.0f);
    starts_.assign(size_t(S), 0);
  }

  const GptConfig& config() const override { return config_; }
  const GptDecoderOptions& options() const override { return options_; }
  std::string device_name() const override { return "cpu"; }

  void set_params(const float* params) override {
    std::copy(params, params + layout_.size(), params_.begin());
    loaded_ = true;
  }

  int64_t length(int64_t s) const override { return length_.at(size_t(check_stream(s))); }
  void reset(int64_t s) override { length_.at(size_t(check_stream(s))) = 0; }

  void feed(const int32_t* tokens, const int64_t* counts, float* logits) override {
    if (!loaded_) fail("the decoder has no weights: call set_params() before feed()");
    const int64_t S = options_.streams;
    check_feed(config_, options_, length_.data(), tokens, counts);
    for (int64_t s = 0, total = 0; s < S; ++s) {
      starts_[s] = total;
      total += counts[s];
    }
    const DynamicThreads dynamic;
    // Rows in stream order, `max_rows` at a time; a stream's rows in one chunk attend to
    // the keys its earlier rows (this chunk's or an earlier one's) wrote into the cache.
    int64_t n = 0;
    for (int64_t s = 0; s < S; ++s) {
      for (int64_t i = 0; i < counts[s]; ++i) {
        row_stream_[n] = s;
        row_pos_[n] = length_[s] + i;
        row_token_[n] = tokens[starts_[s] + i];
        if (++n == options_.max_rows) {
          run_rows(n, counts, logits);
          n = 0;
        }
      }
    }
    if (n > 0) run_rows(n, counts, logits);
    for (int64_t s = 0; s < S; ++s) length_[s] += counts[s];
  }

  size_t memory_bytes() const override {
    size_t floats = params_.size() + k_cache_.size() + v_cache_.size() + x_.size() + ln_.size() +
                    mean_.size() + rstd_.size() + qkv_.size() + atty_.size() + proj_.size() +
                    fch_.size() + scores_.size() + head_x_.size() + head_ln_.size() +
                    head_logits_.size() + swiglu_.size() + rope_cos_.size() + rope_sin_.size();
    return floats * sizeof(float);
  }
  size_t cache_bytes() const override {
    return (k_cache_.size() + v_cache_.size()) * sizeof(float);
  }

 private:
  int64_t check_stream(int64_t s) const {
    if (s < 0 || s >= options_.streams)
      fail("stream {} does not exist: the decoder holds streams 0..{}", s, options_.streams - 1);
    return s;
  }

  // Stream s's cached keys (or values) of layer l, position 0: rows of kv_rows() values.
  float* cache_at(std::vector<float>& cache, int64_t s, int64_t l) {
    const int64_t W = options_.context, KC = config_.kv_rows();
    return cache.data() + ((s * config_.n_layer + l) * W) * KC;
  }

  // A bias of layer l (none in the llama family).
  const float* bias(int64_t l, GptBlockParam p) const {
    return config_.has_bias() ? params_.data() + layout_.at(l, p) : nullptr;
  }
  void norm(float* out, const float* x, const float* w, const float* b, int64_t R) {
    if (config_.llama())
      ops_.rmsnorm_forward(out, rstd_.data(), x, w, R, config_.n_embd,
                           static_cast<float>(config_.norm_eps));
    else ops_.layernorm_forward(out, mean_.data(), rstd_.data(), x, w, b, R, config_.n_embd);
  }

  // out (R, OC) = in (R, C) @ w (OC, C)^T + b, by the number of rows:
  // - one (decoding one stream): OpenBLAS's sgemv, which streams the matrix once; on the
  //   2-core development VM a step of GPT-2 124M took 29-30 ms so against 34 ms through
  //   few_rows_linear (2 threads, load average 4);
  // - up to kFewRows (decoding several streams): few_rows_linear, which also streams the
  //   matrix once, using each weight row for every input row; sgemm would pack the whole
  //   matrix first, several times slower for two to eight rows;
  // - more (prefill): sgemm, through the training op.
  void linear(float* out, const float* in, const float* w, const float* b, int64_t R,
              int64_t C, int64_t OC) const {
    if (R > kFewRows) {
      ops_.matmul_forward(out, in, w, b, R, C, OC);
    } else if (R > 1) {
      few_rows_linear(out, in, w, b, R, C, OC);
    } else {
      float beta = 0.0f;
      if (b) {
        std::memcpy(out, b, size_t(OC) * sizeof(float));
        beta = 1.0f;
      }
      AISCALE_CHECK(C <= INT_MAX && OC <= INT_MAX, "matrix {} x {} too large for BLAS", OC, C);
      cblas_sgemv(CblasRowMajor, CblasNoTrans, int(OC), int(C), 1.0f, w, int(C), in, 1, beta,
                  out, 1);
    }
  }

  // The rows row_*[0, R) through the model; the logits of each row that is the last of
  // its stream's feed go to that stream's row of `logits`.
  void run_rows(int64_t R, const int64_t* counts, float* logits) {
    const int64_t C = config_.n_embd, NH = config_.n_head, NKV = config_.kv_heads(),
                  W = options_.context, KC = config_.kv_rows(), QKV = config_.qkv_rows(),
                  F = config_.ffn(), HS = config_.head_size();
    const bool llama = config_.llama();
    const float* wte = params_.data();
    for (int64_t r = 0; r < R; ++r) {
      const float* wpe = llama ? nullptr : params_.data() + layout_.wpe() + row_pos_[r] * C;
      ops_.embedding_forward(x_.data() + r * C, &row_token_[r], wte, wpe, 1, 1, C);
    }
    for (int64_t l = 0; l < config_.n_layer; ++l) {
      auto at = [&](GptBlockParam p) { return params_.data() + layout_.at(l, p); };
      norm(ln_.data(), x_.data(), at(GptBlockParam::ln1_w), bias(l, GptBlockParam::ln1_b), R);
      linear(qkv_.data(), ln_.data(), at(GptBlockParam::qkv_w), bias(l, GptBlockParam::qkv_b), R,
             C, QKV);
      // Each row's Q and K rotated to its position (llama), its key and value into its
      // stream's cache, then every row attends.
      for (int64_t r = 0; r < R; ++r) {
        const int64_t s = row_stream_[r], p = row_pos_[r];
        float* row = qkv_.data() + r * QKV;
        if (llama)
          ops_.rope_forward(row, row, rope_cos_.data() + p * (HS / 2),
                            rope_sin_.data() + p * (HS / 2), 1, 1, NH, NKV, HS);
        float* k = cache_at(k_cache_, s, l);
        float* v = cache_at(v_cache_, s, l);
        std::memcpy(k + p * KC, row + C, size_t(KC) * sizeof(float));
        std::memcpy(v + p * KC, row + C + KC, size_t(KC) * sizeof(float));
        cached_[r] = CachedRow{k, v, p + 1};
      }
      cached_attention_forward(atty_.data(), qkv_.data(), QKV, cached_.data(), R, KC, C, NH, NKV,
                               scores_.data(), W, threads_);
      linear(proj_.data(), atty_.data(), at(GptBlockParam::proj_w),
             bias(l, GptBlockParam::proj_b), R, C, C);
      ops_.residual_forward(x_.data(), x_.data(), proj_.data(), R * C);
      norm(ln_.data(), x_.data(), at(GptBlockParam::ln2_w), bias(l, GptBlockParam::ln2_b), R);
      linear(fch_.data(), ln_.data(), at(GptBlockParam::fc_w), bias(l, GptBlockParam::fc_b), R, C,
             config_.fc_rows());
      float* hidden = fch_.data();
      if (llama) {
        ops_.swiglu_forward(swiglu_.data(), fch_.data(), R, F);
        hidden = swiglu_.data();
      } else {
        ops_.gelu_forward(fch_.data(), fch_.data(), R * F);
      }
      linear(proj_.data(), hidden, at(GptBlockParam::fcproj_w), bias(l, GptBlockParam::fcproj_b),
             R, F, C);
      ops_.residual_forward(x_.data(), x_.data(), proj_.data(), R * C);
    }
    head(R, counts, logits);
  }

  // Final norm and the LM head (tied: the token embedding; untied: lm_head), for the rows
  // that end their stream's feed only:
  // the head is a third of GPT-2 124M's weights, and a prompt's other rows need none.
  void head(int64_t R, const int64_t* counts, float* logits) {
    const int64_t C = config_.n_embd, V = config_.vocab_size;
    int64_t H = 0;
    for (int64_t r = 0; r < R; ++r) {
      const int64_t s = row_stream_[r];
      if (row_pos_[r] != length_[s] + counts[s] - 1) continue;
      std::memcpy(head_x_.data() + H * C, x_.data() + r * C, size_t(C) * sizeof(float));
      head_streams_[H++] = s;
    }
    if (H == 0) return;
    norm(head_ln_.data(), head_x_.data(), params_.data() + layout_.lnf_w(),
         config_.has_bias() ? params_.data() + layout_.lnf_b() : nullptr, H);
    const float* head = params_.data() + (config_.tied() ? 0 : layout_.lm_head());
    linear(head_logits_.data(), head_ln_.data(), head, nullptr, H, C, V);
    for (int64_t h = 0; h < H; ++h)
      std::memcpy(logits + head_streams_[h] * V, head_logits_.data() + h * V,
                  size_t(V) * sizeof(float));
  }

  GptConfig config_;
  GptDecoderOptions options_;
  GptLayout layout_;
  const ops::Backend& ops_;
  int threads_ = 1;
  bool loaded_ = false;
  std::vector<float> params_;
  std::vector<float> k_cache_, v_cache_;  // (streams, layers, context, C) each
  std::vector<int64_t> length_;           // per stream: positions filled
  // Activations of a chunk of rows (max_rows each).
  std::vector<float> x_, ln_, mean_, rstd_, qkv_, atty_, proj_, fch_, scores_;
  std::vector<float> swiglu_;              // llama: the MLP's hidden activations (rows, F)
  std::vector<float> rope_cos_, rope_sin_; // llama: (context, HS/2) rotary tables
  std::vector<int64_t> row_stream_, row_pos_;
  std::vector<int32_t> row_token_;
  std::vector<CachedRow> cached_;
  std::vector<int64_t> head_streams_, starts_;
  std::vector<float> head_x_, head_ln_, head_logits_;
};

}  // namespace

std::unique_ptr<GptDecoder> make_gpt_decoder_cpu(const GptConfig& c, const GptDecoderOptions& o) {
  return std::make_unique<GptDecoderCpu>(c, o);
}

}  // namespace aiscale::nn
