// What a path given where a checkpoint (or, for --resume, a run directory) is wanted
// turns out to be, so that the error says that and what to give instead: a run directory
// passed as a checkpoint is not "a checkpoint interrupted while being written".
#include <cctype>
#include <cstdint>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "aiscale/core/error.h"
#include "aiscale/train/checkpoint.h"

namespace aiscale::train {
namespace fs = std::filesystem;
namespace {

// The files a checkpoint folder holds (checkpoint.h); any of them marks one begun.
bool has_checkpoint_files(const fs::path& d) {
  std::error_code ec;
  for (const char* f : {"COMPLETE", "model.safetensors", "model.safetensors.index.json",
                        "optimizer.bin", "state.json"})
    if (fs::exists(d / f, ec)) return true;
  return false;
}

bool has_step_folders(const fs::path& d) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(d, ec))
    if (e.path().filename().string().starts_with("step_") && e.is_directory(ec)) return true;
  return false;
}

// "e.g. 'RUN/checkpoints/step_00000020' (the newest complete one)" or why there is none.
std::string newest_in(const fs::path& checkpoints) {
  const auto newest = latest_checkpoint(checkpoints.string());
  return newest ? fmt::format("e.g. '{}' (the newest complete one)", *newest)
                : std::string("it has no complete checkpoint yet");
}

fs::path normal(const std::string& path) {
  fs::path p = fs::path(path).lexically_normal();
  return p.filename().empty() ? p.parent_path() : p;
}

}  // namespace

std::string why_not_a_checkpoint(const std::string& path) {
  const fs::path d = normal(path);
  std::error_code ec;
  if (!fs::exists(d, ec))
    return fmt::format("checkpoint '{}' does not exist: give a checkpoint folder such as "
                       "RUN/checkpoints/step_00000100", path);
  if (!fs::is_directory(d, ec)) {
    const fs::path parent = d.parent_path();
    if (has_checkpoint_files(parent))
      return fmt::format("'{}' is a file of a checkpoint: give its folder '{}'", path,
                         parent.string());
    return fmt::format("'{}' is a file, not a checkpoint: a checkpoint is a folder "
                       "RUN/checkpoints/step_N holding model.safetensors, state.json and "
                       "COMPLETE", path);
  }
  if (fs::exists(d / "COMPLETE", ec)) return "";
  if (fs::is_directory(d / "checkpoints", ec))
    return fmt::format("'{}' is a run directory, not a checkpoint: give one of its checkpoint "
                       "folders, {}", path, newest_in(d / "checkpoints"));
  if (has_step_folders(d))
    return fmt::format("'{}' is a folder of checkpoints, not a checkpoint: give one of them, {}",
                       path, newest_in(d));
  if (!has_checkpoint_files(d))
    return fmt::format("'{}' is a directory but not a checkpoint: it holds none of "
                       "model.safetensors, state.json, COMPLETE; give a folder "
                       "RUN/checkpoints/step_N", path);
  return fmt::format("'{}' is not a complete checkpoint (no COMPLETE marker): it was "
                     "interrupted while being written; use an earlier one{}", path,
                     d.parent_path().empty() ? std::string()
                                             : ", " + newest_in(d.parent_path()));
}

void check_resume_directory(const std::string& path) {
  const fs::path d = normal(path);
  std::error_code ec;
  if (!fs::exists(d, ec)) fail("--resume '{}': no such run directory", path);
  if (!fs::is_directory(d, ec))
    fail("--resume '{}' is a file: --resume takes the run directory (runs/NAME, which holds "
         "config.toml and checkpoints/)", path);
  if (fs::exists(d / "config.toml", ec) || fs::is_directory(d / "checkpoints", ec)) return;
  if (has_checkpoint_files(d)) {
    const fs::path run = d.parent_path().parent_path();
    // step_00000020 -> 20 (STEP where the folder is named otherwise)
    const std::string name = d.filename().string();
    int64_t n = 0;
    size_t i = 5;
    for (; name.starts_with("step_") && i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])); ++i)
      n = n * 10 + (name[i] - '0');
    const std::string step = i > 5 ? std::to_string(n) : std::string("STEP");
    fail("--resume '{}' is a checkpoint folder: --resume takes the run directory; continue from "
         "this checkpoint with --resume {} --checkpoint {}", path, run.string(), step);
  }
  if (has_step_folders(d))
    fail("--resume '{}' is a folder of checkpoints: --resume takes the run directory above it, "
         "--resume {}", path, d.parent_path().string());
  fail("--resume '{}' is not a run directory (it has no config.toml and no checkpoints/): give "
       "the folder a training run wrote, runs/NAME", path);
}

}  // namespace aiscale::train
