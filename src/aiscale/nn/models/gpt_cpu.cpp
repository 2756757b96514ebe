// The GPT models (gpt2 and llama families) on the CPU: the blocks of gpt_blocks.h over one op backend (ops::cpu_backend() by
// default, ops::reference_backend() for checks), fp32 throughout. This file runs the
// blocks in order: one pass over the batch, or, with pipeline parallelism, this stage's
// passes over the micro-batches in the order of a schedule (parallel/pipeline/schedule.h),
// the activations and their gradients crossing the stages as point-to-point messages.
// Where the parameters, gradients and AdamW moments live (tensor slices, ZeRO shards, a
// stage's blocks) and how they are exchanged is gpt_cpu_state.h.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include "aiscale/core/error.h"
#include "aiscale/core/timer.h"
#include "aiscale/nn/models/gpt.h"
#include "aiscale/nn/models/gpt_blocks.h"
#include "aiscale/nn/models/gpt_cpu_state.h"
#include "aiscale/parallel/pipeline/schedule.h"
#include "aiscale/parallel/process_groups.h"
#include "aiscale/profile/profiled_backend.h"

namespace aiscale::nn {
namespace {

namespace pipe = parallel::pipeline;

const GptConfig& checked(const GptConfig& c, const GptRunOptions& o) {
  c.validate();
  if (o.seq < 1 || o.seq > c.block_size)
    fail("sequence length {} is outside 1..{} (model.block_size): lower train.seq_len or raise "
         "model.block_size", o.seq, c.block_size);
  if (o.batch < 1) fail("batch size {} is invalid: it must be at least 1", o.batch);
  if (o.precision != DType::f32)
    fail("the CPU model computes in fp32 only (asked for {}): set train.precision = \"fp32\" or "
         "use device = \"cuda\"", dtype_name(o.precision));
  if (o.zero_stage >= 2 && !o.groups)
    fail("parallel.zero_stage = {} shards over the data-parallel group of a training run's "
         "layout: run it with aiscale train", o.zero_stage);
  if (!o.groups) return c;
  const int tp = o.groups->tensor().world(), pp = o.groups->pipeline().world();
  if (c.n_head % tp || c.n_embd % tp)
    fail("parallel.tensor_parallel = {} must divide model.n_head ({}) and model.n_embd ({})", tp,
         c.n_head, c.n_embd);
  if (c.kv_heads() % tp)
    fail("parallel.tensor_parallel = {} must divide the key/value heads (model.n_kv_head = {}): "
         "each tensor rank holds whole key/value heads; lower parallel.tensor_parallel",
         tp, c.kv_heads());
  if (c.ffn() % tp)
    fail("parallel.tensor_parallel = {} must divide the MLP width (model.ffn_hidden = {})", tp,
         c.ffn());
  const int micro = pp > 1 ? o.microbatches : 1;
  if (micro < 1 || o.batch % micro)
    fail("parallel.microbatches = {} must divide the batch of {} rows", micro, o.batch);
  if (o.sequence_parallel && (o.batch / micro * o.seq) % tp)
    fail("parallel.sequence_parallel: {} tokens per micro-batch do not split over {} tensor "
         "ranks", o.batch / micro * o.seq, tp);
  if (pp > c.n_layer) fail("{} pipeline stages for {} layers: at most one stage per layer", pp, c.n_layer);
  if (pp > 1 && o.zero_stage == 3)
    fail("parallel.zero_stage = 3 does not combine with pipeline stages");
  return c;
}

GptPlacement placement(const GptConfig& c, const GptRunOptions& o) {
  GptPlacement p;
  p.end_layer = c.n_layer;
  if (!o.groups) return p;
  parallel::ProcessGroups& g = *o.groups;
  if (g.tensor().world() > 1) {
    p.tensor.comm = &g.tensor();
    p.tensor.size = g.tensor().world();
    p.tensor.rank = g.tensor().rank();
    p.tensor.sequence_parallel = o.sequence_parallel;
  }
  if (g.data().world() > 1) p.data = &g.data();
  p.zero_stage = o.zero_stage;
  if (g.pipeline().world() > 1) {
    p.pipeline = &g.pipeline();
    p.embedding = g.embedding();
    p.stages = g.pipeline().world();
    p.stage = g.pipeline().rank();
    const pipe::StageLayers layers = pipe::stage_layers(c.n_layer, p.stages, p.stage);
    p.first_layer = layers.begin;
    p.end_layer = layers.end;
  }
  return p;
}

class GptCpu final : public GptModel {
 public:
  GptCpu(const GptConfig& c, const GptRunOptions& o)
      : config_(checked(c, o)), options_(o), ops_(ops::backend_by_name(o.cpu_backend)),
        place_(placement(c, o)), state_(c, o, place_) {
    self_sync_ = o.groups && (place_.tensor.split() || place_.zero_stage >= 2 || place_.stages > 1);
    micro_ = place_.stages > 1 ? o.microbatches : 1;
    int slots = 1;
    if (place_.stages > 1) {
      schedule_ = pipe::schedule_by_name(o.pipeline_schedule, place_.stages, place_.stage, micro_);
      slots = pipe::max_in_flight(schedule_);  // activations held at once
    }
    for (int i = 0; i < slots; ++i)
      slots_.push_back(std::make_unique<GptBlocks>(ops_, place_.tensor, c, o.batch / micro_, o.seq,
                                                   o.recompute, o.recompute_layers,
                                                   place_.first_layer,
                                                   place_.end_layer, place_.last()));
    inputs_.assign(size_t(o.batch * o.seq), 0);
    targets_.assign(inputs_.size(), 0);
  }

