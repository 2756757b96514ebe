// Per-step records of a run (steps.jsonl): every rank's step time, data-wait time and
// host-visible synchronisation time per optimizer step, epoch boundaries with their
// wall, training and validation time, and per-rank events (peak memory, GPU power).
//
// Cost: a record is a few numbers appended to a vector in memory. The ranks' records are
// gathered to rank 0 with one all-reduce every `flush_every` steps and at the end (the
// ranks step in lock-step, so every rank flushes at the same step), and rank 0 appends
// them to the file with one write() per line, so a crash never leaves half a record.
//
// The file holds all ranks (rank 0 writes it): one line per rank per step, then the
// epoch records and the events. Format: docs/guide/scaling.md#per-step-records.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "aiscale/parallel/comm.h"

namespace aiscale::train {

struct StepRecord {
  int64_t step = 0;    // 1-based optimizer step
  int64_t epoch = 0;   // the epoch of the step's first batch
  double step_time_s = 0;
  double data_wait_s = 0;  // time in the batch source's next_batch
  double sync_s = 0;       // time in host-visible collectives (gradient and loss all-reduce)
  double loss = 0;         // mean over ranks
  int64_t tokens = 0;      // per rank
  int64_t samples = 0;     // per rank
  bool first_in_epoch = false, last_in_epoch = false, warmup = false;
};

struct EpochRecord {
  int64_t epoch = 0;
  int64_t first_step = 0, last_step = 0;
  double wall_s = 0, train_s = 0, val_s = 0;
  bool complete = false;  // the epoch's last batch was served in this run
};

class StepLog {
 public:
  // `path` is written by rank 0 only ("" on every rank: nothing written, nothing gathered).
  // With keep_through_step >= 0 (a resumed run) the file keeps the steps up to that step and
  // the epochs before `keep_before_epoch`; otherwise it is started afresh.
  StepLog(std::string path, parallel::Communicator& comm, int64_t keep_through_step = -1,
          int64_t keep_before_epoch = 0);
  ~StepLog();
  StepLog(const StepLog&) = delete;
  StepLog& operator=(const StepLog&) = delete;

  bool enabled() const { return enabled_; }
  // This rank's record; flushes (a collective) every flush_every records.
  void add(const StepRecord& r);
  // Rank 0's epoch boundary (written at finish()).
  void add_epoch(const EpochRecord& e) { epochs_.push_back(e); }
  // A per-rank event ({"event": name, ...fields}); gathered and written at finish().
  void add_rank_event(const std::string& name, const std::vector<std::pair<std::string, double>>& fields);
  // Collective: gathers and writes what is buffered.
  void flush();
  // Collective: flush, then the epochs and events. Call once, on every rank.
  void finish();

  int64_t flush_every = 256;

 private:
  void write_line(const std::string& line);
  std::string path_;
  parallel::Communicator& comm_;
  bool enabled_ = false;
  int fd_ = -1;
  std::vector<StepRecord> pending_;
  std::vector<EpochRecord> epochs_;
  struct RankEvent {
    std::string name;
    std::vector<std::pair<std::string, double>> fields;
  };
  std::vector<RankEvent> events_;
};

// Peak memory of this process for the records: resident set size (CPU).
size_t process_peak_rss_bytes();

}  // namespace aiscale::train
