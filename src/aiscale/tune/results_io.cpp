#include "aiscale/tune/results_io.h"

#include <cmath>
#include <filesystem>
#include <limits>

#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"

namespace aiscale::tune {

nlohmann::json params_to_json(const Params& p) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : p) {
    if (auto* i = std::get_if<int64_t>(&v)) j[k] = *i;
    else if (auto* d = std::get_if<double>(&v)) j[k] = *d;
    else j[k] = std::get<std::string>(v);
  }
  return j;
}

nlohmann::json number_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }

void write_task_record(const std::string& path, const TaskRecord& r) {
  nlohmann::json j = {{"format", "aiscale-tune-task"}, {"version", 1}, {"id", r.id},
                      {"trial", r.trial}, {"fold", r.fold}, {"rung", r.rung}, {"budget", r.budget},
                      {"score", number_or_null(r.score)}, {"seconds", r.seconds}, {"rank", r.rank},
                      {"threads", r.threads}};
  atomic_write_file(path, j.dump() + "\n");
}

std::optional<TaskRecord> read_task_record(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  try {
    const nlohmann::json j = nlohmann::json::parse(read_file(path));
    if (j.value("format", "") != "aiscale-tune-task")
      fail("not a task result (format '{}')", j.value("format", ""));
    TaskRecord r;
    r.id = j.at("id").get<std::string>();
    r.trial = j.at("trial").get<int64_t>();
    r.fold = j.at("fold").get<int32_t>();
    r.rung = j.at("rung").get<int64_t>();
    r.budget = j.at("budget").get<int64_t>();
    r.score = j.at("score").is_null() ? std::numeric_limits<double>::quiet_NaN() : j.at("score").get<double>();
    r.seconds = j.at("seconds").get<double>();
    r.rank = j.at("rank").get<int>();
    r.threads = j.at("threads").get<int>();
    return r;
  } catch (const nlohmann::json::exception& e) {
    fail("task result '{}' is corrupt ({}): delete it and run the study again to redo that task", path, e.what());
  } catch (const Error& e) {
    fail("task result '{}' is corrupt ({}): delete it and run the study again to redo that task", path, e.what());
  }
}

uint64_t fingerprint(const std::string& text) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ULL;
  return h;
}

}  // namespace aiscale::tune
