// The llama family on 2 GPUs: data parallelism against one GPU with the whole batch, and
// the layouts the family does not run on GPUs yet refused with the keys that fix them.
// A small Llama (head size 64, one KV head for two query heads, an untied LM head) on
// byte-level text, bf16.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "../support/run_support.h"
#include "gpu2_support.h"

using namespace aiscale;
using namespace aiscale::testsupport;
using namespace aiscale::testsupport::gpu2;

namespace {

struct LlamaRun {
  fs::path dir;
  std::string cfg;
};

LlamaRun llama_run_dir(const std::string& name, int64_t steps, bool tied) {
  LlamaRun r{temp_dir(name), ""};
  write_byte_shards(r.dir, 400000, 8000);
  const std::string cfg =
      "[model]\npreset = \"llama-tiny\"\nn_layer = 2\nn_head = 2\nn_kv_head = 1\nn_embd = 128\n"
      "ffn_hidden = 352\nblock_size = 64\nvocab_size = 256\ntie_embeddings = " +
      std::string(tied ? "true" : "false") + "\n"
      "[data]\ntrain = \"" + (r.dir / "tiny_train_*.bin").string() + "\"\n"
      "val = \"" + (r.dir / "tiny_val_*.bin").string() + "\"\ntokenizer = \"byte\"\n"
      "[train]\ndevice = \"cuda\"\nprecision = \"bf16\"\nbatch_size = 8\nseq_len = 64\n"
      "steps = " + std::to_string(steps) + "\nwarmup_steps = 5\nlr = 1e-3\neval_batches = 1\n"
      "[run]\ndir = \"" + (r.dir / "runs").string() + "\"\n";
  std::ofstream(r.dir / "llama.toml") << cfg;
  r.cfg = (r.dir / "llama.toml").string();
  return r;
}

// 2 GPUs x 8 against 1 GPU x 16 over 50 steps: the tolerances of the GPT-2 comparison
// (gpu2_support.h's expect_like_one_gpu).
void expect_llama_like_one_gpu(bool tied, const std::string& two_set, const char* what) {
  const auto [dir, cfg] = llama_run_dir(tied ? "gpu2-llama-tied" : "gpu2-llama", 50, tied);
  auto one = run_aiscale("train -q -c " + cfg + " --set train.batch_size=16 run.name=one");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  auto two = run_aiscale("launch -n 2 --threads-per-rank 4 -- train -q -c " + cfg +
                         " --set run.name=two parallel.communicator=nccl " + two_set);
  ASSERT_EQ(two.exit_code, 0) << two.output;
  auto m1 = read_metrics(dir / "runs/one"), m2 = read_metrics(dir / "runs/two");
  ASSERT_EQ(m1.size(), 50u);
  ASSERT_EQ(m2.size(), 50u);
  const double l1 = m1[0]["loss"], l2 = m2[0]["loss"], g1 = m1[0]["grad_norm"], g2 = m2[0]["grad_norm"];
  EXPECT_NEAR(l2, l1, 1e-3 * l1) << what;
  EXPECT_NEAR(g2, g1, 1e-3 * g1) << what;
  const LossComparison c = compare_losses(m1, m2, 1, 51, 1e-2, what);
  EXPECT_LT(c.mean_rel, 3e-3) << what;
  EXPECT_LT(double(m2.back()["loss"]), double(m2.front()["loss"]) - 0.5) << "2-GPU training did not learn";
  const double weight_rel = weight_distance(dir / "runs/one", dir / "runs/two", 50);
  EXPECT_LT(weight_rel, 5e-2) << what;
  std::printf("[gpu2] llama 1 GPU x16 vs 2 GPUs, %s, bf16, 50 steps: step-1 loss %.6f vs %.6f, "
              "grad norm %.6f vs %.6f; loss relative difference max %.2e mean %.2e; final weights "
              "relative L2 difference %.2e\n", what, l1, l2, g1, g2, c.max_rel, c.mean_rel, weight_rel);
}

}  // namespace

// The reducer's buckets over the family's layout (empty biases: layer 0's cuts fall on the
// norms and matrices), the embedding's gradient gathered from every rank's positions, the
// untied head's gradient in the top bucket; and a tied head, whose embedding gradient holds
// both the head's part and the lookup's.
TEST(LlamaGpu2, DdpMatchesOneGpuWithTwiceTheBatch) {
  expect_llama_like_one_gpu(false, "train.batch_size=8", "x8, untied head");
  expect_llama_like_one_gpu(true, "train.batch_size=8 parallel.bucket_mib=0.25",
                            "x8, tied head, 0.25 MiB buckets");
}

TEST(LlamaGpu2, DdpWithGradientAccumulation) {
  expect_llama_like_one_gpu(false, "train.batch_size=4 train.grad_accum=2",
                            "x4 x 2 micro-steps, untied head");
}

// ZeRO-1: the optimiser state sharded along the buckets, whose cuts round up at the layers'
// starts (no biases: a layer's last values complete with that layer); small buckets put
// many cuts inside the layers.
TEST(LlamaGpu2, ZeroOneMatchesOneGpu) {
  expect_llama_like_one_gpu(false, "train.batch_size=8 parallel.zero_stage=1",
                            "x8, ZeRO-1, untied head");
  expect_llama_like_one_gpu(true, "train.batch_size=8 parallel.zero_stage=1 parallel.bucket_mib=0.25",
                            "x8, ZeRO-1, tied head, 0.25 MiB buckets");
}

