#include "aiscale/train/run_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"

namespace aiscale::train {
namespace fs = std::filesystem;

RunDirectory::RunDirectory(const std::string& parent, const std::string& name, bool resume,
                           bool writer)
    : path_((fs::path(parent) / name).string()), writer_(writer) {
  if (!writer_) return;
  std::error_code ec;
  if (fs::exists(path_) && !resume)
    fail("run directory '{}' already exists: choose another run.name, remove it, or pass --resume "
         "to continue it", path_);
  fs::create_directories(fs::path(path_) / "checkpoints", ec);
  if (ec) fail("cannot create run directory '{}': {}", path_, ec.message());
  std::string metrics = (fs::path(path_) / "metrics.jsonl").string();
  metrics_fd_ = ::open(metrics.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (metrics_fd_ < 0) fail("cannot open '{}': {}", metrics, std::strerror(errno));
}

RunDirectory::~RunDirectory() {
  if (metrics_fd_ >= 0) {
    ::fsync(metrics_fd_);
    ::close(metrics_fd_);
  }
}

void RunDirectory::write_config(const std::string& toml_text) {
  if (writer_) atomic_write_file((fs::path(path_) / "config.toml").string(), toml_text);
}

void RunDirectory::append_metrics(const nlohmann::json& record) {
  if (!writer_) return;
  std::string line = record.dump() + "\n";
  ssize_t n = ::write(metrics_fd_, line.data(), line.size());
  if (n != static_cast<ssize_t>(line.size()))
    fail("writing metrics to '{}/metrics.jsonl' failed: {}", path_, std::strerror(errno));
}

void RunDirectory::write_summary(const nlohmann::json& summary) {
  if (!writer_) return;
  ::fsync(metrics_fd_);
  atomic_write_file((fs::path(path_) / "summary.json").string(), summary.dump(2) + "\n");
}

}  // namespace aiscale::train
