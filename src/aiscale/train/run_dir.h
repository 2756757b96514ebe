// A run directory: config.toml (resolved), metrics.jsonl (one complete JSON line per
// logged step), summary.json (written last, atomically: its presence marks a finished
// run), checkpoints/ (see checkpoint.h).
#pragma once
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace aiscale::train {

class RunDirectory {
 public:
  // Creates parent/name (fails if it exists and resume is false). Only rank 0 writes.
  RunDirectory(const std::string& parent, const std::string& name, bool resume, bool writer);
  ~RunDirectory();
  RunDirectory(const RunDirectory&) = delete;
  RunDirectory& operator=(const RunDirectory&) = delete;

  const std::string& path() const { return path_; }
  bool writer() const { return writer_; }
  void write_config(const std::string& toml_text);
  // One line, written with a single write() so a crash never leaves half a record.
  void append_metrics(const nlohmann::json& record);
  void write_summary(const nlohmann::json& summary);

 private:
  std::string path_;
  bool writer_;
  int metrics_fd_ = -1;
};

}  // namespace aiscale::train