// ZeRO-3 and ZeRO-2: the layers gathered unit by unit (or kept gathered), the untied head
// gathered with the final norm as a resident unit, its gradient reduce-scattered with it;
// ZeRO-3 with AdamW on the host (the head's weight decay by tensor there).
TEST(LlamaGpu2, ZeroThreeAndTwoMatchOneGpu) {
  expect_llama_like_one_gpu(false, "train.batch_size=8 parallel.zero_stage=3",
                            "x8, ZeRO-3, untied head");
  expect_llama_like_one_gpu(true, "train.batch_size=8 parallel.zero_stage=3",
                            "x8, ZeRO-3, tied head");
  expect_llama_like_one_gpu(false, "train.batch_size=8 parallel.zero_stage=2",
                            "x8, ZeRO-2, untied head");
  expect_llama_like_one_gpu(false, "train.batch_size=8 parallel.zero_stage=3 "
                            "parallel.offload_optimizer=true",
                            "x8, ZeRO-3, optimizer on the host, untied head");
}

// Tensor parallelism: 2 ranks holding half of the query heads, of the KV heads (Q | K | V
// row slices of unequal blocks), of gate and of up, and half of the vocabulary of the
// embedding and of the untied head, against one GPU with the same batch (4 query heads,
// 2 KV heads of 64).
TEST(LlamaGpu2, TensorParallelMatchesOneGpu) {
  const auto [dir, cfg] = llama_run_dir("gpu2-llama-tp", 50, false);
  const std::string shape =
      " model.n_embd=256 model.n_head=4 model.n_kv_head=2 model.ffn_hidden=688";
  auto one = run_aiscale("train -q -c " + cfg + " --set run.name=one" + shape);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  auto two = run_aiscale("launch -n 2 --threads-per-rank 4 -- train -q -c " + cfg +
                         " --set run.name=two parallel.communicator=nccl "
                         "parallel.tensor_parallel=2" + shape);
  ASSERT_EQ(two.exit_code, 0) << two.output;
  auto m1 = read_metrics(dir / "runs/one"), m2 = read_metrics(dir / "runs/two");
  ASSERT_EQ(m1.size(), 50u);
  ASSERT_EQ(m2.size(), 50u);
  const double l1 = m1[0]["loss"], l2 = m2[0]["loss"];
  EXPECT_NEAR(l2, l1, 1e-3 * l1);
  const LossComparison c = compare_losses(m1, m2, 1, 51, 1e-2, "llama tp 2");
  EXPECT_LT(c.mean_rel, 3e-3);
  const double weight_rel = weight_distance(dir / "runs/one", dir / "runs/two", 50);
  EXPECT_LT(weight_rel, 5e-2);
  std::printf("[gpu2] llama 1 GPU vs tp 2, bf16, 50 steps: step-1 loss %.6f vs %.6f; loss "
              "relative difference max %.2e mean %.2e; final weights relative L2 difference "
              "%.2e\n", l1, l2, c.max_rel, c.mean_rel, weight_rel);
}

// Pipeline stages (one layer each, 4 micro-batches of 4): the last stage's head (untied:
// its gradient summed over the stages with the final norm's; tied: the embedding's
// gradient from the first stage's lookup and the last stage's head) against one GPU.
TEST(LlamaGpu2, PipelineStagesMatchOneGpu) {
  expect_llama_like_one_gpu(false, "train.batch_size=16 parallel.pipeline_parallel=2 "
                            "parallel.microbatches=4 parallel.pipeline_schedule=1f1b",
                            "pp 2 (1f1b), untied head");
  expect_llama_like_one_gpu(true, "train.batch_size=16 parallel.pipeline_parallel=2 "
                            "parallel.microbatches=4 parallel.pipeline_schedule=gpipe",
                            "pp 2 (gpipe), tied head");
}

// Refused, naming the keys: tensor ranks that would split a KV head, sequence parallelism,
// and ZeRO-3 with an untied head over a vocabulary that leaves padded rows.
TEST(LlamaGpu2, RefusesOtherLayouts) {
  const auto [dir, cfg] = llama_run_dir("gpu2-llama-refused", 5, false);
  const std::string base = "launch -n 2 --threads-per-rank 4 -- train -q -c " + cfg + " --set ";
  expect_refused(run_aiscale(base + "parallel.zero_stage=3 model.vocab_size=300"),
                 "model.vocab_size");
  expect_refused(run_aiscale(base + "parallel.tensor_parallel=2"), "model.n_kv_head");
  expect_refused(run_aiscale(base + "parallel.tensor_parallel=2 parallel.sequence_parallel=true "
                             "model.n_embd=256 model.n_head=4 model.n_kv_head=2 "
                             "model.ffn_hidden=688"),
                 "parallel.sequence_parallel");
}

int main(int argc, char** argv) { return run_multi_gpu_tests(argc, argv); }
