// The GPU model's state a range at a time (nn/models/gpt_cuda_stream.cu):
// - in this process on one GPU (the plain model, ZeRO-3 with the optimizer on the host; GPT-2
//   and the llama family's untied head, a vocabulary that leaves padded rows): the initial
//   weights are the seed's (gpt_init_params) bit for bit; after a few steps a checkpoint
//   streamed in small ranges is byte for byte the checkpoint of the whole vectors, read back
//   a range at a time into a fresh model it is the same state, and the host staging of the
//   write stays under two ranges whatever the model's size;
// - through `aiscale train` in every layout of 2 ranks (plain data parallelism, ZeRO-1 to 3
//   and ZeRO-3 offloaded, tensor and pipeline parallelism) and of 4 (dp x tp with ZeRO,
//   tp x pp): with a learning rate of 0 the weights stay the seed's, so every layout's
//   streamed checkpoint (over several ranges: the model is larger than one) must hold the
//   one-GPU run's weight files byte for byte, and its AdamW moments (summed in other orders)
//   close to the one-GPU run's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "aiscale/nn/models/gpt.h"
#include "aiscale/train/checkpoint.h"
#include "aiscale/train/checkpoint_stream.h"
#include "../support/run_support.h"
#include "gpu2_support.h"

using namespace aiscale;
using namespace aiscale::testsupport;
using namespace aiscale::testsupport::gpu2;
namespace fs = std::filesystem;

namespace {

nn::GptConfig model_config(bool llama, int64_t layers) {
  nn::GptConfig c;
  c.n_layer = layers;
  c.n_head = 2;
  c.n_embd = 128;
  c.block_size = 64;
  c.vocab_size = 300;  // 384 rows in the working copy: 84 padded ones
  if (llama) {
    c.family = nn::GptFamily::llama;
    c.n_kv_head = 1;
    c.ffn_hidden = 352;
    c.tie_embeddings = false;
  }
  c.validate();
  return c;
}

train::CheckpointState meta_of(const nn::GptConfig& c) {
  train::CheckpointState s;
  s.model = c;
  s.step = 3;
  s.data = {0, 12};
  s.config_toml = "[model]\n";
  s.batch_size = 2;
  s.seq_len = 32;
  return s;
}

// The model's own ranges, `range_bytes` of values each (what data_parallel_source asks of
// a wrapper that streams).
train::CheckpointSource model_source(nn::GptModel& m, int64_t range_bytes) {
  train::CheckpointSource src;
  src.size = m.num_params();
  src.range_values = range_bytes / 4;
  src.get = [&m](train::CheckpointPart part, int64_t begin, int64_t count, float* scratch) {
    if (part == train::CheckpointPart::params) m.get_params_range(begin, count, scratch);
    else m.get_optimizer_state_range(part == train::CheckpointPart::m ? 0 : 1, begin, count, scratch);
    return static_cast<const float*>(scratch);
  };
  return src;
}

// A few AdamW steps on random tokens: the weights move and the moments are not zero.
void train_steps(nn::GptModel& m, int steps) {
  const auto& o = m.options();
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(m.config().vocab_size - 1));
  std::vector<int32_t> x(size_t(o.batch * o.seq)), y(x.size());
  ops::AdamWParams hp;
  hp.lr = 1e-2f;
  for (int s = 1; s <= steps; ++s) {
    for (auto& t : x) t = token(rng);
    for (auto& t : y) t = token(rng);
    m.zero_grad();
    m.forward_backward(x.data(), y.data(), 1.0f);
    hp.step = s;
    m.update(hp);
  }
}

std::vector<std::string> files_of(const fs::path& folder) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(folder)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

struct OneGpuCase {
  const char* what;
  bool llama;
  int zero_stage;
  bool offload;
};

}  // namespace

