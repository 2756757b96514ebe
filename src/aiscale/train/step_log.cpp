#include "aiscale/train/step_log.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"

namespace aiscale::train {
namespace {

// A resumed run keeps the records of the steps it resumes after.
void keep_records(const std::string& path, int64_t through_step, int64_t before_epoch) {
  if (!std::filesystem::exists(path)) return;
  std::ifstream in(path);
  std::string line, kept;
  while (std::getline(in, line)) {
    try {
      auto j = nlohmann::json::parse(line);
      const bool keep = j.contains("event")
                            ? j.value("event", "") == "epoch" && j.value("epoch", int64_t{0}) < before_epoch
                            : j.value("step", int64_t{0}) <= through_step;
      if (keep) kept += line + "\n";
    } catch (const nlohmann::json::exception&) {
      // a line cut by a crash: drop it
    }
  }
  atomic_write_file(path, kept);
}

}  // namespace

size_t process_peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<size_t>(u.ru_maxrss) * 1024;
}

StepLog::StepLog(std::string path, parallel::Communicator& comm, int64_t keep_through_step,
                 int64_t keep_before_epoch)
    : path_(std::move(path)), comm_(comm), enabled_(!path_.empty()) {
  if (!enabled_ || comm_.rank() != 0) return;
  if (keep_through_step >= 0) keep_records(path_, keep_through_step, keep_before_epoch);
  const int flags = O_WRONLY | O_CREAT | O_APPEND | (keep_through_step >= 0 ? 0 : O_TRUNC);
  fd_ = ::open(path_.c_str(), flags, 0644);
  if (fd_ < 0) fail("cannot open step records '{}': {}", path_, std::strerror(errno));
}

StepLog::~StepLog() {
  if (fd_ >= 0) ::close(fd_);
}

void StepLog::write_line(const std::string& line) {
  if (fd_ < 0) return;
  ssize_t n = ::write(fd_, line.data(), line.size());
  if (n != static_cast<ssize_t>(line.size()))
    fail("writing step records to '{}' failed: {}", path_, std::strerror(errno));
}

void StepLog::add(const StepRecord& r) {
  if (!enabled_) return;
  pending_.push_back(r);
  if (static_cast<int64_t>(pending_.size()) >= flush_every) flush();
}

void StepLog::add_rank_event(const std::string& name,
                             const std::vector<std::pair<std::string, double>>& fields) {
  if (enabled_) events_.push_back({name, fields});
}

void StepLog::flush() {
  if (!enabled_) return;
  // The ranks hold the same steps (lock-step); each contributes its own timings in its
  // slot of one buffer, summed over the ranks.
  constexpr int K = 3;
  const int world = comm_.world(), rank = comm_.rank();
  const size_t n = pending_.size();
  std::vector<double> all(size_t(world) * n * K, 0.0);
  for (size_t i = 0; i < n; ++i) {
    double* x = all.data() + (size_t(rank) * n + i) * K;
    x[0] = pending_[i].step_time_s;
    x[1] = pending_[i].data_wait_s;
    x[2] = pending_[i].sync_s;
  }
  if (world > 1 && n > 0) comm_.allreduce_sum(all.data(), int64_t(all.size()));
  if (rank == 0) {
    for (size_t i = 0; i < n; ++i) {
      const StepRecord& r = pending_[i];
      for (int q = 0; q < world; ++q) {
        const double* x = all.data() + (size_t(q) * n + i) * K;
        nlohmann::json j = {{"rank", q},
                            {"step", r.step},
                            {"epoch", r.epoch},
                            {"step_time_s", x[0]},
                            {"data_wait_s", x[1]},
                            {"sync_s", x[2]},
                            {"tokens", r.tokens},
                            {"samples", r.samples},
                            {"loss", r.loss},
                            {"first_in_epoch", r.first_in_epoch},
                            {"last_in_epoch", r.last_in_epoch},
                            {"warmup", r.warmup}};
        write_line(j.dump() + "\n");
      }
    }
  }
  pending_.clear();
}

void StepLog::finish() {
  if (!enabled_) return;
  flush();
  const int world = comm_.world(), rank = comm_.rank();
  for (const EpochRecord& e : epochs_) {
    nlohmann::json j = {{"event", "epoch"},        {"epoch", e.epoch},   {"first_step", e.first_step},
                        {"last_step", e.last_step}, {"wall_s", e.wall_s}, {"train_s", e.train_s},
                        {"val_s", e.val_s},         {"complete", e.complete}};
    write_line(j.dump() + "\n");
  }
  for (const RankEvent& ev : events_) {
    const size_t k = ev.fields.size();
    std::vector<double> all(size_t(world) * k, 0.0);
    for (size_t f = 0; f < k; ++f) all[size_t(rank) * k + f] = ev.fields[f].second;
    if (world > 1 && k > 0) comm_.allreduce_sum(all.data(), int64_t(all.size()));
    for (int q = 0; q < world; ++q) {
      nlohmann::json j = {{"event", ev.name}, {"rank", q}};
      for (size_t f = 0; f < k; ++f) j[ev.fields[f].first] = all[size_t(q) * k + f];
      write_line(j.dump() + "\n");
    }
  }
  events_.clear();
  epochs_.clear();
  if (fd_ >= 0) {
    ::fsync(fd_);
    ::close(fd_);
    fd_ = -1;
  }
}

}  // namespace aiscale::train
