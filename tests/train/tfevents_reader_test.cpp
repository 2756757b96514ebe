// An independent reader of the TensorBoard event files `aiscale train --tensorboard`
// writes (Debian 12 packages neither TensorBoard nor TensorFlow): it checks every record's
// framing (length, masked CRC32C of the length, data, masked CRC32C of the data) with a
// bit-by-bit CRC32C of its own, and decodes the Event protobufs back into scalars.
#include <gtest/gtest.h>

#include <cstring>

#include "aiscale/train/tfevents.h"
#include "../support/run_support.h"

using namespace aiscale;
using namespace aiscale::testsupport;

namespace {

// CRC-32C bit by bit (no table), reflected polynomial 0x82F63B78.
uint32_t crc32c_bitwise(const std::string& s, size_t begin, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = begin; i < begin + n; ++i) {
    c ^= static_cast<unsigned char>(s[i]);
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
  }
  return ~c;
}
uint32_t masked(uint32_t c) { return ((c >> 15) | (c << 17)) + 0xa282ead8u; }

template <typename T>
T load(const std::string& s, size_t at) {
  T v;
  std::memcpy(&v, s.data() + at, sizeof(T));
  return v;
}

uint64_t varint(const std::string& s, size_t& at) {
  uint64_t v = 0;
  for (int shift = 0;; shift += 7) {
    if (at >= s.size()) throw std::runtime_error("varint runs past the end");
    const auto b = static_cast<unsigned char>(s[at++]);
    v |= uint64_t(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
  }
}

struct Event {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  std::vector<std::pair<std::string, float>> values;
};

// Decodes the fields a scalar event has; any other field fails the test.
Event decode_event(const std::string& e) {
  Event ev;
  for (size_t at = 0; at < e.size();) {
    const uint64_t tag = varint(e, at);
    const int field = int(tag >> 3), wire = int(tag & 7);
    if (field == 1 && wire == 1) {
      ev.wall_time = load<double>(e, at);
      at += 8;
    } else if (field == 2 && wire == 0) {
      ev.step = int64_t(varint(e, at));
    } else if ((field == 3 || field == 5) && wire == 2) {
      const size_t n = varint(e, at);
      const std::string body = e.substr(at, n);
      at += n;
      if (field == 3) {
        ev.file_version = body;
        continue;
      }
      for (size_t s = 0; s < body.size();) {  // Summary: repeated Value (field 1)
        if (varint(body, s) != ((1 << 3) | 2)) throw std::runtime_error("summary field");
        const size_t vn = varint(body, s);
        const std::string v = body.substr(s, vn);
        s += vn;
        std::pair<std::string, float> value;
        for (size_t k = 0; k < v.size();) {
          const uint64_t vt = varint(v, k);
          if (vt == ((1 << 3) | 2)) {
            const size_t tn = varint(v, k);
            value.first = v.substr(k, tn);
            k += tn;
          } else if (vt == ((2 << 3) | 5)) {
            value.second = load<float>(v, k);
            k += 4;
          } else {
            throw std::runtime_error("value field");
          }
        }
        ev.values.push_back(value);
      }
    } else {
      throw std::runtime_error("unexpected field " + std::to_string(field));
    }
  }
  return ev;
}

std::vector<Event> read_events(const std::string& file) {
  std::vector<Event> out;
  for (size_t at = 0; at < file.size();) {
    if (file.size() - at < 12) throw std::runtime_error("truncated record header");
    const uint64_t len = load<uint64_t>(file, at);
    if (load<uint32_t>(file, at + 8) != masked(crc32c_bitwise(file, at, 8)))
      throw std::runtime_error("length CRC mismatch");
    if (file.size() - at - 12 < len + 4) throw std::runtime_error("truncated record");
    if (load<uint32_t>(file, at + 12 + len) != masked(crc32c_bitwise(file, at + 12, len)))
      throw std::runtime_error("data CRC mismatch");
    out.push_back(decode_event(file.substr(at + 12, len)));
    at += 12 + len + 4;
  }
  return out;
}

TEST(TfEvents, Crc32cMatchesTheCheckValue) {
  const std::string s = "123456789";
  EXPECT_EQ(crc32c_bitwise(s, 0, s.size()), 0xE3069283u);
  EXPECT_EQ(train::crc32c(s.data(), s.size()), 0xE3069283u);
}

TEST(TfEvents, ReaderRejectsACorruptRecord) {
  std::string rec = train::tf_record(train::tf_event_scalars(1.0, 3, {{"a", 1.5f}}));
  ASSERT_EQ(read_events(rec).size(), 1u);
  rec[14] ^= 1;
  EXPECT_THROW(read_events(rec), std::runtime_error);
}

TEST(TfEvents, TrainingRunScalarsReadBack) {
  const fs::path dir = temp_dir("tfevents");
  write_byte_shards(dir);
  const std::string config = tiny_config(dir);
  auto r = run_aiscale("train -q -c " + config +
                       " --tensorboard --set train.steps=4 train.warmup_steps=1 run.name=tb");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir / "runs/tb/tensorboard")) files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].filename().string().rfind("events.out.tfevents.", 0), 0u);
  const std::vector<Event> events = read_events(read_bytes(files[0]));
  ASSERT_GE(events.size(), 6u);  // file_version, 4 steps, the validation loss
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  const auto metrics = read_metrics(dir / "runs/tb");
  ASSERT_EQ(metrics.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    const Event& e = events[size_t(i) + 1];
    EXPECT_EQ(e.step, i + 1);
    EXPECT_GT(e.wall_time, 1.7e9);
    std::map<std::string, float> v(e.values.begin(), e.values.end());
    for (const char* tag : {"train/loss", "train/lr", "train/grad_norm", "perf/tokens_per_s",
                            "system/memory_gib"})
      EXPECT_TRUE(v.count(tag)) << tag;
    EXPECT_FLOAT_EQ(v["train/loss"], float(metrics[size_t(i)]["loss"].get<double>()));
    EXPECT_FLOAT_EQ(v["train/lr"], float(metrics[size_t(i)]["lr"].get<double>()));
  }
  EXPECT_EQ(events.back().values.at(0).first, "val/loss");
}

}  // namespace
