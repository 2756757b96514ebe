#include "aiscale/train/rank_buffers.h"

#include <algorithm>

#include <fmt/format.h>

#include "aiscale/core/error.h"
#include "aiscale/core/validate.h"
#include "aiscale/nn/models/gpt_layout.h"
#include "aiscale/nn/models/gpt_shard.h"
#include "aiscale/nn/models/gpt_zero3_layout.h"
#include "aiscale/parallel/pipeline/schedule.h"
#include "aiscale/train/checkpoint_stream.h"
#include "aiscale/train/managed_models.h"

namespace aiscale::train {
namespace {

namespace pipe = parallel::pipeline;

// A rank's tensor slice of the pipeline stage with the most layers (the first of them: it
// holds the embeddings), as the CPU and GPU models lay it out.
nn::GptShardLayout largest_stage(const TrainConfig& c, const ParallelLayout& l) {
  int best = 0;
  int64_t most = -1;
  for (int s = 0; s < l.pp; ++s) {
    const auto layers = pipe::stage_layers(c.model.n_layer, l.pp, s);
    if (layers.end - layers.begin > most) {
      most = layers.end - layers.begin;
      best = s;
    }
  }
  const auto layers = pipe::stage_layers(c.model.n_layer, l.pp, best);
  const int64_t align = c.device == "cuda" ? nn::gpu_vocab_align(c.model.vocab_size, l.tp) : 1;
  return nn::GptShardLayout(c.model, l.tp, 0, true, layers.begin, layers.end, align);
}

// ZeRO's shards of the layout's units over dp ranks: ceil(unit / dp) each, as
// optim::ZeroShards cuts them.
int64_t zero_shards_size(const nn::GptShardLayout& s, int dp) {
  int64_t total = 0;
  for (int u = 0; u < s.units(); ++u) total += (s.unit_end(u) - s.unit_begin(u) + dp - 1) / dp;
  return total;
}

uint64_t bytes_of(int64_t values, uint64_t element) { return static_cast<uint64_t>(values) * element; }

}  // namespace

std::vector<RankBuffer> rank_state_buffers(const TrainConfig& c, const ParallelLayout& l) {
  const nn::GptShardLayout slice = largest_stage(c, l);
  const int64_t local = slice.size();
  std::vector<RankBuffer> out;
  if (c.device == "cuda") {
    // One device allocation: fp32 master weights and AdamW moments (a shard under ZeRO),
    // fp32 gradients (a shard under ZeRO-2/3, padded under ZeRO-1) and the working copy.
    const uint64_t work_bytes = c.precision == "fp32" ? 4 : 2;
    int64_t state = local, grads = local, work = local;
    if (c.zero_stage >= 1 && l.dp > 1) {
      if (c.zero_stage >= 2 && l.pp == 1) {
        const nn::GptZero3Layout z(slice, slice.vocab_slice(), l.dp, 0);
        state = grads = z.shards_size();
        if (c.zero_stage == 3) work = z.shards_size() + z.resident_size() + 2 * z.layer_padded();
      } else {
        state = (local + l.dp - 1) / l.dp;
        grads = state * l.dp;
      }
    }
    const uint64_t optimizer = c.offload_optimizer ? 0 : bytes_of(state, 12);
    out.push_back({"device allocation (model state: master weights, AdamW moments, "
                   "gradients, working copy)",
                   optimizer + bytes_of(grads, 4) + bytes_of(work, work_bytes)});
    if (c.offload_optimizer) out.push_back({"pinned host AdamW state", bytes_of(state, 12)});
    return out;
  }
  const int zero = model_zero_stage(c);
  const int64_t shards = l.dp > 1 && zero >= 2 ? zero_shards_size(slice, l.dp) : local;
  out.push_back({"parameters (fp32)", bytes_of(zero == 3 ? shards : local, 4)});
  out.push_back({"gradients (fp32)", bytes_of(shards, 4)});
  // CPU ZeRO-1 is the trainer's wrapper: its moments are 1/dp of the buckets.
  const int64_t moments = c.zero_stage == 1 && l.dp > 1 ? (local + l.dp - 1) / l.dp : shards;
  out.push_back({"AdamW first moment (fp32)", bytes_of(moments, 4)});
  out.push_back({"AdamW second moment (fp32)", bytes_of(moments, 4)});
  if (zero == 3)
    out.push_back({"gathered blocks (fp32)",
                   bytes_of(slice.unit_end(0) + 3 * slice.layer_size() + c.model.n_embd * 2, 4)});
  return out;
}

uint64_t checkpoint_staging_bytes(const TrainConfig& c, const ParallelLayout& l) {
  // GPU models stream in every layout (nn/models/gpt_cuda_stream.cu), as do host models
  // whose state is sharded; a host model whose ranks hold it whole is snapshotted.
  const bool sharded = l.tp > 1 || l.pp > 1 || (c.zero_stage >= 1 && l.dp > 1);
  if (sharded || c.device == "cuda") return 2 * static_cast<uint64_t>(kCheckpointChunkBytes);
  return bytes_of(c.model.num_params(), 12);
}

void check_rank_buffers(const TrainConfig& c, const ParallelLayout& l) {
  // A split the model does not allow is refused by the model's own checks, which name the
  // key that does not divide (model.n_head, model.n_kv_head, ...): no sizes of it here.
  const nn::GptConfig& m = c.model;
  if (m.n_head % l.tp != 0 || m.n_embd % l.tp != 0 || m.kv_heads() % l.tp != 0 ||
      m.ffn() % l.tp != 0 || l.pp > m.n_layer)
    return;
  for (const RankBuffer& b : rank_state_buffers(c, l))
    if (b.bytes > validate::kMaxBufferBytes)
      fail("one rank of {} would allocate {:.3g} TiB for its {} ({} parameters from the model.* "
           "keys): at most 2^40 bytes per buffer. Shard or split the model: parallel.zero_stage "
           "= 3 over more ranks, parallel.tensor_parallel, parallel.pipeline_parallel",
           describe(l), static_cast<double>(b.bytes) / double(uint64_t{1} << 40), b.name,
           c.model.num_params());
}

}  // namespace aiscale::train
