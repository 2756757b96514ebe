// MLPerf-style result logging (run.mllog): one line per event,
//   :::MLLOG {"namespace": "", "time_ms": 1764100000000, "event_type": "POINT_IN_TIME",
//             "key": "global_batch_size", "value": 64, "metadata": {"file": ..., "lineno": ...}}
// in the run directory's mllog.txt, with the keys of MLPerf Training's logging rules
// (submission_*, run_start/run_stop, block_*/epoch_*, eval_accuracy, the hyperparameters),
// so tools that read MLPerf logs read a training run's too.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace aiscale::train {

// Where an MLLOG line was logged (its metadata's file and lineno). std::source_location
// is not available with clang 14 on Debian 12's libstdc++, so the builtins both compilers
// evaluate at the call site stand in for it.
struct CallSite {
  const char* file = "";
  int line = 0;
};

class MlLog {
 public:
  enum class Type { point_in_time, interval_start, interval_end };
  // Appends to `path` (each line written with one write()).
  explicit MlLog(const std::string& path);
  ~MlLog();
  MlLog(const MlLog&) = delete;
  MlLog& operator=(const MlLog&) = delete;

  void event(Type type, const std::string& key, const nlohmann::json& value = nullptr,
             const nlohmann::json& metadata = nlohmann::json::object(),
             CallSite where = {__builtin_FILE(), __builtin_LINE()});
  void point(const std::string& key, const nlohmann::json& value,
             const nlohmann::json& metadata = nlohmann::json::object(),
             CallSite where = {__builtin_FILE(), __builtin_LINE()}) {
    event(Type::point_in_time, key, value, metadata, where);
  }
  void start(const std::string& key, const nlohmann::json& metadata = nlohmann::json::object(),
             CallSite where = {__builtin_FILE(), __builtin_LINE()}) {
    event(Type::interval_start, key, nullptr, metadata, where);
  }
  void end(const std::string& key, const nlohmann::json& metadata = nlohmann::json::object(),
           CallSite where = {__builtin_FILE(), __builtin_LINE()}) {
    event(Type::interval_end, key, nullptr, metadata, where);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

// One line's text (for tests and for the writer).
std::string mllog_line(int64_t time_ms, MlLog::Type type, const std::string& key,
                       const nlohmann::json& value, nlohmann::json metadata,
                       const std::string& file, int64_t line);

}  // namespace aiscale::train
