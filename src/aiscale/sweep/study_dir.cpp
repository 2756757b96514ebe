#include "aiscale/sweep/study_dir.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "aiscale/core/build_info.h"
#include "aiscale/core/error.h"
#include "aiscale/parallel/bootstrap.h"
#include "aiscale/core/fs.h"
#include "aiscale/core/timer.h"
#include "aiscale/sweep/point_processes.h"
#include "aiscale/sweep/stop_signals.h"
#include "aiscale/train/progress.h"

namespace aiscale::sweep {
namespace fs = std::filesystem;

nlohmann::json read_study_index(const std::string& dir) {
  const std::string path = (fs::path(dir) / "study.json").string();
  if (!fs::exists(path)) fail("'{}' holds no study.json: is it a study directory of `aiscale scale`?", dir);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    fail("'{}' is corrupt ({}); it was left as it is: restore it, or move the folder away and "
         "run the study into a new one", path, e.what());
  }
  if (!j.is_object() || j.value("format", "") != "aiscale-study" || !j.contains("points") ||
      !j["points"].is_array() || !j.contains("study_id"))
    fail("'{}' is not an aiscale study index (format \"aiscale-study\" with study_id and points); "
         "it was left as it is: restore it or choose another folder", path);
  return j;
}

void write_study_index(const std::string& dir, const nlohmann::json& index) {
  atomic_write_file((fs::path(dir) / "study.json").string(), index.dump(2) + "\n");
}

nlohmann::json open_study_dir(const Study& s, const std::string& dir, const std::string& command_line) {
  const std::string id = s.study_id();
  nlohmann::json index;
  if (fs::exists(fs::path(dir) / "study.json")) {
    index = read_study_index(dir);
    if (index["study_id"] != id)
      fail("'{}' holds another study: '{}' (study_id {}), not '{}' (study_id {}) as described in "
           "'{}': run it into another folder with -o, or remove the old one",
           dir, index.value("name", "?"), index["study_id"].get<std::string>(), s.name, id, s.source_path);
  } else if (fs::exists(dir) && !fs::is_empty(dir)) {
    fail("'{}' exists and is not a study directory (no study.json): choose a new folder with -o", dir);
  }
  std::error_code ec;
  fs::create_directories(fs::path(dir) / "points", ec);
  if (ec) fail("cannot create study directory '{}': {}", dir, ec.message());
  const fs::path abs = fs::absolute(dir).lexically_normal();
  if (!fs::exists(fs::path(dir) / "study.toml")) atomic_write_file((fs::path(dir) / "study.toml").string(), s.toml_text);

  const auto points = study_points(s);
  if (index.is_null()) {
    index = {{"format", "aiscale-study"}, {"version", 1}, {"name", s.name}, {"study_id", id},
             {"created", utc_iso8601()}, {"aiscale_version", AISCALE_VERSION},
             {"command", command_line}, {"kind", s.kind}, {"description", s.description},
             {"workload", s.resolved()["workload"]}, {"workload_text", s.workload_text()},
             {"counts", s.counts}, {"precisions", s.precisions}, {"repeats", s.repeats},
             {"device", s.device}, {"measure", s.resolved()["measure"]},
             {"environment", {{"host", host_name()}, {"cpu", cpu_model_name()},
                              {"compiler", __VERSION__}}},
             {"points", nlohmann::json::array()}};
    for (const auto& p : points)
      index["points"].push_back({{"id", p.id}, {"ranks", p.ranks}, {"precision", p.precision},
                                 {"repeat", p.repeat}, {"batch", p.batch}, {"grad_accum", p.grad_accum},
                                 {"state", "pending"}, {"reason", ""}, {"dir", "points/" + p.id}});
  }
  for (const auto& p : points) {
    const fs::path pd = abs / "points" / p.id;
    fs::create_directories(pd, ec);
    if (ec) fail("cannot create point folder '{}': {}", pd.string(), ec.message());
    if (point_status(pd.string()).state == "finished") continue;
    write_point_command(pd.string(), {p.ranks, point_argv(s, p, pd.string()), s.threads_per_rank});
  }
  write_study_index(dir, index);
  return refresh_point_states(dir);
}

nlohmann::json refresh_point_states(const std::string& dir) {
  nlohmann::json index = read_study_index(dir);
  for (auto& p : index["points"]) {
    const PointStatus st = point_status((fs::path(dir) / p.value("dir", "")).string());
    p["state"] = st.state;
    p["reason"] = st.reason;
  }
  write_study_index(dir, index);
  return index;
}

void set_point_scheduler(const std::string& dir, const std::string& point_id, const nlohmann::json& info) {
  nlohmann::json index = read_study_index(dir);
  for (auto& p : index["points"])
    if (p.value("id", "") == point_id) {
      p["scheduler"] = info;
      write_study_index(dir, index);
      return;
    }
  fail("study '{}' has no point '{}'", dir, point_id);
}

LocalCapacity this_machine() {
  LocalCapacity m;
  cpu_set_t set;
  CPU_ZERO(&set);
  m.cores = ::sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
                                                          : static_cast<int>(std::thread::hardware_concurrency());
  m.cores = std::max(1, m.cores);
  m.gpus = parallel::cuda_visible_gpus();
  m.cuda_build = build_info().cuda;
  return m;
}