TEST(StreamGpu2, RangesOnOneGpuAreTheWholeVectorsBitForBit) {
  const OneGpuCase cases[] = {{"gpt2", false, 0, false},
                              {"gpt2, ZeRO-3 with the optimizer on the host", false, 3, true},
                              {"llama, untied head", true, 0, false}};
  const int64_t range_bytes = 4096;  // 1024 values: a transposed weight's rows cut across ranges
  for (const OneGpuCase& k : cases) {
    SCOPED_TRACE(k.what);
    const nn::GptConfig c = model_config(k.llama, 2);
    nn::GptRunOptions o;
    o.batch = 2;
    o.seq = 32;
    o.precision = DType::bf16;
    o.zero_stage = k.zero_stage;
    o.offload_optimizer = k.offload;
    auto model = nn::make_gpt("cuda", c, o);
    ASSERT_TRUE(model->streams_state());
    const size_t n = static_cast<size_t>(c.num_params());
    // The initial weights, drawn a range at a time into the device buffers, are the seed's.
    std::vector<float> params(n);
    model->get_params(params.data());
    EXPECT_TRUE(bitwise_equal(params, nn::gpt_init_params(c, o.seed)));

    train_steps(*model, 3);
    train::CheckpointState whole = meta_of(c);
    whole.params.resize(n);
    whole.m.resize(n);
    whole.v.resize(n);
    model->get_params(whole.params.data());
    model->get_optimizer_state(whole.m.data(), whole.v.data());
    ASSERT_FALSE(bitwise_equal(whole.params, params)) << "the steps changed nothing";

    const fs::path dir = temp_dir("gpu-stream-one");
    const auto a = train::write_checkpoint_streamed(dir.string(), "step_00000001", whole,
                                                    train::vector_source(whole), true, -1);
    const auto b = train::write_checkpoint_streamed(dir.string(), "step_00000002", meta_of(c),
                                                    model_source(*model, range_bytes), true, -1);
    EXPECT_GT(b.ranges, 10);
    EXPECT_LE(b.largest_range * 4, range_bytes);
    EXPECT_LE(b.staging_peak_bytes, uint64_t(2 * range_bytes));
    ASSERT_EQ(files_of(a.folder), files_of(b.folder));
    for (const std::string& name : files_of(a.folder))
      EXPECT_EQ(read_bytes(fs::path(a.folder) / name), read_bytes(fs::path(b.folder) / name)) << name;

    // Read back a range at a time into a model of another seed: the same state.
    o.seed = 99;
    auto fresh = nn::make_gpt("cuda", c, o);
    const train::CheckpointReader reader(b.folder, true, &c);
    std::vector<float> range;
    for (auto part : {train::CheckpointPart::params, train::CheckpointPart::m, train::CheckpointPart::v})
      for (const auto& [begin, end] : reader.ranges(range_bytes / 4)) {
        range.resize(size_t(end - begin));
        reader.read(part, begin, end - begin, range.data());
        if (part == train::CheckpointPart::params) fresh->set_params_range(begin, end - begin, range.data());
        else fresh->set_optimizer_state_range(part == train::CheckpointPart::m ? 0 : 1, begin,
                                              end - begin, range.data());
      }
    std::vector<float> p2(n), m2(n), v2(n);
    fresh->get_params(p2.data());
    fresh->get_optimizer_state(m2.data(), v2.data());
    EXPECT_TRUE(bitwise_equal(p2, whole.params));
    EXPECT_TRUE(bitwise_equal(m2, whole.m));
    EXPECT_TRUE(bitwise_equal(v2, whole.v));
    // The working copy followed the master weights: both models compute the same logits
    // (up to the GEMM algorithms each picked; another seed's weights are ~1.4 apart).
    std::vector<int32_t> x(size_t(o.batch * o.seq));
    for (size_t i = 0; i < x.size(); ++i) x[i] = int32_t((i * 37) % 256);
    std::vector<float> l1(size_t(c.vocab_size)), l2(l1.size());
    model->forward(x.data(), nullptr);
    model->logits_at(1, o.seq - 1, l1.data());
    fresh->forward(x.data(), nullptr);
    fresh->logits_at(1, o.seq - 1, l2.data());
    EXPECT_LT(vector_distance(l2, l1), 1e-2);
    std::printf("[gpu] %s: %lld values in %lld ranges of at most %lld, %llu bytes staged; files "
                "identical to the whole vectors'\n", k.what, static_cast<long long>(n),
                static_cast<long long>(b.ranges), static_cast<long long>(b.largest_range),
                static_cast<unsigned long long>(b.staging_peak_bytes));
  }
}