  const GptConfig& config() const override { return config_; }
  const GptRunOptions& options() const override { return options_; }
  std::string device_name() const override { return "cpu"; }
  bool data_parallel() const override { return self_sync_; }
  void set_gradient_sync(bool on) override { sync_ = on; }
  bool collective_state() const override {
    return place_.tensor.split() || place_.zero_stage >= 2 || place_.stages > 1;
  }
  bool pipelined() const override { return place_.stages > 1; }
  double pipeline_wait_s() const override { return wait_s_; }

  float forward(const int32_t* inputs, const int32_t* targets) override {
    take_batch(inputs, targets);
    // A pipeline's forward-only pass (evaluation): the micro-batches one after another.
    double sum = 0.0;
    for (int m = 0; m < micro_; ++m) sum += stage_forward(m, 0);
    if (place_.stages > 1) place_.pipeline->wait();
    return pipeline_loss(sum / micro_);
  }

  void backward(float grad_multiplier) override {
    if (place_.stages > 1)
      fail("a pipeline runs its backward passes inside forward_backward() (its schedule)");
    if (!has_targets_ || !slots_[0]->logits())
      fail("backward() needs a forward() with targets before it");
    stage_backward(0, 0, grad_multiplier);
    if (sync_) state_.finish_backward(self_sync_);
  }

  float forward_backward(const int32_t* inputs, const int32_t* targets,
                         float grad_multiplier) override {
    if (place_.stages == 1) return GptModel::forward_backward(inputs, targets, grad_multiplier);
    if (!targets) fail("forward_backward() needs targets");
    take_batch(inputs, targets);
    wait_s_ = 0.0;
    double sum = 0.0;
    const int slots = static_cast<int>(slots_.size());
    // Each micro-batch's loss is its mean; the batch's is their mean.
    const float per_micro = grad_multiplier / static_cast<float>(micro_);
    for (const pipe::Pass& p : schedule_) {
      if (p.kind == pipe::PassKind::forward) sum += stage_forward(p.microbatch, p.microbatch % slots);
      else stage_backward(p.microbatch, p.microbatch % slots, per_micro);
    }
    place_.pipeline->wait();
    if (sync_) state_.finish_backward(true);
    return pipeline_loss(sum / micro_);
  }

  void zero_grad() override { state_.zero_grad(); }
  void set_profiler(profile::OpProfiler* p) override {
    ops_ = profile::profiled_host_backend(ops::backend_by_name(options_.cpu_backend), p);
  }
  double grad_sum_squares() override { return state_.grad_sum_squares(self_sync_); }
  void update(const ops::AdamWParams& hp) override {
    state_.update(ops_, hp, options_.decay_embeddings);
  }

  void logits_at(int64_t b, int64_t t, float* out) override {
    if (place_.stages > 1)
      fail("the logits of a pipeline are on its last stage only: sample with "
           "parallel.pipeline_parallel = 1");
    const float* logits = slots_[0]->logits();
    if (!logits) fail("logits are not available: run forward() first (backward consumes them)");
    const int64_t Vl = slots_[0]->dims().vocab.size;
    const float* row = logits + (b * options_.seq + t) * Vl;
    if (!place_.tensor.split()) {
      std::copy(row, row + Vl, out);
      return;
    }
    // Every rank's slice, padded to the slice length, in vocabulary order: the padding
    // entries all lie past the last token id.
    const int tp = place_.tensor.comm->world();
    const int64_t slice = vocab_slice_rows(config_.vocab_size, tp, 1);
    std::vector<float> mine(static_cast<size_t>(slice), 0.0f), all(static_cast<size_t>(slice * tp));
    std::copy(row, row + Vl, mine.begin());
    place_.tensor.comm->allgather(mine.data(), all.data(), slice);
    std::copy(all.begin(), all.begin() + config_.vocab_size, out);
  }

