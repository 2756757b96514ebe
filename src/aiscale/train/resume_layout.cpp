#include "aiscale/train/resume_layout.h"

#include <algorithm>

#include <fmt/format.h>

#include "aiscale/core/error.h"

namespace aiscale::train {
namespace {

std::string text(bool b) { return b ? "true" : "false"; }
std::string text(int64_t v) { return std::to_string(v); }
std::string text(const std::string& s) { return "\"" + s + "\""; }

// The smallest number of micro-batches >= `least` that divides the batch (0: none).
int64_t microbatches_for(int64_t batch, int64_t least) {
  for (int64_t m = std::max<int64_t>(least, 1); m <= batch; ++m)
    if (batch % m == 0) return m;
  return 0;
}

std::string layout_text(int64_t dp, int64_t tp, int64_t pp, int64_t zero) {
  return fmt::format("dp {} x tp {} x pp {}, ZeRO-{}", dp, tp, pp, zero);
}

std::string batch_text(int64_t dp, int64_t batch, int64_t accum, int64_t seq) {
  return fmt::format("dp {} x batch_size {} x grad_accum {} x seq_len {}", dp, batch, accum, seq);
}

}  // namespace

std::vector<std::string> reset_old_layout_keys(TrainConfig& c, int world,
                                               const std::vector<std::string>& set_keys) {
  std::vector<std::string> notes;
  // Resets `key` (a field of c) to `to` with a note, unless the command line set it.
  auto reset = [&](const std::string& key, auto& field, auto to, const std::string& why) {
    if (std::find(set_keys.begin(), set_keys.end(), key) != set_keys.end()) return;
    notes.push_back(fmt::format("{} = {} -> {}: {}", key, text(field), text(to), why));
    field = to;
  };
  const bool gpu = c.device == "cuda";
  const int64_t tp = c.tensor_parallel, pp = c.pipeline_parallel;

  // Micro-batches split a pipeline's batch.
  if (pp == 1 && c.microbatches > 1) {
    reset("parallel.microbatches", c.microbatches, int64_t{1},
          "micro-batches split the batch over pipeline stages, and parallel.pipeline_parallel "
          "= 1: the batch runs whole (the same rows per step)");
  } else if (pp > 1) {
    const int64_t least = c.pipeline_schedule == "1f1b" ? pp : 1;
    if (c.microbatches < least || c.batch_size % c.microbatches != 0)
      if (const int64_t m = microbatches_for(c.batch_size, least))
        reset("parallel.microbatches", c.microbatches, m,
              fmt::format("{} stage(s) of the {} schedule over train.batch_size = {} take the "
                          "smallest count of at least {} that divides the batch",
                          pp, c.pipeline_schedule, c.batch_size, least));
  }
  // Sequence parallelism splits the tokens of a micro-batch over the tensor ranks.
  if (c.sequence_parallel && tp == 1)
    reset("parallel.sequence_parallel", c.sequence_parallel, false,
          "it splits the LayerNorm regions over the tensor ranks, and "
          "parallel.tensor_parallel = 1 has none");
  else if (c.sequence_parallel && c.microbatches > 0 &&
           (c.batch_size / c.microbatches * c.seq_len) % tp != 0)
    reset("parallel.sequence_parallel", c.sequence_parallel, false,
          fmt::format("the {} tokens of a micro-batch do not split over {} tensor ranks",
                      c.batch_size / c.microbatches * c.seq_len, tp));
  // ZeRO stages the new layout runs.
  if (!gpu && c.zero_stage == 1 && (tp > 1 || pp > 1))
    reset("parallel.zero_stage", c.zero_stage, int64_t{2},
          "ZeRO-1 on CPU ranks shards the optimizer state of plain data parallelism; with "
          "tensor or pipeline parallelism ZeRO-2 keeps it sharded");
  if (pp > 1 && c.zero_stage == 3)
    reset("parallel.zero_stage", c.zero_stage, int64_t{gpu ? 1 : 2},
          fmt::format("ZeRO-3 does not combine with pipeline stages; ZeRO-{} keeps the optimizer "
                      "state sharded over the data-parallel copies", gpu ? 1 : 2));
  if (gpu && pp > 1 && c.zero_stage == 2)
    reset("parallel.zero_stage", c.zero_stage, int64_t{1},
          "pipeline stages on GPU ranks run with ZeRO 0 or 1");
  if (c.offload_optimizer && (!gpu || c.zero_stage != 3))
    reset("parallel.offload_optimizer", c.offload_optimizer, false,
          fmt::format("it keeps ZeRO-3's optimizer state on the host of GPU ranks, and this run "
                      "has train.device = \"{}\", parallel.zero_stage = {}", c.device, c.zero_stage));
  else if (c.offload_optimizer && tp > 1)
    reset("parallel.offload_optimizer", c.offload_optimizer, false,
          "it does not run with parallel.tensor_parallel > 1 on GPU ranks");
  // The gradient exchange of the old layout.
  if (gpu && (pp > 1 || c.zero_stage >= 2)) {
    const std::string why = pp > 1 ? "pipeline stages on GPU ranks sum fp32 gradients with the "
                                     "communicator's own collectives"
                                   : "ZeRO-2/3 on GPU ranks reduce fp32 gradients with the "
                                     "communicator's own collectives";
    if (c.grad_comm != "fp32") reset("parallel.grad_comm", c.grad_comm, std::string("fp32"), why);
    if (c.grad_transport == "copy-engine")
      reset("parallel.grad_transport", c.grad_transport, std::string("nccl"), why);
  }
  const bool model_parallel = tp > 1 || pp > 1;
  if (gpu && c.allreduce != "library" && (model_parallel || c.zero_stage != 0)) {
    reset("parallel.allreduce", c.allreduce, std::string("library"),
          "the hand-written GPU all-reduces sum the buckets of plain data parallelism, without "
          "ZeRO, tensor or pipeline parallelism");
  }
  if (c.ranks_per_node > 0 && c.allreduce != "hierarchical")
    reset("parallel.ranks_per_node", c.ranks_per_node, int64_t{0},
          "it sets the nodes of the hierarchical all-reduce, which this run does not use");
  const int64_t model_ranks = tp * pp;
  const int64_t dp = c.communicator == "none" ? 1 : world / std::max<int64_t>(model_ranks, 1);
  if (c.grad_mixing == "adasum" &&
      (gpu || model_parallel || c.zero_stage >= 2 || (dp & (dp - 1)) != 0))
    reset("parallel.grad_mixing", c.grad_mixing, std::string("average"),
          fmt::format("AdaSum combines the whole gradients of a power-of-two number of CPU "
                      "data-parallel ranks, and this run has {}",
                      layout_text(dp, tp, pp, c.zero_stage) + (gpu ? " on GPUs" : "")));
  if (c.compression != "none" && (gpu || model_parallel || c.zero_stage >= 2))
    reset("parallel.compression", c.compression, std::string("none"),
          "it compresses the whole gradients of CPU data parallelism, which tensor or pipeline "
          "parallelism, ZeRO-2/3 and GPU ranks do not exchange");
  return notes;
}

TrainConfig load_resumed_config(const std::string& path, const std::vector<std::string>& overrides,
                                int world, std::vector<std::string>* notes) {
  return load_train_config(path, overrides, [&](TrainConfig& c, const std::vector<std::string>& keys) {
    *notes = reset_old_layout_keys(c, world, keys);
  });
}

std::vector<std::string> resume_notes(const CheckpointState& s, const TrainConfig& c,
                                      const ParallelLayout& l, const std::string& where) {
  if (s.seq_len > 0 && s.seq_len != c.seq_len)
    fail("checkpoint '{}' was trained with train.seq_len = {}, this run has {}: the data position "
         "counts samples of seq_len + 1 tokens in an order drawn over them, which another length "
         "does not continue; resume with --set train.seq_len={}", where, s.seq_len, c.seq_len,
         s.seq_len);
  std::vector<std::string> notes;
  if (s.position_converted)
    notes.push_back(fmt::format(
        "the checkpoint counts its data position in global batches (an older aiscale): "
        "converted to sample {} of epoch {} ({} global batches x {} rank(s) x batch_size {})", s.data.sample,
        s.data.epoch, s.world_size > 0 && s.batch_size > 0 ? s.data.sample / (s.world_size * s.batch_size) : 0,
        s.world_size, s.batch_size));
  const std::string before = layout_text(s.world_size, s.tensor_parallel, s.pipeline_parallel, s.zero_stage);
  const std::string after = layout_text(l.dp, l.tp, l.pp, c.zero_stage);
  if (before != after)
    notes.push_back(fmt::format("the checkpoint was written by {}, this run is {}: its weights "
                                "and AdamW moments are whole tensors, each rank takes the part "
                                "the new layout gives it", before, after));
  const int64_t old_tokens = tokens_per_step(s), new_tokens = c.tokens_per_step(l.dp);
  if (old_tokens > 0 && old_tokens != new_tokens)
    notes.push_back(fmt::format(
        "tokens per step change from {} ({}) to {} ({}): the data continues from sample {} of "
        "epoch {} in the same order, {} samples per step instead of {}; the learning-rate "
        "schedule still counts steps", old_tokens,
        batch_text(s.world_size, s.batch_size, s.grad_accum, s.seq_len), new_tokens,
        batch_text(l.dp, c.batch_size, c.grad_accum, c.seq_len), s.data.sample, s.data.epoch,
        l.dp * c.batch_size * c.grad_accum, s.world_size * s.batch_size * s.grad_accum));
  if (s.seed != c.seed)
    notes.push_back(fmt::format("train.seed changes from {} to {}: the rest of epoch {} is drawn "
                                "in another order (from sample {})", s.seed, c.seed, s.data.epoch,
                                s.data.sample));
  return notes;
}

}  // namespace aiscale::train
