// The tune directory's files: task result files, parameters as JSON, the merged table.
#pragma once
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "aiscale/tune/space.h"

namespace aiscale::tune {

struct TaskRecord {
  std::string id;
  int64_t trial = -1;
  int32_t fold = 0;
  int64_t rung = 0;
  int64_t budget = 0;
  double score = 0;  // NaN: the model diverged
  double seconds = 0;
  int rank = 0;
  int threads = 1;
};

nlohmann::json params_to_json(const Params& p);
// A number stays a number (null for NaN/inf: JSON has neither).
nlohmann::json number_or_null(double v);

void write_task_record(const std::string& path, const TaskRecord& r);
// nullopt when the file is absent; fails naming the file when it is unreadable.
std::optional<TaskRecord> read_task_record(const std::string& path);

// FNV-1a of a text: the study's fingerprint (same text, same value on every machine).
uint64_t fingerprint(const std::string& text);

}  // namespace aiscale::tune