  using Kind = GptCpuState::Kind;
  void get_params(float* out) const override { mut().to_full(Kind::params, out); }
  void set_params(const float* in) override { state_.from_full(Kind::params, in); }
  void get_grads(float* out) const override { mut().to_full(Kind::grads, out); }
  void set_grads(const float* in) override { state_.from_full(Kind::grads, in); }
  void get_optimizer_state(float* m, float* v) const override {
    mut().to_full(Kind::m, m);
    mut().to_full(Kind::v, v);
  }
  void set_optimizer_state(const float* m, const float* v) override {
    state_.from_full(Kind::m, m);
    state_.from_full(Kind::v, v);
  }
  // Ranges need no whole-model buffer in any layout (GptCpuState::to_full_range).
  bool streams_state() const override { return true; }
  void get_params_range(int64_t begin, int64_t count, float* out) const override {
    mut().to_full_range(Kind::params, begin, count, out);
  }
  void set_params_range(int64_t begin, int64_t count, const float* in) override {
    state_.from_full_range(Kind::params, begin, count, in);
  }
  void get_optimizer_state_range(int k, int64_t begin, int64_t count, float* out) const override {
    mut().to_full_range(k == 0 ? Kind::m : Kind::v, begin, count, out);
  }
  void set_optimizer_state_range(int k, int64_t begin, int64_t count, const float* in) override {
    state_.from_full_range(k == 0 ? Kind::m : Kind::v, begin, count, in);
  }
  float* grad_buffer() override { return state_.grad_buffer(); }
  float* param_buffer() override { return state_.param_buffer(); }
  size_t memory_bytes() const override {
    size_t b = state_.bytes();
    for (const auto& s : slots_) b += s->bytes();
    return b;
  }
  size_t optimizer_state_bytes() const override { return state_.optimizer_bytes(); }
  size_t activation_bytes() const override {
    size_t b = 0;
    for (const auto& s : slots_) b += s->bytes();
    return b;
  }

 private:
  // Gathering whole tensors is a collective that reuses the shards' exchange buffers.
  GptCpuState& mut() const { return const_cast<GptCpuState&>(state_); }

  void take_batch(const int32_t* inputs, const int32_t* targets) {
    const int64_t V = config_.vocab_size, N = options_.batch * options_.seq;
    for (int64_t i = 0; i < N; ++i)
      if (inputs[i] < 0 || inputs[i] >= V)
        fail("token id {} at position {} is outside the vocabulary 0..{}: the data does not match "
             "model.vocab_size", inputs[i], i, V - 1);
    std::copy(inputs, inputs + N, inputs_.begin());
    has_targets_ = targets != nullptr;
    if (!has_targets_) return;
    for (int64_t i = 0; i < N; ++i)
      if (targets[i] < 0 || targets[i] >= V)
        fail("target id {} at position {} is outside the vocabulary 0..{}", targets[i], i, V - 1);
    std::copy(targets, targets + N, targets_.begin());
  }

  // The loss on every stage: the last stage computed it.
  float pipeline_loss(double loss) {
    if (place_.stages == 1) return static_cast<float>(loss);
    double d = place_.last() ? loss : 0.0;
    place_.pipeline->allreduce_sum(&d, 1);
    return static_cast<float>(d);
  }

  void receive(float* data, int64_t n, int peer) {
    Timer t;
    place_.pipeline->recv(data, n, peer);
    wait_s_ += t.seconds();
  }

