// The parameters one tensor-parallel rank holds: the GPT layout (gpt_layout.h) with each
// matrix cut to this rank's slice. Column-parallel layers (the attention's QKV projection,
// the MLP's first layer) keep a slice of their output rows (the QKV weight a slice of each
// of Q, K and V, so a rank holds whole heads), row-parallel layers (the attention and MLP
// output projections) a slice of their input columns, the token embedding (tied LM head) a
// slice of the vocabulary; LayerNorms, the position embedding and the row-parallel biases
// are whole on every rank (replicated). With one rank it is the GPT layout itself.
// With vocab_parallel = false the token embedding is whole on every rank too.
//
// The vocabulary split: every rank holds vocab_slice() rows of the token embedding, rank r
// the token ids [r vocab_slice(), r vocab_slice() + vocab_rows()). vocab_slice() is
// ceil(V / tp) rounded up to vocab_align rows, so the last ranks' slices may end in padding
// rows (zero, no token maps to them): every rank's local buffer has the same length and its
// tensors the same offsets, whether or not tp divides the vocabulary. The CPU model takes
// vocab_align = 1 (no padding where tp divides the vocabulary); the CUDA model aligns the
// slices for its GEMMs (gpu_vocab_align()). Both compute over the real rows only. An
// untied LM head (llama family) is split by vocabulary rows the same way.
//
// The llama family: the QKV weight's three row blocks are unequal (Q: C rows, K and V:
// kv_rows each), each split over the ranks (whole query and key/value heads per rank:
// kv_heads % tp == 0); gate_up's two blocks (gate, up) likewise; no biases.
//
// Local flat order is the GPT layout's order. The local buffer splits into units for
// ZeRO: the embeddings, each layer, the final LayerNorm (with an untied LM head).
//
// A pipeline stage's layout (first_layer, end_layer) holds the embeddings, the layers
// [first_layer, end_layer) and the final LayerNorm: layer_begin(l) is defined for the
// stage's layers only, and the units are the embeddings, the stage's layers in order and
// the final norm.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "aiscale/nn/models/gpt_layout.h"

namespace aiscale::nn {

enum class ShardKind { replicated, rows, columns };

struct ShardedTensor {
  GptParamInfo full;  // name, full shape, offset in the full flat buffer, layer
  ShardKind kind = ShardKind::replicated;
  // rows: the slice is taken of each of `parts` row blocks of part_rows[p] rows (GPT-2's
  // QKV: 3 of C; the llama family's: C, then K and V of kv_rows; its gate_up: 2 of F).
  int parts = 1;
  int64_t part_rows[3] = {};
  int64_t offset = 0;      // in this rank's flat buffer
  int64_t numel = 0;       // values this rank holds
};

class GptShardLayout {
 public:
  GptShardLayout(const GptConfig& c, int tp, int rank, bool vocab_parallel = true,
                 int64_t first_layer = 0, int64_t end_layer = -1, int64_t vocab_align = 1);

  const GptConfig& config() const { return config_; }
  int tp() const { return tp_; }
  int rank() const { return rank_; }
  const std::vector<ShardedTensor>& tensors() const { return tensors_; }
  int64_t size() const { return size_; }  // values this rank holds

  int64_t wpe() const { return wpe_; }
  // The token embedding's rows held: vocab_slice() (with padding), the real ones
  // vocab_rows(), for the token ids from vocab_begin(). Unsplit: the whole vocabulary.
  bool vocab_parallel() const { return vocab_parallel_; }
  int64_t vocab_slice() const { return vocab_slice_; }
  int64_t vocab_rows() const { return vocab_rows_; }
  int64_t vocab_begin() const { return vocab_begin_; }
  // The layers held: [first_layer(), end_layer()) (all of them unless a pipeline stage's).
  int64_t first_layer() const { return first_; }
  int64_t end_layer() const { return end_; }
  int64_t layers() const { return end_ - first_; }
  int64_t layers_begin() const { return layers_begin_; }
  int64_t layer_size() const { return layer_size_; }
  int64_t layer_begin(int64_t l) const { return layers_begin_ + (l - first_) * layer_size_; }
  int64_t in_layer(GptBlockParam p) const { return block_offset_[static_cast<int>(p)]; }
  int64_t at(int64_t l, GptBlockParam p) const { return layer_begin(l) + in_layer(p); }
  int64_t lnf_w() const { return layer_begin(end_); }
  int64_t lnf_b() const { return lnf_w() + config_.n_embd; }
  // An untied LM head (the llama family's lm_head): this rank's vocab_slice() rows, after
  // the final norm, in the final norm's unit.
  int64_t lm_head() const { return lnf_w() + (config_.has_bias() ? 2 : 1) * config_.n_embd; }
  // Whether a tensor is split by vocabulary rows (the token embedding, an untied LM head).
  static bool vocab_tensor(const GptParamInfo& p) {
    return p.name == "wte.weight" || p.name == "embed_tokens.weight" ||
           p.name == "lm_head.weight";
  }

  // ZeRO units [begin, end): 0 the embeddings, 1 + i the i-th layer held, layers() + 1 the
  // final norm.
  int units() const { return static_cast<int>(layers()) + 2; }
  int64_t unit_begin(int u) const;
  int64_t unit_end(int u) const { return u + 1 == units() ? size_ : unit_begin(u + 1); }

  // This rank's values of a full flat buffer (GptLayout order) -> its local buffer.
  void extract(const float* full, float* local) const;
  // Writes this rank's values into a full flat buffer (other values untouched); the
  // replicated tensors only when `replicated` (one rank writes them when gathering).
  void place(const float* local, float* full, bool replicated) const;
  // Calls fn(full_offset, local_offset, count) for each run of this rank's values of `t`
  // (one of tensors()) that lies in [begin, end) of the full flat buffer, clipped to it;
  // only the runs that can meet the range are visited (a streamed checkpoint's chunk).
  void runs_in(const ShardedTensor& t, int64_t begin, int64_t end,
               const std::function<void(int64_t, int64_t, int64_t)>& fn) const;
  // Calls fn(begin, end, tensor) for each piece of a tensor inside [begin, end) of the
  // local buffer, in order.
  void for_each_in(int64_t begin, int64_t end,
                   const std::function<void(int64_t, int64_t, const ShardedTensor&)>& fn) const;

 private:
  // Runs of contiguous values: fn(full_offset, local_offset, count).
  void runs(const ShardedTensor& t, const std::function<void(int64_t, int64_t, int64_t)>& fn) const;

  GptConfig config_;
  int tp_ = 1, rank_ = 0;
  bool vocab_parallel_ = false;
  int64_t vocab_slice_ = 0, vocab_rows_ = 0, vocab_begin_ = 0;
  int64_t first_ = 0, end_ = 0;
  std::vector<ShardedTensor> tensors_;
  int64_t size_ = 0, wpe_ = 0, layers_begin_ = 0, layer_size_ = 0;
  int64_t block_offset_[kGptBlockParams] = {};
};

// The rows of a vocabulary slice: ceil(vocab / tp) rounded up to `align`.
int64_t vocab_slice_rows(int64_t vocab, int tp, int64_t align);
// The CUDA model's alignment of its vocabulary slices: 128 rows (the GEMMs' tile) where a
// slice has thousands of rows, else 8 (one 16-byte pack of bf16 values).
int64_t gpu_vocab_align(int64_t vocab, int tp);

}  // namespace aiscale::nn
