// GPT-3 175B's layer structure (96 layers, its 2048 context) at a width two CPU cores train
// in seconds, on 2 MPI ranks in the layouts a 175B run takes: ZeRO-3 over dp 2, and tensor
// x pipeline parallelism (tp 2 in one run, pp 2 in another: 2 ranks hold either, not both).
// These layouts shard the state, so their checkpoints stream a range at a time
// (train/checkpoint_stream.h). Each writes a checkpoint at step 2 and runs to step 4; the
// same layout resumed at step 2 must continue to the bit (every range put back where it
// was), and the checkpoint must hold whole tensors (the one-rank run's weights).
#include <gtest/gtest.h>

#include <cmath>

#include "aiscale/train/checkpoint.h"
#include "../support/run_support.h"

using namespace aiscale;
using namespace aiscale::testsupport;

namespace {

constexpr const char* kShape =
    "model.n_layer=96 model.n_head=2 model.n_embd=16 model.block_size=2048 "
    "train.seq_len=16 train.steps=4 train.warmup_steps=1 train.eval_batches=1 "
    "run.checkpoint_every=2 run.keep_checkpoints=3";

struct Layout {
  const char* name;
  int ranks;
  const char* keys;
  int batch;
};
const Layout kLayouts[] = {
    {"one", 1, "", 4},
    {"zero3", 2, "parallel.zero_stage=3", 2},
    {"tp2", 2, "parallel.tensor_parallel=2", 4},
    {"pp2", 2, "parallel.pipeline_parallel=2 parallel.microbatches=2", 4},
};

std::string launch(int ranks) {
  return ranks == 1 ? "" : "launch -n " + std::to_string(ranks) + " --threads-per-rank 1 -- ";
}

TEST(Gpt3Layouts, ShardedCheckpointsStreamAndResumeBitIdentical) {
  const fs::path dir = temp_dir("gpt3-layouts");
  write_byte_shards(dir);
  const std::string config = tiny_config(dir);
  auto ckpt = [&](const std::string& run, int step) {
    return train::read_checkpoint(
        (dir / "runs" / run / "checkpoints" / train::checkpoint_name(step)).string(), true);
  };
  for (const Layout& l : kLayouts) {
    auto r = run_aiscale(launch(l.ranks) + "train -q -c " + config + " --set " + kShape +
                         " train.batch_size=" + std::to_string(l.batch) + " " + l.keys +
                         " run.name=" + l.name);
    ASSERT_EQ(r.exit_code, 0) << l.name << ": " << r.output;
  }
  const train::CheckpointState one = ckpt("one", 2);
  EXPECT_EQ(one.model.n_layer, 96);
  for (const Layout& l : kLayouts) {
    const train::CheckpointState s = ckpt(l.name, 2);
    ASSERT_EQ(s.params.size(), one.params.size()) << l.name;
    EXPECT_LT(vector_distance(one.params, s.params), 1e-5) << l.name;
    EXPECT_LT(vector_distance(one.m, s.m), 1e-4) << l.name;
    EXPECT_LT(vector_distance(one.v, s.v), 1e-4) << l.name;
    if (l.ranks == 1) continue;
    // Resumed at step 2 in its own layout: steps 3 and 4 as the uninterrupted run's.
    const std::string again = std::string(l.name) + "-again";
    const fs::path to = dir / "runs" / again;
    fs::remove_all(to);
    fs::copy(dir / "runs" / l.name, to, fs::copy_options::recursive);
    auto r = run_aiscale(launch(l.ranks) + "train -q --resume " + to.string() + " --checkpoint 2");
    ASSERT_EQ(r.exit_code, 0) << again << ": " << r.output;
    auto a = read_metrics(dir / "runs" / l.name), b = read_metrics(to);
    ASSERT_EQ(a.size(), 4u) << l.name;
    ASSERT_EQ(b.size(), 4u) << again;
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(double(a[i]["loss"]), double(b[i]["loss"])) << again << " step " << i + 1;
      EXPECT_EQ(double(a[i]["grad_norm"]), double(b[i]["grad_norm"])) << again << " step " << i + 1;
    }
    // The resumed run's own checkpoint of step 4 holds the same bytes as the uninterrupted one's.
    for (const char* f : {"model.safetensors", "optimizer.bin"})
      EXPECT_EQ(read_bytes(dir / "runs" / l.name / "checkpoints" / train::checkpoint_name(4) / f),
                read_bytes(to / "checkpoints" / train::checkpoint_name(4) / f))
          << again << " " << f;
  }
}

}  // namespace
