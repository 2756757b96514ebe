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
#include "aiscale/train/safetensors.h"

namespace aiscale::train {
namespace fs = std::filesystem;
namespace {

constexpr uint32_t kOptimizerMagic = 0x504f4941;  // "AIOP"
constexpr uint32_t kOptimizerVersion = 1;

std::vector<SafeTensor> to_hf_tensors(const nn::GptConfig& c, const std::vector<float>& flat) {
  std::vector<SafeTensor> out;
  for (const auto& p : nn::GptLayout(c).tensors()) {
    SafeTensor t;
    t.name = p.name;
    const int64_t n = p.shape.numel();
    const float* src = flat.data() + p.offset;
    if (p.transposed_in_hf) {  // ours (out, in) -> HF Conv1D (in, out)
      const int64_t rows = p.shape[0], cols = p.shape[1];
      t.shape = {cols, rows};
      t.data.resize(n);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t k = 0; k < cols; ++k) t.data[k * rows + r] = src[r * cols + k];
    } else {
      for (int i = 0; i < p.shape.ndim; ++i) t.shape.push_back(p.shape[i]);
      t.data.assign(src, src + n);
    }
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<float> from_hf_tensors(const nn::GptConfig& c, std::map<std::string, SafeTensor>& tensors,
                                   const std::string& source) {
  const nn::GptLayout layout(c);
  std::vector<float> flat(static_cast<size_t>(layout.size()));
  for (const auto& p : layout.tensors()) {
    auto it = tensors.find(p.name);
    if (it == tensors.end()) it = tensors.find("transformer." + p.name);
    if (it == tensors.end())
      fail("'{}' has no tensor '{}': it is not a GPT-2 checkpoint of this shape", source, p.name);
    const SafeTensor& t = it->second;
    const int64_t n = p.shape.numel();
    std::vector<int64_t> want;
    for (int i = 0; i < p.shape.ndim; ++i) want.push_back(p.shape[i]);
    if (p.transposed_in_hf) std::swap(want[0], want[1]);
    if (static_cast<int64_t>(t.data.size()) != n || t.shape != want)
      fail("'{}': tensor '{}' has shape [{}], the model expects [{}]: the checkpoint is of another "
           "model shape or corrupt", source, p.name, fmt::join(t.shape, ", "), fmt::join(want, ", "));
    float* dst = flat.data() + p.offset;
    if (p.transposed_in_hf) {
      const int64_t rows = p.shape[0], cols = p.shape[1];
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t k = 0; k < cols; ++k) dst[r * cols + k] = t.data[k * rows + r];
    } else {
      std::copy(t.data.begin(), t.data.end(), dst);
    }
  }
  return flat;
}

// The llama family as Hugging Face's LlamaConfig (model_type "llama"), so that a resumed
// run rebuilds the same family and shape.
std::string hf_llama_config_json(const nn::GptConfig& c) {
  nlohmann::ordered_json scaling;  // null without scaling
  if (c.rope_scaling.enabled())
    scaling = {{"rope_type", "llama3"},
               {"factor", c.rope_scaling.factor},
               {"low_freq_factor", c.rope_scaling.low_freq_factor},
               {"high_freq_factor", c.rope_scaling.high_freq_factor},
               {"original_max_position_embeddings", c.rope_scaling.original_context}};
  nlohmann::ordered_json j = {{"architectures", {"LlamaForCausalLM"}},
                              {"model_type", "llama"},
                              {"vocab_size", c.vocab_size},
                              {"max_position_embeddings", c.block_size},
                              {"hidden_size", c.n_embd},
                              {"intermediate_size", c.ffn()},
                              {"num_hidden_layers", c.n_layer},
                              {"num_attention_heads", c.n_head},
                              {"num_key_value_heads", c.kv_heads()},
                              {"hidden_act", "silu"},
                              {"rms_norm_eps", c.norm_eps},
                              {"rope_theta", c.rope_theta},
                              {"rope_scaling", scaling},
                              {"attention_bias", false},
                              {"mlp_bias", false},
                              {"tie_word_embeddings", c.tie_embeddings},
                              {"torch_dtype", "float32"}};
  return j.dump(2) + "\n";
}

std::string hf_config_json(const nn::GptConfig& c) {
  if (c.llama()) return hf_llama_config_json(c);
  nlohmann::ordered_json j = {
      {"architectures", {"GPT2LMHeadModel"}},
      {"model_type", "gpt2"},
      {"vocab_size", c.vocab_size},
      {"n_positions", c.block_size},
      {"n_ctx", c.block_size},
      {"n_embd", c.n_embd},
      {"n_layer", c.n_layer},
      {"n_head", c.n_head},
      {"activation_function", "gelu_new"},
      {"layer_norm_epsilon", 1e-5},
      {"resid_pdrop", 0.0},
      {"embd_pdrop", 0.0},
      {"attn_pdrop", 0.0},
      // GPT-2's end-of-text id; only meaningful for the GPT-2 vocabulary (null otherwise).
      {"bos_token_id", c.vocab_size > 50256 ? nlohmann::ordered_json(50256) : nlohmann::ordered_json()},
      {"eos_token_id", c.vocab_size > 50256 ? nlohmann::ordered_json(50256) : nlohmann::ordered_json()},
      {"tie_word_embeddings", true},
      {"torch_dtype", "float32"}};
  return j.dump(2) + "\n";
}

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
  return {{"model.safetensors", safetensors_serialize(to_hf_tensors(s.model, s.params),
                                                      {{"format", "pt"}, {"producer", "aiscale"}})},
          {"config.json", hf_config_json(s.model)},
          {"optimizer.bin", optimizer_bytes(s)},
          {"state.json", state.dump(2) + "\n"}};
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
  std::string weights_path = (d / "model.safetensors").string();
  auto tensors = safetensors_parse(read_file(weights_path), weights_path);
  s.params = from_hf_tensors(s.model, tensors, weights_path);
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
