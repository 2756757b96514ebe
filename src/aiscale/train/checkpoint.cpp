#include "aiscale/train/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/core/log.h"
#include "aiscale/nn/models/gpt_layout.h"
#include "aiscale/train/checkpoint_check.h"
#include "aiscale/train/hf_checkpoint.h"
#include "aiscale/train/hf_mapping.h"

namespace aiscale::train {
namespace fs = std::filesystem;
namespace {

constexpr uint32_t kOptimizerMagic = 0x504f4941;  // "AIOP"
constexpr uint32_t kOptimizerVersion = 1;

std::string optimizer_bytes(const CheckpointState& s) {
  std::string out;
  uint64_t n = s.m.size();
  out.append(reinterpret_cast<const char*>(&kOptimizerMagic), 4);
  out.append(reinterpret_cast<const char*>(&kOptimizerVersion), 4);
  out.append(reinterpret_cast<const char*>(&n), 8);
  out.append(reinterpret_cast<const char*>(s.m.data()), n * 4);
  out.append(reinterpret_cast<const char*>(s.v.data()), n * 4);
  return out;
}

bool is_complete(const fs::path& dir) { return fs::exists(dir / "COMPLETE"); }

// step_ and eight or more digits, nothing else (not .tmp, .deleting, .corrupt ...).
bool is_checkpoint_name(const std::string& name) {
  if (!name.starts_with("step_") || name.size() < 13) return false;
  return std::all_of(name.begin() + 5, name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

std::string checkpoint_name(int64_t step) { return fmt::format("step_{:08d}", step); }

void set_checkpoint_layout(CheckpointState& s, const TrainConfig& c, int data_world) {
  s.world_size = data_world;
  s.tensor_parallel = c.tensor_parallel;
  s.pipeline_parallel = c.pipeline_parallel;
  s.zero_stage = c.zero_stage;
  s.batch_size = c.batch_size;
  s.grad_accum = c.grad_accum;
  s.seq_len = c.seq_len;
}

// Folders step_N with a COMPLETE marker, oldest first (names sort by step).
std::vector<std::string> complete_checkpoints(const std::string& checkpoints_dir) {
  std::vector<std::string> complete;
  std::error_code ec;
  if (!fs::is_directory(checkpoints_dir, ec)) return complete;
  for (const auto& e : fs::directory_iterator(checkpoints_dir, ec)) {
    std::string name = e.path().filename().string();
    if (is_checkpoint_name(name) && e.is_directory(ec) && is_complete(e.path()))
      complete.push_back(e.path().string());
  }
  std::sort(complete.begin(), complete.end());
  return complete;
}

std::string set_checkpoint_aside(const std::string& dir, const std::string& suffix) {
  fs::path from = fs::path(dir).lexically_normal();
  if (from.filename().empty()) from = from.parent_path();
  fs::path to = from;
  to += "." + suffix;
  for (int i = 2; fs::exists(to); ++i) {
    to = from;
    to += fmt::format(".{}{}", suffix, i);
  }
  std::error_code ec;
  fs::rename(from, to, ec);
  if (ec) fail("cannot rename checkpoint '{}' to '{}': {}", from.string(), to.string(), ec.message());
  fsync_directory(from.parent_path().string());
  return to.string();
}

namespace {

// The folder protocol: `files` written into NAME.tmp/, renamed to NAME, COMPLETE last.
fs::path write_folder(const std::string& checkpoints_dir, const std::string& folder, int64_t step,
                      const std::vector<std::pair<std::string, std::string>>& files) {
  const fs::path final_dir = fs::path(checkpoints_dir) / folder;
  const fs::path tmp_dir = fs::path(checkpoints_dir) / (folder + ".tmp");
  std::error_code ec;
  fs::remove_all(tmp_dir, ec);
  fs::create_directories(tmp_dir, ec);
  if (ec) fail("cannot create checkpoint folder '{}': {}", tmp_dir.string(), ec.message());
  for (const auto& [name, bytes] : files) atomic_write_file((tmp_dir / name).string(), bytes);
  fs::remove_all(final_dir, ec);  // an incomplete leftover of an earlier attempt
  fs::rename(tmp_dir, final_dir, ec);
  if (ec) fail("cannot move checkpoint into place at '{}': {}", final_dir.string(), ec.message());
  fsync_directory(checkpoints_dir);
  atomic_write_file((final_dir / "COMPLETE").string(), fmt::format("{}\n", step));
  return final_dir;
}

}  // namespace

void write_checkpoint_folder(const std::string& checkpoints_dir, int64_t step,
                             const std::vector<std::pair<std::string, std::string>>& files,
                             int64_t keep_last) {
  write_folder(checkpoints_dir, checkpoint_name(step), step, files);
  std::error_code ec;

  // Keep the newest keep_last complete checkpoints. Renamed first (atomic: from then on it
  // is no checkpoint), then deleted; leftovers of a kill during a deletion go too.
  std::vector<std::string> complete = complete_checkpoints(checkpoints_dir);
  while (static_cast<int64_t>(complete.size()) > keep_last) {
    fs::path doomed = complete.front();
    doomed += ".deleting";
    fs::rename(complete.front(), doomed, ec);
    if (!ec) fsync_directory(checkpoints_dir);
    complete.erase(complete.begin());
  }
  for (const auto& e : fs::directory_iterator(checkpoints_dir, ec))
    if (e.path().filename().string().ends_with(".deleting")) fs::remove_all(e.path(), ec);
}

namespace {

std::vector<std::pair<std::string, std::string>> checkpoint_files(const CheckpointState& s) {
  nlohmann::ordered_json state = {{"step", s.step},
                                  {"data_epoch", s.data.epoch},
                                  {"data_sample", s.data.sample},
                                  {"seed", s.seed},
                                  {"world_size", s.world_size},
                                  {"tensor_parallel", s.tensor_parallel},
                                  {"pipeline_parallel", s.pipeline_parallel},
                                  {"zero_stage", s.zero_stage},
                                  {"batch_size", s.batch_size},
                                  {"grad_accum", s.grad_accum},
                                  {"seq_len", s.seq_len},
                                  {"nonfinite_steps", s.nonfinite_steps},
                                  {"n_params", s.params.size()},
                                  {"config_toml", s.config_toml},
                                  {"aiscale_version", AISCALE_VERSION},
                                  {"written", utc_iso8601()}};
  // The weights and config.json are a Hugging Face model folder (hf_checkpoint.h).
  auto files = hf_model_files(s.model, s.params, s.max_shard_bytes);
  files.emplace_back("optimizer.bin", optimizer_bytes(s));
  files.emplace_back("state.json", state.dump(2) + "\n");
  return files;
}

int64_t step_of(const std::string& checkpoint_dir) {
  return std::stoll(fs::path(checkpoint_dir).filename().string().substr(5));
}

}  // namespace

void write_checkpoint(const std::string& checkpoints_dir, const CheckpointState& s, int64_t keep_last) {
  write_checkpoint_folder(checkpoints_dir, s.step, checkpoint_files(s), keep_last);
}

std::string diverged_checkpoint_name(int64_t step) { return "diverged-" + checkpoint_name(step); }

std::string write_diverged_checkpoint(const std::string& checkpoints_dir, const CheckpointState& s) {
  return write_folder(checkpoints_dir, diverged_checkpoint_name(s.step), s.step, checkpoint_files(s))
      .string();
}

std::vector<std::string> set_aside_checkpoints_after(const std::string& checkpoints_dir,
                                                     int64_t last_good_step) {
  std::vector<std::string> moved;
  for (const std::string& dir : complete_checkpoints(checkpoints_dir))
    if (step_of(dir) > last_good_step) moved.push_back(set_checkpoint_aside(dir, "diverged"));
  return moved;
}

std::optional<std::string> latest_checkpoint(const std::string& checkpoints_dir) {
  std::vector<std::string> complete = complete_checkpoints(checkpoints_dir);
  if (complete.empty()) return std::nullopt;
  return complete.back();
}

nn::GptConfig read_checkpoint_model(const std::string& dir) {
  const std::string config_path = (fs::path(dir) / "config.json").string();
  try {
    return checkpoint_model_from_json(nlohmann::json::parse(read_file(config_path)), config_path);
  } catch (const nlohmann::json::exception& e) {
    fail("'{}' is corrupt: {}; resume from another checkpoint", config_path, e.what());
  }
}

CheckpointState read_checkpoint(const std::string& dir, bool with_optimizer,
                                const nn::GptConfig* expected) {
  const fs::path d(dir);
  if (const std::string why = why_not_a_checkpoint(dir); !why.empty()) fail("{}", why);
  CheckpointState s;
  // The small metadata first, validated, and compared with the run's model before the
  // weights are read or any buffer is sized from a count in the files.
  s.model = read_checkpoint_model(dir);
  if (expected) check_checkpoint_model(s.model, *expected, dir);
  const std::string state_path = (d / "state.json").string();
  try {
    checkpoint_state_from_json(nlohmann::json::parse(read_file(state_path)), s, state_path);
  } catch (const nlohmann::json::exception& e) {
    fail("'{}' is corrupt: {}; resume from another checkpoint", state_path, e.what());
  }
  s.params = hf_import(hf_model_map(s.model), HfWeights(dir),
                       "The checkpoint is corrupt or mixed from two runs: resume from another");
  if (with_optimizer) {
    std::string opt_path = (d / "optimizer.bin").string();
    std::string bytes = read_file(opt_path);
    uint32_t magic = 0, version = 0;
    uint64_t n = 0;
    if (bytes.size() >= 16) {
      std::memcpy(&magic, bytes.data(), 4);
      std::memcpy(&version, bytes.data() + 4, 4);
      std::memcpy(&n, bytes.data() + 8, 8);
    }
    if (magic != kOptimizerMagic || version != kOptimizerVersion || n != s.params.size() ||
        bytes.size() != 16 + 8 * n)
      fail("'{}' is corrupt or from another model (expected {} values): resume from an earlier "
           "checkpoint", opt_path, s.params.size());
    s.m.resize(n);
    s.v.resize(n);
    std::memcpy(s.m.data(), bytes.data() + 16, n * 4);
    std::memcpy(s.v.data(), bytes.data() + 16 + n * 4, n * 4);
  }
  return s;
}

AsyncCheckpointer::AsyncCheckpointer(std::string dir, int64_t keep_last)
    : dir_(std::move(dir)), keep_last_(keep_last), thread_([this] { loop(); }) {}

AsyncCheckpointer::~AsyncCheckpointer() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [this] { return !pending_ && !busy_; });
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  if (!error_.empty()) log::error("{}", error_);
}

void AsyncCheckpointer::settle(std::unique_lock<std::mutex>& lock) {
  cv_.wait(lock, [this] { return !pending_ && !busy_; });
  if (!error_.empty()) {
    std::string e = error_;
    error_.clear();
    fail("{}", e);
  }
}

void AsyncCheckpointer::save(CheckpointState snapshot) {
  std::unique_lock<std::mutex> lock(mutex_);
  settle(lock);
  pending_ = std::move(snapshot);
  cv_.notify_all();
}

void AsyncCheckpointer::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  settle(lock);
}

void AsyncCheckpointer::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    cv_.wait(lock, [this] { return pending_.has_value() || stop_; });
    if (!pending_) return;
    CheckpointState s = std::move(*pending_);
    pending_.reset();
    busy_ = true;
    lock.unlock();
    std::string err;
    try {
      write_checkpoint(dir_, s, keep_last_);
      log::debug("checkpoint step {} written", s.step);
    } catch (const std::exception& e) {
      err = fmt::format("checkpoint at step {} failed: {}", s.step, e.what());
    }
    lock.lock();
    busy_ = false;
    if (!err.empty()) error_ = err;
    cv_.notify_all();
  }
}

}  // namespace aiscale::train