// The host staging of a streamed write is bounded by the range, not the model: at most two
// ranges for a model of more than four, and for one four times its layers (the whole
// vectors would stage 12 bytes per parameter).
TEST(StreamGpu2, StagingDoesNotGrowWithTheModel) {
  const int64_t range_bytes = 64 << 10;
  for (int64_t layers : {2, 8}) {
    const nn::GptConfig c = model_config(false, layers);
    nn::GptRunOptions o;
    o.batch = 2;
    o.seq = 32;
    o.precision = DType::bf16;
    auto model = nn::make_gpt("cuda", c, o);
    const fs::path dir = temp_dir("gpu-stream-peak");
    const auto w = train::write_checkpoint_streamed(dir.string(), "step_00000003", meta_of(c),
                                                    model_source(*model, range_bytes), true, -1);
    EXPECT_LE(w.largest_range * 4, range_bytes);
    EXPECT_LE(w.staging_peak_bytes, uint64_t(2 * range_bytes));
    EXPECT_GT(uint64_t(c.num_params()) * 4, uint64_t(4 * range_bytes));  // the model is larger
    std::printf("[gpu] %lld layers, %lld values: %llu bytes staged (ranges of %lld bytes)\n",
                static_cast<long long>(layers), static_cast<long long>(c.num_params()),
                static_cast<unsigned long long>(w.staging_peak_bytes),
                static_cast<long long>(range_bytes));
  }
}

namespace {

// A model of about 19M parameters (76 MB of fp32 values: two of the writer's 64 MiB
// ranges), vocabulary 300 (padded rows in the working copy and the vocabulary slices).
std::string layouts_config(const fs::path& dir, bool llama) {
  std::string model = llama ? "preset = \"llama-tiny\"\nn_layer = 6\nn_head = 8\nn_kv_head = 2\n"
                              "n_embd = 512\nffn_hidden = 1536\ntie_embeddings = false\n"
                            : "preset = \"gpt-tiny\"\nn_layer = 6\nn_head = 8\nn_embd = 512\n";
  const std::string cfg =
      "[model]\n" + model + "block_size = 64\nvocab_size = 300\n"
      "[data]\ntrain = \"" + (dir / "tiny_train_*.bin").string() + "\"\n"
      "val = \"" + (dir / "tiny_val_*.bin").string() + "\"\ntokenizer = \"byte\"\n"
      "[train]\ndevice = \"cuda\"\nprecision = \"bf16\"\nbatch_size = 8\nseq_len = 64\n"
      "steps = 2\nwarmup_steps = 1\nlr = 0\neval_batches = 1\nschedule = \"constant\"\nseed = 1234\n"
      "[run]\ndir = \"" + (dir / "runs").string() + "\"\n";
  const fs::path path = dir / (llama ? "llama.toml" : "gpt.toml");
  std::ofstream(path) << cfg;
  return path.string();
}

struct LayoutCase {
  std::string name, launch, keys;  // the command up to "-c", the --set keys of the layout
};

// Each layout's run against the one-GPU run "one": the weight files byte for byte, the
// moments within 5e-2 (relative L2).
void expect_layouts_write_the_one_gpu_files(const std::string& tag, bool llama,
                                            const std::vector<LayoutCase>& layouts) {
  const fs::path dir = temp_dir("gpu2-stream-" + tag);
  write_byte_shards(dir, 400000, 8000);
  const std::string cfg = layouts_config(dir, llama);
  auto one = run_aiscale("train -q -c " + cfg + " --set run.name=one");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const fs::path ref = dir / "runs/one/checkpoints" / train::checkpoint_name(2);
  const auto ref_state = train::read_checkpoint(ref.string(), true);
  ASSERT_GT(ref_state.params.size() * 4, size_t(train::kCheckpointChunkBytes)) << "one range only";
  // The seed's weights (train.seed = 1234), drawn on the host as the CPU model draws them.
  ASSERT_TRUE(bitwise_equal(ref_state.params, nn::gpt_init_params(ref_state.model, 1234)));
  for (const LayoutCase& l : layouts) {
    SCOPED_TRACE(l.name);
    auto r = run_aiscale(l.launch + "-c " + cfg + " --set run.name=" + tag + "-" + l.name + " " + l.keys);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const fs::path got = dir / "runs" / (tag + "-" + l.name) / "checkpoints" / train::checkpoint_name(2);
    for (const std::string& name : files_of(ref)) {
      if (name == "optimizer.bin" || name == "state.json" || name == "COMPLETE") continue;
      EXPECT_EQ(read_bytes(got / name), read_bytes(ref / name)) << name;
    }
    const auto state = train::read_checkpoint(got.string(), true);
    EXPECT_TRUE(bitwise_equal(state.params, ref_state.params));
    ASSERT_EQ(state.m.size(), ref_state.m.size());
    const double m_rel = vector_distance(state.m, ref_state.m), v_rel = vector_distance(state.v, ref_state.v);
    EXPECT_LT(m_rel, 5e-2);
    EXPECT_LT(v_rel, 5e-2);
    std::printf("[gpu2] %s %s: weight files identical to one GPU's; AdamW m %.2e, v %.2e\n",
                tag.c_str(), l.name.c_str(), m_rel, v_rel);
  }
}

LayoutCase two_ranks(const std::string& name, const std::string& keys) {
  return {name, "launch -n 2 --threads-per-rank 4 -- train -q ", "parallel.communicator=nccl " + keys};
}

LayoutCase four_ranks(const std::string& name, const std::string& keys) {
  return {name, "launch -n 4 --threads-per-rank 2 -- train -q ", "parallel.communicator=nccl " + keys};
}

}  // namespace

