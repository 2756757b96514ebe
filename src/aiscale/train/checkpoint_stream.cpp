#include "aiscale/train/checkpoint_stream.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/train/checkpoint_check.h"
#include "aiscale/train/hf_config.h"

namespace aiscale::train {
namespace fs = std::filesystem;
namespace {

int64_t chunk_values(int64_t chunk_bytes) { return std::max<int64_t>(1, chunk_bytes / 4); }

// A file of the checkpoint being written, sized up front and filled at offsets.
class OutFile {
 public:
  OutFile(const std::string& path, uint64_t size) : path_(path) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("cannot create '{}': {}", path, std::strerror(errno));
    if (::ftruncate(fd_, static_cast<off_t>(size)) != 0)
      fail("cannot size '{}' to {} bytes: {}", path, size, std::strerror(errno));
  }
  ~OutFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  OutFile(const OutFile&) = delete;
  OutFile& operator=(const OutFile&) = delete;

  void write(uint64_t offset, const void* data, uint64_t bytes) {
    const char* p = static_cast<const char*>(data);
    while (bytes > 0) {
      const ssize_t n = ::pwrite(fd_, p, static_cast<size_t>(bytes), static_cast<off_t>(offset));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail("cannot write '{}': {}", path_, std::strerror(errno));
      p += n;
      offset += static_cast<uint64_t>(n);
      bytes -= static_cast<uint64_t>(n);
    }
  }
  void finish() {
    if (::fsync(fd_) != 0) fail("cannot fsync '{}': {}", path_, std::strerror(errno));
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail("cannot close '{}': {}", path_, std::strerror(errno));
  }

 private:
  std::string path_;
  int fd_ = -1;
};

// The writing rank's side: the files laid out, each range put at its place.
class CheckpointFiles {
 public:
  CheckpointFiles(const fs::path& tmp, const CheckpointState& meta, int64_t size)
      : tmp_(tmp), map_(hf_model_map(meta.model)), pieces_(hf_pieces(map_)), size_(size) {
    AISCALE_CHECK(map_.size == size, "the model has {} values, its HF table {}", size, map_.size);
    std::vector<uint64_t> bytes;
    std::vector<std::string> names;
    for (const auto& p : pieces_) {
      bytes.push_back(uint64_t(p.rows * p.cols) * 4);
      names.push_back(p.name);
    }
    const HfShardPlan plan = hf_shard_plan(bytes, meta.max_shard_bytes);
    place_.resize(pieces_.size());
    for (size_t s = 0; s < plan.shards.size(); ++s) {
      std::vector<SafeTensorInfo> infos;
      for (size_t i : plan.shards[s]) infos.push_back({pieces_[i].name, "F32", pieces_[i].shape, 0, 0});
      const SafeTensorsLayout layout =
          safetensors_layout(infos, {{"format", "pt"}, {"producer", "aiscale"}});
      files_.push_back(std::make_unique<OutFile>((tmp / plan.file(s)).string(), layout.file_bytes));
      files_.back()->write(0, layout.header.data(), layout.header.size());
      for (size_t j = 0; j < plan.shards[s].size(); ++j)
        place_[plan.shards[s][j]] = {s, layout.tensors[j].begin};
    }
    if (!plan.single) small_.emplace_back(kHfWeightsIndex, hf_weight_index(names, plan));
    small_.emplace_back("config.json", hf_config_json(meta.model));
    small_.emplace_back("state.json", checkpoint_state_json(meta, size));
    const uint64_t n = static_cast<uint64_t>(size);
    optimizer_ = std::make_unique<OutFile>((tmp / "optimizer.bin").string(),
                                           kOptimizerHeaderBytes + 8 * n);
    char header[kOptimizerHeaderBytes];
    std::memcpy(header, &kOptimizerMagic, 4);
    std::memcpy(header + 4, &kOptimizerVersion, 4);
    std::memcpy(header + 8, &n, 8);
    optimizer_->write(0, header, sizeof header);
  }

