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
#include "aiscale/train/checkpoint_stream.h"
#include "aiscale/train/hf_checkpoint.h"
#include "aiscale/train/hf_mapping.h"

namespace aiscale::train {
namespace fs = std::filesystem;
namespace {


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

std::string begin_checkpoint_folder(const std::string& checkpoints_dir, const std::string& folder) {
  const fs::path tmp_dir = fs::path(checkpoints_dir) / (folder + ".tmp");
  std::error_code ec;
  fs::remove_all(tmp_dir, ec);
  fs::create_directories(tmp_dir, ec);
  if (ec) fail("cannot create checkpoint folder '{}': {}", tmp_dir.string(), ec.message());
  return tmp_dir.string();
}

std::string commit_checkpoint_folder(const std::string& checkpoints_dir, const std::string& folder,
                                     int64_t step) {
  const fs::path final_dir = fs::path(checkpoints_dir) / folder;
  const fs::path tmp_dir = fs::path(checkpoints_dir) / (folder + ".tmp");
  std::error_code ec;
  fs::remove_all(final_dir, ec);  // an incomplete leftover of an earlier attempt
  fs::rename(tmp_dir, final_dir, ec);
  if (ec) fail("cannot move checkpoint into place at '{}': {}", final_dir.string(), ec.message());
  fsync_directory(checkpoints_dir);
  atomic_write_file((final_dir / "COMPLETE").string(), fmt::format("{}\n", step));
  return final_dir.string();
}

void prune_checkpoints(const std::string& checkpoints_dir, int64_t keep_last) {
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

void write_checkpoint_folder(const std::string& checkpoints_dir, int64_t step,
                             const std::vector<std::pair<std::string, std::string>>& files,
                             int64_t keep_last) {
  const std::string folder = checkpoint_name(step);
  const fs::path tmp_dir = begin_checkpoint_folder(checkpoints_dir, folder);
  for (const auto& [name, bytes] : files) atomic_write_file((tmp_dir / name).string(), bytes);
  commit_checkpoint_folder(checkpoints_dir, folder, step);
  prune_checkpoints(checkpoints_dir, keep_last);
}

std::string checkpoint_state_json(const CheckpointState& s, int64_t n_params) {
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
                                  {"n_params", n_params},
                                  {"config_toml", s.config_toml},
                                  {"aiscale_version", AISCALE_VERSION},
                                  {"written", utc_iso8601()}};
  return state.dump(2) + "\n";
}

namespace {

int64_t step_of(const std::string& checkpoint_dir) {
  return std::stoll(fs::path(checkpoint_dir).filename().string().substr(5));
}

}  // namespace

// The whole vectors go through the streamed writer as one range (checkpoint_stream.h):
// one writer for both, so their files are the same bytes.
void write_checkpoint(const std::string& checkpoints_dir, const CheckpointState& s, int64_t keep_last) {
  write_checkpoint_streamed(checkpoints_dir, checkpoint_name(s.step), s, vector_source(s),
                            /*writer=*/true, keep_last);
}

std::string diverged_checkpoint_name(int64_t step) { return "diverged-" + checkpoint_name(step); }

std::string write_diverged_checkpoint(const std::string& checkpoints_dir, const CheckpointState& s) {
  return write_checkpoint_streamed(checkpoints_dir, diverged_checkpoint_name(s.step), s,
                                   vector_source(s), /*writer=*/true, /*keep_last=*/-1)
      .folder;
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
  const CheckpointReader reader(dir, with_optimizer, expected);
  CheckpointState s = reader.state();
  const int64_t n = reader.size();
  s.params.resize(static_cast<size_t>(n));
  reader.read(CheckpointPart::params, 0, n, s.params.data());
  if (with_optimizer) {
    s.m.resize(static_cast<size_t>(n));
    s.v.resize(static_cast<size_t>(n));
    reader.read(CheckpointPart::m, 0, n, s.m.data());
    reader.read(CheckpointPart::v, 0, n, s.v.data());
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
