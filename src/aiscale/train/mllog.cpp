#include "aiscale/train/mllog.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "aiscale/core/error.h"

namespace aiscale::train {
namespace {
const char* type_name(MlLog::Type t) {
  switch (t) {
    case MlLog::Type::interval_start: return "INTERVAL_START";
    case MlLog::Type::interval_end: return "INTERVAL_END";
    default: return "POINT_IN_TIME";
  }
}
}  // namespace

std::string mllog_line(int64_t time_ms, MlLog::Type type, const std::string& key,
                       const nlohmann::json& value, nlohmann::json metadata,
                       const std::string& file, int64_t line) {
  metadata["file"] = file;
  metadata["lineno"] = line;
  // Member order as MLPerf's own logger writes it (nlohmann::ordered_json keeps it).
  nlohmann::ordered_json j;
  j["namespace"] = "";
  j["time_ms"] = time_ms;
  j["event_type"] = type_name(type);
  j["key"] = key;
  j["value"] = value;
  j["metadata"] = metadata;
  return ":::MLLOG " + j.dump() + "\n";
}

MlLog::MlLog(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0)
    fail("run.mllog: cannot create '{}': {}; choose a run.dir you can write to", path,
         std::strerror(errno));
}

MlLog::~MlLog() {
  if (fd_ >= 0) ::close(fd_);
}

void MlLog::event(Type type, const std::string& key, const nlohmann::json& value,
                  const nlohmann::json& metadata, CallSite where) {
  const int64_t ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch()).count();
  // The source file relative to the source tree ("src/aiscale/train/..."), however the
  // build named it (absolute or relative to the build folder).
  std::string file = where.file;
  if (const size_t at = file.find("src/aiscale/"); at != std::string::npos) file = file.substr(at);
  const std::string line = mllog_line(ms, type, key, value, metadata, file, where.line);
  const ssize_t n = ::write(fd_, line.data(), line.size());
  if (n != static_cast<ssize_t>(line.size()))
    fail("cannot write the MLLOG file '{}': {}", path_, n < 0 ? std::strerror(errno) : "short write");
}

}  // namespace aiscale::train
