// Where the CPU GPT model's parameters, gradients and AdamW moments live on one rank, and
// the exchanges that keep them consistent across the layout:
// - the blocks this rank holds (units of gpt_shard.h: the embeddings, each layer, the
//   final norm with an untied LM head): all of them, or a pipeline stage's layers (the
//   first stage with the embeddings, the last with the final norm and, when the LM head is
//   tied, a copy of the embeddings for it, whose gradient is summed with the first
//   stage's);
// - of each block, this rank's tensor-parallel slice (gpt_shard.h);
// - whole, or (ZeRO-2/3) as shards over the data-parallel group (optim/zero_shards.h).
// With one rank and no layout it is one flat buffer per kind in GptLayout order, the plain
// model's.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "aiscale/core/tensor.h"
#include "aiscale/nn/models/gpt.h"
#include "aiscale/nn/models/gpt_shard.h"
#include "aiscale/optim/zero_shards.h"
#include "aiscale/parallel/tensor/regions.h"

namespace aiscale::nn {

struct GptPlacement {
  parallel::tensor::TensorGroup tensor;
  parallel::Communicator* data = nullptr;       // null: one data-parallel rank
  parallel::Communicator* pipeline = nullptr;   // null: one stage
  parallel::Communicator* embedding = nullptr;  // first and last stage (tied embeddings)
  int stage = 0, stages = 1;
  int64_t first_layer = 0, end_layer = 0;       // this stage's layers
  int zero_stage = 0;                           // 2, 3: sharded over `data`
  bool first() const { return stage == 0; }
  bool last() const { return stage + 1 == stages; }
};

class GptCpuState {
 public:
  GptCpuState(const GptConfig& c, const GptRunOptions& o, const GptPlacement& place);

  const GptShardLayout& layout() const { return layout_; }
  bool holds(int unit) const { return offset_[unit] >= 0; }

  // A block's parameters: in the flat buffer, or (ZeRO-3) its gather buffer, filled from
  // the shards when `gather`.
  float* unit_params(int u, bool gather);
  // ZeRO-3: starts gathering block u's parameters while the current block computes (the
  // next unit_params(u, true) completes it); otherwise, or for u < 0, nothing.
  void prefetch_params(int u);
  // A block's gradients: in the flat buffer, or (ZeRO-2/3) a buffer of its own, zeroed
  // when `fresh`, whose sum over the ranks unit_done adds into the shards.
  float* unit_grads(int u, bool fresh);
  // A block's backward (of one micro-batch) is complete.
  void unit_done(int u, float* g);
  // After the last backward of a step: gradients summed over the data group (when the
  // model synchronises them itself) and the tied embeddings' over the first and last
  // stage.
  void finish_backward(bool self_sync);

  void zero_grad() { grads_.zero(); }
  // Sum of squares of the model's gradients, each value once (collective when `self_sync`).
  double grad_sum_squares(bool self_sync);
  void update(const ops::Backend& ops, const ops::AdamWParams& hp, bool decay_embeddings);

  // Whole-model copies in GptLayout order (collective over the layout's groups).
  enum class Kind { params, grads, m, v };
  void to_full(Kind k, float* out);
  void from_full(Kind k, const float* in);
  // The same for the full range [begin, begin + count) only, without a whole-model buffer:
  // each rank adds the values it holds (its shard, its slice, its stage's blocks; the
  // replicated ones from tensor rank 0) into the zeroed range, which is then summed over
  // the groups that split them (collective over the layout's groups). from_full_range is
  // local: each rank keeps the part of the range it holds.
  void to_full_range(Kind k, int64_t begin, int64_t count, float* out);
  void from_full_range(Kind k, int64_t begin, int64_t count, const float* in);

  float* grad_buffer() { return f32(grads_); }
  float* param_buffer() { return f32(params_); }
  size_t bytes() const;
  size_t optimizer_bytes() const;

 private:
  static float* f32(Arena& a) { return static_cast<float*>(a.data()); }
  Arena& arena(Kind k) {
    if (k == Kind::m || k == Kind::v) ensure_moments();
    return k == Kind::params ? params_ : k == Kind::grads ? grads_ : k == Kind::m ? m_ : v_;
  }
  // The AdamW moments are allocated when first used: a model whose optimizer runs outside
  // it (the trainer's data-parallel wrappers, optim/optimizer.h) never holds them.
  void ensure_moments();
  bool sharded(Kind k) const { return shards_ && (k != Kind::params || place_.zero_stage == 3); }
  // The copy of the embeddings a last stage (not also the first) holds for its tied LM
  // head (an untied one is the final unit's own tensor).
  bool mirror(int u) const { return u == 0 && place_.last() && !place_.first() && config_.tied(); }
  // Calls fn(unit, local begin, local end, tensor, index) for each piece of a tensor this
  // rank updates (its shard's, with ZeRO-2/3); `index` is the piece's position in grads_,
  // m_ and v_ (and params_ with ZeRO-3).
  void for_each_piece(const std::function<void(int, int64_t, int64_t, const ShardedTensor&,
                                               int64_t)>& fn) const;
  // fn(unit index, held offset, full offset, count) for each run of a held unit's values
  // inside the full range [begin, end) (skipping the tied-embedding mirror and, unless
  // `replicated`, the tensors every tensor rank holds whole).
  void for_each_run_in(int64_t begin, int64_t end, bool mirrors, bool replicated,
                       const std::function<void(int, int64_t, int64_t, int64_t)>& fn) const;
  // This rank's values of `k` as the local (tensor-slice) layout, blocks not held zero.
  std::vector<float> local_values(Kind k);

  GptConfig config_;
  GptPlacement place_;
  GptShardLayout layout_;
  std::vector<int> held_;         // units held, ascending (their order in the buffers)
  std::vector<int64_t> offset_;   // per unit: its start in the buffers, -1 when not held
  std::vector<int> held_index_;   // per unit: its index in held_, -1
  int64_t size_ = 0;              // values of the held units
  std::optional<optim::ZeroShards> shards_;
  Arena params_, grads_, m_, v_;
  int64_t moment_values_ = 0;  // of m_ and v_ once allocated
  Arena gathered_;    // ZeRO-3: the blocks' gathered parameters
  Arena grad_units_;  // ZeRO-2/3: the gradients of the blocks in backward
};

}  // namespace aiscale::nn
