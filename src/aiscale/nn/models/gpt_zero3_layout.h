// Where the GPU GPT model's ZeRO-3 keeps its parameters: the units that are gathered as
// wholes, each rank's shard of every unit, and how shard positions map to the flat
// parameter layout (nn/models/gpt_layout.h) that checkpoints and the optimiser's weight
// decay speak.
//
// Under tensor parallelism the "flat layout" is the tensor rank's local buffer (its
// nn::GptShardLayout, the CUDA model's: its slice of the vocabulary, already padded to the
// GEMMs' rows, or the whole vocabulary): the same units, each the rank's slice of a layer,
// sharded over the rank's data-parallel group.
// With one tensor rank that buffer is the GPT layout itself and so are the shards.
//
// Units are ranges of the *working layout* (the flat layout with the LM head's padded
// vocabulary rows after wte, so that a gathered unit is exactly the buffer the kernels
// read):
//   unit 0          the embeddings: wte (vocab rows, then the zero padded rows), wpe
//   unit 1 + l      transformer layer l (its flat range, in the same order)
//   unit L + 1      the final LayerNorm (weight, bias)
// Units 0 and L + 1 are gathered once per step and kept ("resident": the LM head and
// the embedding backward read wte at both ends of the step); the layers pass through
// two rotating buffers. Each unit is cut into `world` equal shards of a multiple of
// kAlign values (the tail padded with zeros): rank r owns [begin + r * shard, ...) of the
// unit and keeps its shards of all units one after another in its shard buffer (master
// weights, AdamW moments, gradients and the working copy's shard alike).
//
// Plain C++ (no CUDA) so that the geometry is tested on the CPU.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "aiscale/nn/models/gpt_layout.h"
#include "aiscale/nn/models/gpt_shard.h"

namespace aiscale::nn {

class GptZero3Layout {
 public:
  static constexpr int64_t kAlign = 64;  // values: 256-byte aligned fp32 shards

  // vocab_padded: the working layout's vocabulary rows (>= the token embedding's rows).
  GptZero3Layout(const nn::GptLayout& layout, int64_t vocab_padded, int world, int rank);
  // A tensor rank's local buffer (every layer held: no pipeline stage).
  GptZero3Layout(const nn::GptShardLayout& layout, int64_t vocab_padded, int world, int rank);

  int world() const { return world_; }
  int rank() const { return rank_; }
  int units() const { return static_cast<int>(bounds_.size()) - 1; }
  static int layer_unit(int64_t l) { return 1 + static_cast<int>(l); }
  int lnf_unit() const { return units() - 1; }

  // Unit u's range of the working layout.
  int64_t unit_begin(int u) const { return bounds_[static_cast<size_t>(u)]; }
  int64_t unit_end(int u) const { return bounds_[static_cast<size_t>(u) + 1]; }
  int64_t unit_size(int u) const { return unit_end(u) - unit_begin(u); }
  // Values of one rank's shard of unit u, and of the unit gathered (world x shard).
  int64_t shard(int u) const { return shard_[static_cast<size_t>(u)]; }
  int64_t padded(int u) const { return shard(u) * world_; }
  // Where this rank's shard of unit u starts in its shard buffer, and that buffer's size.
  int64_t shard_offset(int u) const { return offset_[static_cast<size_t>(u)]; }
  int64_t shards_size() const { return offset_.back(); }
  // The part of unit u (working layout) that this rank owns; may be empty.
  int64_t owned_begin(int u) const;
  int64_t owned_end(int u) const;

  // The largest gathered layer and the two resident units side by side.
  int64_t layer_padded() const { return padded(layer_unit(0)); }
  int64_t resident_size() const { return padded(0) + padded(lnf_unit()); }
  // Where the final LayerNorm's gathered unit starts in the resident buffer.
  int64_t resident_lnf() const { return padded(0); }

  // A run of consecutive values that lie in both layouts: working-layout positions
  // [work, work + n) are flat positions [flat, flat + n).
  struct Run {
    int64_t work = 0, flat = 0, n = 0;
  };
  // The runs of working-layout range [begin, end), skipping the padded vocabulary rows.
  std::vector<Run> runs(int64_t begin, int64_t end) const;

  // This rank's shard buffer cut where its values change between tensors split over the
  // tensor ranks and replicated ones (`layout`: the one this geometry was made from), in
  // order, adjacent pieces of a kind merged: the gradient norm counts the split tensors'
  // squares on every tensor rank and the replicated ones once. The padding is in none.
  struct Piece {
    int64_t offset = 0, n = 0;  // in the shard buffer
    bool replicated = false;
  };
  std::vector<Piece> pieces(const nn::GptShardLayout& layout) const;

  // Host copies between a whole flat vector and this rank's shard buffer (shards_size()
  // values; padding left zero), and between a gathered unit (padded(u) values, working
  // layout from unit_begin(u)) and the flat vector.
  void flat_to_shards(const float* flat, float* shards) const;
  void unit_to_flat(int u, const float* gathered, float* flat) const;
  // Calls fn(flat, index, n) for each run of flat positions [begin, end) that this rank
  // owns, in order: flat positions [flat, flat + n) are at [index, index + n) of its shard
  // buffer (a streamed checkpoint's range, each value on exactly one rank of the group).
  void owned_runs(int64_t begin, int64_t end,
                  const std::function<void(int64_t, int64_t, int64_t)>& fn) const;

 private:
  int world_, rank_;
  int64_t vocab_rows_ = 0, padded_rows_end_ = 0;  // working positions of the padded rows
  std::vector<int64_t> bounds_, shard_, offset_;
};

}  // namespace aiscale::nn