  // Values [begin, begin + count) of `part`; a transposed tensor's rows through `staging`.
  void put(CheckpointPart part, int64_t begin, int64_t count, const float* values,
           std::vector<float>& staging) {
    if (part != CheckpointPart::params) {
      const uint64_t base = kOptimizerHeaderBytes + (part == CheckpointPart::v ? 4 * uint64_t(size_) : 0);
      optimizer_->write(base + 4 * uint64_t(begin), values, 4 * uint64_t(count));
      return;
    }
    const int64_t end = begin + count;
    for (size_t i = 0; i < pieces_.size(); ++i) {
      const HfPieceRange& p = pieces_[i];
      const int64_t lo = std::max(begin, p.begin), hi = std::min(end, p.begin + p.rows * p.cols);
      if (lo >= hi) continue;
      OutFile& f = *files_[place_[i].first];
      const uint64_t at = place_[i].second;
      const float* src = values + (lo - begin);
      if (!p.transposed) {
        f.write(at + 4 * uint64_t(lo - p.begin), src, 4 * uint64_t(hi - lo));
        continue;
      }
      // Our rows [r0, r0 + rows) are, in HF's (cols, rows), a run of `rows` values in each
      // of its rows: one write when the range holds the whole tensor.
      AISCALE_CHECK((lo - p.begin) % p.cols == 0 && (hi - p.begin) % p.cols == 0,
                    "checkpoint range [{}, {}) splits a row of {}", begin, end, p.name);
      const int64_t r0 = (lo - p.begin) / p.cols, rows = (hi - lo) / p.cols;
      staging.resize(static_cast<size_t>(rows * p.cols));
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t k = 0; k < p.cols; ++k) staging[k * rows + r] = src[r * p.cols + k];
      if (rows == p.rows) {
        f.write(at, staging.data(), 4 * uint64_t(rows * p.cols));
        continue;
      }
      for (int64_t k = 0; k < p.cols; ++k)
        f.write(at + 4 * uint64_t(k * p.rows + r0), staging.data() + k * rows, 4 * uint64_t(rows));
    }
  }

  void finish() {
    for (auto& f : files_) f->finish();
    optimizer_->finish();
    for (const auto& [name, bytes] : small_) atomic_write_file((tmp_ / name).string(), bytes);
  }

 private:
  fs::path tmp_;
  HfModelMap map_;
  std::vector<HfPieceRange> pieces_;
  int64_t size_;
  std::vector<std::unique_ptr<OutFile>> files_;
  std::vector<std::pair<size_t, uint64_t>> place_;  // per piece: file, first byte
  std::unique_ptr<OutFile> optimizer_;
  std::vector<std::pair<std::string, std::string>> small_;
};

}  // namespace

CheckpointSource vector_source(const CheckpointState& s) {
  CheckpointSource src;
  src.size = static_cast<int64_t>(s.params.size());
  src.range_values = std::max<int64_t>(1, src.size);
  AISCALE_CHECK(s.m.size() == s.params.size() && s.v.size() == s.params.size(),
                "checkpoint of {} parameters with {} and {} moments", s.params.size(), s.m.size(),
                s.v.size());
  src.get = [&s](CheckpointPart part, int64_t begin, int64_t, float*) -> const float* {
    const std::vector<float>& v = part == CheckpointPart::params ? s.params
                                  : part == CheckpointPart::m    ? s.m
                                                                 : s.v;
    return v.data() + begin;
  };
  return src;
}

CheckpointSource data_parallel_source(optim::DataParallel& dp, int64_t size, int64_t chunk_bytes) {
  CheckpointSource src;
  src.size = size;
  src.range_values = dp.streams_state() ? chunk_values(chunk_bytes) : std::max<int64_t>(1, size);
  src.get = [&dp, size](CheckpointPart part, int64_t begin, int64_t count, float* scratch) -> const float* {
    const optim::DataParallel::FlatRange r{begin, count, size};
    if (part == CheckpointPart::params) dp.get_params_range(r, scratch);
    else dp.get_state_range(part == CheckpointPart::m ? 0 : 1, r, scratch);
    return scratch;
  };
  return src;
}