void check_local_capacity(const Study& s, const LocalCapacity& m) {
  const int largest = s.counts.back();  // counts are increasing
  const std::string point = fmt::format("n{}-{}-r1", largest, s.precisions.front());
  if (s.device == "cuda") {
    if (!m.cuda_build)
      fail("{}: device = \"cuda\", but this aiscale was built without CUDA: no point of the study "
           "can run here; build it with the cuda preset (cmake --preset cuda), run the study on a "
           "GPU machine, or with --scheduler slurm", s.source_path);
    if (largest > m.gpus)
      fail("{}: point {} needs {} GPUs (one rank per GPU), but this machine shows {}: lower "
           "counts to at most {}, or run the study where there are more GPUs (--scheduler slurm)",
           s.source_path, point, largest, m.gpus, m.gpus);
    return;
  }
  const int64_t bound = int64_t{m.cores} * kMaxRanksPerCore;
  if (largest > bound && !m.oversubscribe)
    fail("{}: point {} starts {} ranks, but this machine gives this process {} core(s): a local "
         "study starts at most {} ranks per core ({}); lower counts, run the study on a larger "
         "machine or with --scheduler slurm, or pass --oversubscribe to start them anyway",
         s.source_path, point, largest, m.cores, kMaxRanksPerCore, bound);
}

void check_no_point_processes(const std::string& dir) {
  const std::string points = (fs::absolute(dir).lexically_normal() / "points").string() + "/";
  const auto found = find_point_processes(points);
  if (found.empty()) return;
  std::vector<std::string> ids, pids;
  for (const auto& p : found) {
    const std::string id = fs::path(p.point_dir).filename().string();
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
    pids.push_back(std::to_string(p.pid));
  }
  fail("point {} of study '{}' still has {} process(es) running from an earlier run: {}; a new "
       "run beside them would measure both. Wait for them to end, or end them with: kill {} "
       "(then kill -9 what is left), and run the study again",
       fmt::join(ids, ", "), dir, found.size(), describe_processes(found), fmt::join(pids, " "));
}

namespace {

// STUDY_DIR/scale.lock, held (flock) while this process runs the study's points. Not
// inherited by the points' processes (O_CLOEXEC), so it goes with this process.
class StudyLock {
 public:
  explicit StudyLock(const std::string& dir) {
    const std::string path = (fs::path(dir) / "scale.lock").string();
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("cannot open '{}': {}", path, std::strerror(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      char buf[32] = {};
      const ssize_t n = ::pread(fd_, buf, sizeof buf - 1, 0);
      ::close(fd_);
      fail("another `aiscale scale` (pid {}) is running the points of study '{}': let it finish "
           "or stop it (kill -TERM {}), then run again",
           n > 0 ? std::string(buf, static_cast<size_t>(n)) : "?", dir,
           n > 0 ? std::string(buf, static_cast<size_t>(n)) : "PID");
    }
    const std::string pid = std::to_string(::getpid());
    if (::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, pid.data(), pid.size(), 0) < 0) {}
  }
  ~StudyLock() { ::close(fd_); }
  StudyLock(const StudyLock&) = delete;
  StudyLock& operator=(const StudyLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace

RunStudyResult run_study_locally(const std::string& dir, const RunStudyOptions& options) {
  StudyLock lock(dir);
  check_no_point_processes(dir);
  nlohmann::json index = refresh_point_states(dir);
  RunStudyResult result;
  StopSignals signals;
  Timer elapsed;
  const size_t total = index["points"].size();
  auto say = [&](const std::string& line) {
    if (options.progress) options.progress(line);
  };
  for (size_t i = 0; i < total; ++i) {
    if (StopSignals::received()) {  // between two points: none is interrupted
      result.stop_signal = StopSignals::received();
      break;
    }
    auto& p = index["points"][i];
    const std::string id = p.value("id", "");
    const std::string pd = (fs::path(dir) / p.value("dir", "")).string();
    if (p.value("state", "") == "finished") {
      ++result.skipped;
      say(fmt::format("[{}/{}] {}: finished before, skipped", i + 1, total, id));
      continue;
    }
    clear_point_outputs(pd);
    p["state"] = "running";
    p["reason"] = "";
    p["started"] = utc_iso8601();
    write_study_index(dir, index);
    say(fmt::format("[{}/{}] {} ({} rank(s)): running | elapsed {}", i + 1, total, id,
                    p.value("ranks", 0), train::format_duration(elapsed.seconds())));
    Timer point_timer;
    const PointRun run = run_point_local(pd, options.executor);
    const PointStatus st = point_status(pd);
    p["state"] = st.state;
    p["reason"] = st.reason;
    p["seconds"] = point_timer.seconds();
    write_study_index(dir, index);
    if (run.stop_signal) {
      result.stop_signal = run.stop_signal;
      result.interrupted_point = id;
      say(fmt::format("[{}/{}] {}: interrupted by {} after {} | elapsed {}", i + 1, total, id,
                      stop_signal_name(run.stop_signal), train::format_duration(point_timer.seconds()),
                      train::format_duration(elapsed.seconds())));
      break;
    }
    if (st.state == "finished") {
      ++result.finished;
    } else {
      ++result.failed;
      result.failed_points.push_back(id);
    }
    say(fmt::format("[{}/{}] {}: {} in {} | elapsed {}{}", i + 1, total, id, st.state,
                    train::format_duration(point_timer.seconds()),
                    train::format_duration(elapsed.seconds()),
                    st.state == "failed" ? "\n    " + st.reason.substr(0, st.reason.find('\n')) +
                                               " (see " + pd + "/log.txt)"
                                         : ""));
  }
  return result;
}

}  // namespace aiscale::sweep