  // This stage's forward of micro-batch m with activation set `slot`; returns its loss on
  // the last stage.
  float stage_forward(int m, int slot) {
    GptBlocks& b = *slots_[size_t(slot)];
    const int64_t rows = b.dims().B * options_.seq, boundary = b.dims().R * config_.n_embd;
    const int32_t* tokens = inputs_.data() + m * rows;
    if (place_.first()) {
      float* emb = state_.unit_params(0, true);
      state_.prefetch_params(place_.end_layer > place_.first_layer ? 1 + int(place_.first_layer) : -1);
      b.embedding_forward(tokens, emb, wpe(emb));
    } else {
      receive(b.stage_input(), boundary, place_.stage - 1);
    }
    // With ZeRO-3 the next block's parameters travel while this one computes.
    const int U = units();
    const int after_layers = place_.last() ? U - 1 : -1;
    for (int64_t l = place_.first_layer; l < place_.end_layer; ++l) {
      float* w = state_.unit_params(1 + int(l), true);
      state_.prefetch_params(l + 1 < place_.end_layer ? 2 + int(l) : after_layers);
      b.layer_forward(l, layer_views(state_.layout(), w));
    }
    if (!place_.last()) {
      place_.pipeline->send(b.stage_output(), boundary, place_.stage + 1);
      return 0.0f;
    }
    float* lnf = state_.unit_params(U - 1, true);
    return b.head_forward(lnf, lnf_bias(lnf), head_weights(lnf),
                          has_targets_ ? targets_.data() + m * rows : nullptr);
  }

  void stage_backward(int m, int slot, float grad_multiplier) {
    GptBlocks& b = *slots_[size_t(slot)];
    const int64_t rows = b.dims().B * options_.seq, boundary = b.dims().R * config_.n_embd;
    const int U = units();
    float* g_emb = nullptr;
    if (place_.last()) {
      state_.prefetch_params(place_.end_layer > place_.first_layer ? int(place_.end_layer) : -1);
      float* lnf = state_.unit_params(U - 1, false);
      float* g_lnf = state_.unit_grads(U - 1, true);
      float* g_head = g_lnf + (state_.layout().lm_head() - state_.layout().lnf_w());
      if (config_.tied()) g_head = g_emb = state_.unit_grads(0, true);
      b.head_backward(grad_multiplier, lnf, head_weights(lnf), g_lnf, lnf_bias(g_lnf), g_head,
                      targets_.data() + m * rows);
      state_.unit_done(U - 1, g_lnf);
      if (g_emb && !place_.first()) state_.unit_done(0, g_emb);  // the LM head's copy
    } else {
      receive(b.stage_output_grad(), boundary, place_.stage + 1);
    }
    for (int64_t l = place_.end_layer - 1; l >= place_.first_layer; --l) {
      float* g = state_.unit_grads(1 + int(l), true);
      float* w = state_.unit_params(1 + int(l), true);
      state_.prefetch_params(l > place_.first_layer ? int(l) : -1);  // layer l - 1's
      b.layer_backward(l, layer_views(state_.layout(), w), layer_views(state_.layout(), g));
      state_.unit_done(1 + int(l), g);
    }
    if (!place_.first()) {
      place_.pipeline->send(b.stage_input_grad(), boundary, place_.stage - 1);
      return;
    }
    if (!g_emb) g_emb = state_.unit_grads(0, true);
    b.embedding_backward(inputs_.data() + m * rows, g_emb, wpe(g_emb));
    state_.unit_done(0, g_emb);
  }

  int units() const { return state_.layout().units(); }
  // The position embedding in the embeddings' unit (none in the llama family).
  float* wpe(float* emb) const {
    return config_.learned_positions() ? emb + state_.layout().wpe() : nullptr;
  }
  // The final LayerNorm's bias in the final unit (none in the llama family).
  float* lnf_bias(float* lnf) const { return config_.has_bias() ? lnf + config_.n_embd : nullptr; }
  // The LM head's weight: the embeddings' buffer when tied (it still holds them: no other
  // block uses it), else the final unit's own tensor.
  float* head_weights(float* lnf) {
    if (config_.tied()) return state_.unit_params(0, false);
    return lnf + (state_.layout().lm_head() - state_.layout().lnf_w());
  }

  GptConfig config_;
  GptRunOptions options_;
  ops::Backend ops_;  // a copy of the backend's table (a timed one while profiled); blocks refer to it
  GptPlacement place_;
  GptCpuState state_;
  std::vector<std::unique_ptr<GptBlocks>> slots_;  // activations of micro-batches in flight
  pipe::StageSchedule schedule_;
  int micro_ = 1;
  bool self_sync_ = false, sync_ = true;
  double wait_s_ = 0.0;
  std::vector<int32_t> inputs_, targets_;
  bool has_targets_ = false;
};

}  // namespace

std::unique_ptr<GptModel> make_gpt_cpu(const GptConfig& c, const GptRunOptions& o) {
  return std::make_unique<GptCpu>(c, o);
}

}  // namespace aiscale::nn