TEST(StreamGpu2, EveryLayoutOfTwoRanksWritesTheOneGpuWeights) {
  expect_layouts_write_the_one_gpu_files(
      "gpt2", false,
      {{"zero3-offload-1gpu", "train -q ", "parallel.zero_stage=3 parallel.offload_optimizer=true"},
       two_ranks("ddp", "parallel.zero_stage=0"),
       two_ranks("zero1", "parallel.zero_stage=1 parallel.bucket_mib=1"),
       two_ranks("zero2", "parallel.zero_stage=2"),
       two_ranks("zero3", "parallel.zero_stage=3"),
       two_ranks("zero3-offload", "parallel.zero_stage=3 parallel.offload_optimizer=true"),
       two_ranks("tp2", "parallel.tensor_parallel=2"),
       two_ranks("pp2", "parallel.pipeline_parallel=2 parallel.microbatches=2")});
}

TEST(StreamGpu2, LlamaLayoutsOfTwoRanksWriteTheOneGpuWeights) {
  expect_layouts_write_the_one_gpu_files(
      "llama", true,
      {two_ranks("zero1", "parallel.zero_stage=1 parallel.bucket_mib=1"),
       two_ranks("tp2", "parallel.tensor_parallel=2"),
       two_ranks("pp2", "parallel.pipeline_parallel=2 parallel.microbatches=2")});
}

TEST(StreamGpu2, FourRanksWriteTheOneGpuWeights) {
  need_gpus(4);
  expect_layouts_write_the_one_gpu_files(
      "gpt2-4", false,
      {four_ranks("dp2-tp2", "parallel.tensor_parallel=2"),
       four_ranks("dp2-tp2-zero1", "parallel.tensor_parallel=2 parallel.zero_stage=1"),
       four_ranks("dp2-tp2-zero3", "parallel.tensor_parallel=2 parallel.zero_stage=3"),
       four_ranks("dp2-pp2-zero1",
                  "parallel.pipeline_parallel=2 parallel.microbatches=2 parallel.zero_stage=1"),
       four_ranks("tp2-pp2",
                  "parallel.tensor_parallel=2 parallel.pipeline_parallel=2 parallel.microbatches=2")});
}

int main(int argc, char** argv) { return run_multi_gpu_tests(argc, argv); }