StreamedWrite write_checkpoint_streamed(const std::string& checkpoints_dir, const std::string& folder,
                                        const CheckpointState& meta, const CheckpointSource& source,
                                        bool writer, int64_t keep_last) {
  StreamedWrite out;
  // Every rank computes the same ranges from the model's shapes alone.
  const auto ranges = hf_chunks(hf_model_map(meta.model), source.range_values);
  std::unique_ptr<CheckpointFiles> files;
  std::string error;  // the writing rank's first failure, raised after the last range
  if (writer) {
    try {
      files = std::make_unique<CheckpointFiles>(begin_checkpoint_folder(checkpoints_dir, folder),
                                                meta, source.size);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  std::vector<float> scratch, staging;
  out.ranges = static_cast<int64_t>(ranges.size());
  for (CheckpointPart part : {CheckpointPart::params, CheckpointPart::m, CheckpointPart::v})
    for (const auto& [begin, end] : ranges) {
      const int64_t count = end - begin;
      scratch.resize(static_cast<size_t>(count));
      const float* values = source.get(part, begin, count, scratch.data());
      if (values != scratch.data()) scratch = {};  // read in place: no buffer of our own
      out.largest_range = std::max(out.largest_range, count);
      if (files && error.empty()) {
        try {
          files->put(part, begin, count, values, staging);
        } catch (const std::exception& e) {
          error = e.what();
        }
      }
      out.staging_peak_bytes = std::max<uint64_t>(
          out.staging_peak_bytes, 4 * (scratch.capacity() + staging.capacity()));
      if (staging.size() > static_cast<size_t>(count)) staging = {};
    }
  if (!writer) return out;
  const fs::path tmp = fs::path(checkpoints_dir) / (folder + ".tmp");
  if (error.empty()) {
    try {
      files->finish();
      files.reset();
      out.folder = commit_checkpoint_folder(checkpoints_dir, folder, meta.step);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  if (!error.empty()) {
    files.reset();
    std::error_code ec;
    fs::remove_all(tmp, ec);  // no half checkpoint is left, not even as .tmp
    fail("{}", error);
  }
  if (keep_last >= 0) prune_checkpoints(checkpoints_dir, keep_last);
  return out;
}

CheckpointReader::CheckpointReader(const std::string& dir, bool with_optimizer,
                                   const nn::GptConfig* expected)
    : dir_(dir), with_optimizer_(with_optimizer) {
  const fs::path d(dir);
  if (const std::string why = why_not_a_checkpoint(dir); !why.empty()) fail("{}", why);
  // The small metadata first, validated, and compared with the run's model before the
  // weights are read or any buffer is sized from a count in the files.
  state_.model = read_checkpoint_model(dir);
  if (expected) check_checkpoint_model(state_.model, *expected, dir);
  const std::string state_path = (d / "state.json").string();
  try {
    checkpoint_state_from_json(nlohmann::json::parse(read_file(state_path)), state_, state_path);
  } catch (const nlohmann::json::exception& e) {
    fail("'{}' is corrupt: {}; resume from another checkpoint", state_path, e.what());
  }
  map_ = hf_model_map(state_.model);
  weights_ = std::make_unique<HfWeights>(dir);
  import_ = hf_import_check(map_, *weights_,
                            "The checkpoint is corrupt or mixed from two runs: resume from another");
  if (!with_optimizer) return;
  const std::string opt_path = (d / "optimizer.bin").string();
  const uint64_t n = static_cast<uint64_t>(map_.size);
  std::error_code ec;
  const uint64_t bytes = fs::exists(opt_path, ec) ? fs::file_size(opt_path, ec) : 0;
  char header[kOptimizerHeaderBytes] = {};
  uint32_t magic = 0, version = 0;
  uint64_t count = 0;
  if (bytes >= kOptimizerHeaderBytes) {
    const int fd = ::open(opt_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      if (::pread(fd, header, sizeof header, 0) == static_cast<ssize_t>(sizeof header)) {
        std::memcpy(&magic, header, 4);
        std::memcpy(&version, header + 4, 4);
        std::memcpy(&count, header + 8, 8);
      }
      ::close(fd);
    }
  }
  if (magic != kOptimizerMagic || version != kOptimizerVersion || count != n ||
      bytes != kOptimizerHeaderBytes + 8 * n)
    fail("'{}' is corrupt or from another model (expected {} values): resume from an earlier "
         "checkpoint", opt_path, n);
}

std::vector<std::pair<int64_t, int64_t>> CheckpointReader::ranges(int64_t max_values) const {
  return hf_chunks(map_, max_values);
}

void CheckpointReader::read(CheckpointPart part, int64_t begin, int64_t count, float* out) const {
  if (part == CheckpointPart::params) {
    hf_import_range(map_, *weights_, import_, begin, count, out);
    return;
  }
  AISCALE_CHECK(with_optimizer_, "checkpoint '{}' was opened without its optimizer state", dir_);
  const std::string path = (fs::path(dir_) / "optimizer.bin").string();
  const uint64_t offset = kOptimizerHeaderBytes +
                          4 * (uint64_t(begin) + (part == CheckpointPart::v ? uint64_t(map_.size) : 0));
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open '{}': {}", path, std::strerror(errno));
  char* dst = reinterpret_cast<char*>(out);
  uint64_t done = 0, want = 4 * uint64_t(count);
  while (done < want) {
    const ssize_t got = ::pread(fd, dst + done, static_cast<size_t>(want - done),
                                static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      ::close(fd);
      fail("'{}' is truncated: bytes {}..{} cannot be read", path, offset, offset + want);
    }
    done += static_cast<uint64_t>(got);
  }
  ::close(fd);
}

void CheckpointReader::restore(optim::DataParallel& dp, int64_t chunk_bytes) const {
  const int64_t n = size();
  const auto rs = ranges(dp.streams_state() ? chunk_values(chunk_bytes) : std::max<int64_t>(1, n));
  std::vector<float> buffer;
  for (CheckpointPart part : {CheckpointPart::params, CheckpointPart::m, CheckpointPart::v})
    for (const auto& [begin, end] : rs) {
      const optim::DataParallel::FlatRange r{begin, end - begin, n};
      buffer.resize(static_cast<size_t>(r.count));
      read(part, begin, r.count, buffer.data());
      if (part == CheckpointPart::params) dp.set_params_range(r, buffer.data());
      else dp.set_state_range(part == CheckpointPart::m ? 0 : 1, r, buffer.data());
    }
}

}  // namespace aiscale::train
