// Streamed checkpoints (train/checkpoint_stream.h): the files are the bytes of the
// whole-vector serialisers (hf_model_files, optimizer.bin's layout) whatever the range
// size; every range reads back; a model ten times larger stages no more; a write that
// stops midway leaves no checkpoint.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "aiscale/core/error.h"
#include "aiscale/nn/models/gpt.h"
#include "aiscale/train/checkpoint.h"
#include "aiscale/train/checkpoint_stream.h"
#include "aiscale/train/hf_checkpoint.h"
#include "../support/run_support.h"

using namespace aiscale;
using namespace aiscale::testsupport;
namespace fs = std::filesystem;

namespace {

nn::GptConfig small_model(int64_t layers) {
  nn::GptConfig c = nn::gpt_preset("gpt-tiny");
  c.n_layer = layers;
  return c;
}

train::CheckpointState meta_of(const nn::GptConfig& c) {
  train::CheckpointState s;
  s.model = c;
  s.step = 3;
  s.data = {0, 12};
  s.config_toml = "[model]\n";
  s.batch_size = 4;
  s.seq_len = 16;
  return s;
}

// Values known at every index without a whole-model buffer: part p, index i.
float value_at(train::CheckpointPart p, int64_t i) {
  return static_cast<float>((i * 7919 + 13 * static_cast<int>(p)) % 1000) * 1e-3f - 0.5f;
}

train::CheckpointSource generated(int64_t size, int64_t chunk_bytes) {
  train::CheckpointSource src;
  src.size = size;
  src.range_values = chunk_bytes / 4;
  src.get = [](train::CheckpointPart p, int64_t begin, int64_t count, float* scratch) {
    for (int64_t i = 0; i < count; ++i) scratch[i] = value_at(p, begin + i);
    return static_cast<const float*>(scratch);
  };
  return src;
}

std::vector<float> whole(train::CheckpointPart p, int64_t size) {
  std::vector<float> v(static_cast<size_t>(size));
  for (int64_t i = 0; i < size; ++i) v[size_t(i)] = value_at(p, i);
  return v;
}

// The reference: the files of the whole vectors through the serialisers that hold them.
std::string optimizer_reference(const std::vector<float>& m, const std::vector<float>& v) {
  std::string out(16, '\0');
  const uint64_t n = m.size();
  std::memcpy(out.data(), &train::kOptimizerMagic, 4);
  std::memcpy(out.data() + 4, &train::kOptimizerVersion, 4);
  std::memcpy(out.data() + 8, &n, 8);
  out.append(reinterpret_cast<const char*>(m.data()), n * 4);
  out.append(reinterpret_cast<const char*>(v.data()), n * 4);
  return out;
}

}  // namespace

// Small ranges (rows of the transposed Conv1D weights cut across ranges) and one range of
// the whole model write the same bytes as hf_model_files and optimizer.bin's layout, in
// one file and in shards; every range reads back.
TEST(CheckpointStream, FilesAreTheWholeVectorBytesAndReadBack) {
  const nn::GptConfig c = small_model(3);
  const int64_t n = c.num_params();
  const auto params = whole(train::CheckpointPart::params, n);
  const auto m = whole(train::CheckpointPart::m, n), v = whole(train::CheckpointPart::v, n);
  for (uint64_t shard_bytes : {train::kHfDefaultShardBytes, uint64_t{60000}}) {
    const fs::path dir = temp_dir("ckpt-stream");
    train::CheckpointState meta = meta_of(c);
    meta.max_shard_bytes = shard_bytes;
    const auto reference = train::hf_model_files(c, params, shard_bytes);
    ASSERT_EQ(reference.size() > 2, shard_bytes < train::kHfDefaultShardBytes);
    for (int64_t chunk : {int64_t{4096}, int64_t{1} << 30}) {
      const std::string folder = "step_0000000" + std::to_string(chunk > 4096 ? 1 : 2);
      const auto w = train::write_checkpoint_streamed(dir.string(), folder, meta,
                                                      generated(n, chunk), true, -1);
      EXPECT_EQ(w.ranges > 1, chunk == 4096);
      for (const auto& [name, bytes] : reference)
        EXPECT_EQ(read_bytes(fs::path(w.folder) / name), bytes) << name << " chunk " << chunk;
      EXPECT_EQ(read_bytes(fs::path(w.folder) / "optimizer.bin"), optimizer_reference(m, v));
      EXPECT_TRUE(fs::exists(fs::path(w.folder) / "COMPLETE"));
      const train::CheckpointReader reader(w.folder, true, &c);
      for (auto part : {train::CheckpointPart::params, train::CheckpointPart::m, train::CheckpointPart::v})
        for (const auto& [b, e] : reader.ranges(1000)) {
          std::vector<float> got(size_t(e - b));
          reader.read(part, b, e - b, got.data());
          for (int64_t i = b; i < e; ++i) ASSERT_EQ(got[size_t(i - b)], value_at(part, i)) << i;
        }
      const train::CheckpointState back = train::read_checkpoint(w.folder, true, &c);
      EXPECT_EQ(back.params, params);
      EXPECT_EQ(back.v, v);
    }
  }
}

// The writing rank's staging is bounded by the range, not the model: ten times the layers,
// the same peak; the whole model at once would stage all of it.
TEST(CheckpointStream, StagingDoesNotGrowWithTheModel) {
  const int64_t chunk = 64 << 10;  // bytes
  uint64_t peak[2] = {};
  int i = 0;
  for (int64_t layers : {4, 40}) {
    const nn::GptConfig c = small_model(layers);
    const fs::path dir = temp_dir("ckpt-stream-peak");
    const auto w = train::write_checkpoint_streamed(dir.string(), "step_00000003", meta_of(c),
                                                    generated(c.num_params(), chunk), true, -1);
    EXPECT_LE(w.largest_range * 4, chunk);
    EXPECT_LE(w.staging_peak_bytes, uint64_t(2 * chunk));
    peak[i++] = w.staging_peak_bytes;
    EXPECT_GT(uint64_t(c.num_params()) * 4, uint64_t(4 * chunk));  // the model is larger
  }
  EXPECT_EQ(peak[0], peak[1]);
}

// A source that fails midway (a rank lost during the gathers) leaves the previous
// checkpoint the newest complete one: the new one never gets its COMPLETE marker.
TEST(CheckpointStream, AFailureMidwayLeavesNoCheckpoint) {
  const nn::GptConfig c = small_model(2);
  const fs::path dir = temp_dir("ckpt-stream-fail");
  train::CheckpointState meta = meta_of(c);
  meta.step = 2;
  train::write_checkpoint_streamed(dir.string(), train::checkpoint_name(2), meta,
                                   generated(c.num_params(), 4096), true, 3);
  train::CheckpointSource broken = generated(c.num_params(), 4096);
  int calls = 0;
  auto inner = broken.get;
  broken.get = [&](train::CheckpointPart p, int64_t b, int64_t n, float* s) {
    if (++calls == 5) aiscale::fail("rank 1 lost");
    return inner(p, b, n, s);
  };
  meta.step = 4;
  EXPECT_THROW(train::write_checkpoint_streamed(dir.string(), train::checkpoint_name(4), meta,
                                                broken, true, 3),
               Error);
  EXPECT_EQ(train::latest_checkpoint(dir.string()), (dir / train::checkpoint_name(2)).string());
  EXPECT_EQ(train::complete_checkpoints(dir.string()).size(), 1u);
}
