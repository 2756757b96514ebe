#include "aiscale/orchestrate/study_status.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/orchestrate/slurm_jobs.h"
#include "aiscale/orchestrate/study_files.h"

namespace aiscale::orchestrate {
namespace fs = std::filesystem;

namespace {

std::deque<std::string> last_lines(const std::string& path, int n) {
  std::deque<std::string> lines;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    lines.push_back(line);
    if (static_cast<int>(lines.size()) > n) lines.pop_front();
  }
  return lines;
}

// The exit status the job script wrote as its last line, or -1.
int marker_status(const std::string& log) {
  const std::string marker = "aiscale-slurm: exit status ";
  for (const auto& line : last_lines(log, 5))
    if (line.rfind(marker, 0) == 0) {
      try {
        return std::stoi(line.substr(marker.size()));
      } catch (...) {
        return -1;
      }
    }
  return -1;
}

}  // namespace

std::vector<PointStatus> poll_study(const std::string& study_dir, int tail_lines) {
  const fs::path root = fs::absolute(study_dir);
  const auto points = read_study_points(root.string());
  SlurmRecord rec = load_slurm_record(root.string());
  std::vector<std::string> ids;
  for (const auto& p : points)
    if (const PointJob* j = rec.current(p.id)) ids.push_back(j->job_id);
  const auto live = query_jobs(ids);
  const std::string now = utc_iso8601();

  std::vector<PointStatus> out;
  for (const auto& p : points) {
    PointStatus s;
    s.id = p.id;
    s.log = (fs::path(p.dir) / "log.txt").string();
    auto it = rec.points.find(p.id);
    if (it == rec.points.end() || it->second.empty()) {
      s.state = "NOT_SUBMITTED";
      out.push_back(s);
      continue;
    }
    PointJob& job = it->second.back();
    s.job_id = job.job_id;
    if (!job.log.empty()) s.log = (root / job.log).string();
    auto lj = live.find(job.job_id);
    if (lj != live.end()) {
      s.state = lj->second.state;
      s.reason = lj->second.reason;
      s.exit_code = lj->second.exit_code;
    } else if (int status = marker_status(s.log); status >= 0) {
      s.state = status == 0 ? "COMPLETED" : "FAILED";
      s.exit_code = fmt::format("{}:0", status);
      s.reason = "Slurm no longer lists the job; its log's last line gives the exit status";
    } else if (is_terminal_state(job.state)) {
      s.state = job.state;  // seen ending before; Slurm has since forgotten it
      s.reason = job.reason;
      s.exit_code = job.exit_code;
    } else {
      s.state = "UNKNOWN";
      s.reason = "Slurm no longer lists the job and its log has no exit status (purged "
                 "without accounting, or the job never started)";
    }
    s.active = !is_terminal_state(s.state) && s.state != "UNKNOWN";
    s.died = is_died_state(s.state) || s.state == "UNKNOWN";
    if (is_hopeless_pending(s.state, s.reason)) {
      // Queued, but Slurm says it can never start: report it rather than wait for it.
      s.active = false;
      s.died = true;
      s.reason = s.reason + ": the job can never start as submitted (scancel " + s.job_id +
                 ", change the request and submit again)";
    }
    // A job step can fail while the batch script still exits 0; the marker tells.
    if (s.state == "COMPLETED") {
      int status = marker_status(s.log);
      if (status > 0) {
        s.state = "FAILED";
        s.died = true;
        s.exit_code = fmt::format("{}:0", status);
        s.reason = "the ranks exited with status " + std::to_string(status);
      }
    }
    s.completed = s.state == "COMPLETED";
    if (s.died)
      for (const auto& line : last_lines(s.log, tail_lines)) s.log_tail += line + "\n";
    job.state = s.state;
    job.reason = s.reason;
    job.exit_code = s.exit_code;
    job.updated = now;
    out.push_back(s);
  }
  save_slurm_record(root.string(), rec);
  return out;
}

std::vector<PointStatus> wait_for_study(
    const std::string& study_dir, const WaitOptions& o,
    const std::function<void(const std::vector<PointStatus>&)>& progress) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  double pause = std::max(0.1, o.first_poll_s);
  while (true) {
    auto statuses = poll_study(study_dir);
    if (progress) progress(statuses);
    std::vector<std::string> active;
    for (const auto& s : statuses)
      if (s.active) active.push_back(fmt::format("{} (job {}, {})", s.id, s.job_id, s.state));
    if (active.empty()) return statuses;
    const double waited = std::chrono::duration<double>(clock::now() - start).count();
    if (waited >= o.timeout_s)
      fail("--wait: after {:.0f} s these points are still queued or running: {}: wait longer "
           "(--timeout) or look at them with squeue", waited, fmt::join(active, ", "));
    const double next = std::min(pause, o.timeout_s - waited);
    std::this_thread::sleep_for(std::chrono::duration<double>(std::max(0.05, next)));
    pause = std::min(o.max_poll_s, pause * 1.5);
  }
}

std::string format_status(const std::vector<PointStatus>& statuses) {
  size_t w = 5;
  for (const auto& s : statuses) w = std::max(w, s.id.size());
  std::string out = fmt::format("{:<{}}  {:<10}  {:<14}  {:<6}  {}\n", "point", w, "job", "state", "exit", "reason");
  for (const auto& s : statuses)
    out += fmt::format("{:<{}}  {:<10}  {:<14}  {:<6}  {}\n", s.id, w, s.job_id.empty() ? "-" : s.job_id,
                       s.state, s.exit_code.empty() ? "-" : s.exit_code,
                       s.reason.empty() || s.reason == "None" ? "" : s.reason);
  for (const auto& s : statuses)
    if (s.died) {
      out += fmt::format("\n{} (job {}) died: {}{}. Last lines of {}:\n", s.id, s.job_id, s.state,
                         s.exit_code.empty() ? "" : ", exit " + s.exit_code, s.log);
      out += s.log_tail.empty() ? "  (the log is empty or missing)\n" : s.log_tail;
    }
  return out;
}

std::vector<PointStatus> collect_study(const std::string& study_dir,
                                       const std::function<void(const std::string&)>& refresh_points) {
  auto statuses = poll_study(study_dir);
  if (refresh_points) refresh_points(fs::absolute(study_dir).string());
  return statuses;
}

}  // namespace aiscale::orchestrate
