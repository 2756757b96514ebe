#include "aiscale/sweep/train_search.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "aiscale/core/config_schema.h"
#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/sweep/asha.h"
#include "aiscale/sweep/point_processes.h"
#include "aiscale/sweep/stop_signals.h"
#include "aiscale/sweep/train_placement.h"
#include "aiscale/sweep/train_trials.h"
#include "aiscale/train/checkpoint.h"
#include "aiscale/tune/results_io.h"

extern char** environ;

namespace aiscale::sweep {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace trials;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---- one trial's process --------------------------------------------------------------

struct Slot {
  std::vector<int> gpus;  // CUDA device numbers of this slot; empty on CPUs
  int64_t trial = -2;     // the trial running there; -2: free
  int64_t next = -2;      // a trial set up there, waiting at its start gate; -2: none
};

struct Running {
  pid_t pid = 0;
  size_t slot = 0;
  double started = 0;
  bool stop_sent = false;      // told to stop (by the halving or by a stop signal)
  bool stopped_by_rung = false;
  double kill_at = 0;
  std::uintmax_t offset = 0;   // how far metrics.jsonl has been read
  std::string marker;          // AISCALE_STUDY_POINT of its processes
  std::string gate;            // its start gate (AISCALE_START_GATE); empty: none
  bool waiting = false;        // set up, waiting for the slot (its gate closed)
  bool released = false;       // its slot went to the next trial before it exited
};

class Search {
 public:
  Search(const tune::StudyConfig& c, const TrainSearchOptions& o) : c_(c), o_(o) {}
  TrainSearchOutcome run();

 private:
  void prepare_dir();
  void plan_slots();
  std::vector<std::string> train_overrides(const TrialRecord& t) const;
  void launch(TrialRecord& t, size_t slot, bool prestart = false);
  bool room_for_next(size_t slot) const;
  void free_slot(size_t slot, int64_t trial);
  void read_metrics(TrialRecord& t, Running& r);
  void finish(TrialRecord& t, Running& r, int status);
  void stop_trial(Running& r, int sig);
  void save(const TrialRecord& t) const;
  void say(const std::string& line) const;
  std::string trial_dir(const TrialRecord& t) const { return (fs::path(dir_) / "trials" / t.name).string(); }
  void write_results(TrainSearchOutcome& out) const;

  const tune::StudyConfig& c_;
  const TrainSearchOptions& o_;
  std::string dir_, self_, device_ = "cpu", launcher_ = "local";
  std::vector<TrialRecord> trials_;  // the default first
  std::vector<Slot> slots_;
  std::map<int64_t, Running> running_;  // by index into trials_
  Asha asha_{3, {}};
  bool halving_ = false;
  int64_t steps_ = 0, eval_every_ = 0, threads_ = 1, failures_ = 0;
  TrainSearchOutcome outcome_;  // filled as the search runs: trials started, resumed, skipped first
  double busy_s_ = 0, step_s_ = 0;  // process and training-step time of this run of the study
  bool prestart_ = false;
  double next_room_check_ = 0;
};

void Search::say(const std::string& line) const {
  if (o_.quiet) return;
  std::printf("tune: %s\n", line.c_str());
  std::fflush(stdout);
}

void Search::save(const TrialRecord& t) const {
  atomic_write_file((fs::path(dir_) / "trials" / (t.name + ".json")).string(), trial_json(t).dump(1) + "\n");
}

void Search::prepare_dir() {
  dir_ = fs::absolute(c_.dir).lexically_normal().string();
  const std::string base_text = read_file(c_.train.config);
  const json identity = {{"kind", "train"}, {"study", o_.study_text}, {"train_config", c_.train.config},
                         {"train_config_text", base_text}};
  const std::string fp = fmt::format("{:016x}", tune::fingerprint(identity.dump()));
  const fs::path tune_json = fs::path(dir_) / "tune.json";
  if (fs::exists(tune_json) && !o_.fresh) {
    json old;
    try {
      old = json::parse(read_file(tune_json.string()));
    } catch (const json::exception&) {
      fail("{}: not a tune.json this aiscale wrote: remove the directory or run with --fresh", tune_json.string());
    }
    if (old.value("fingerprint", "") != fp)
      fail("{} holds a study of another configuration (the study file or its training config {} changed): "
           "run with --fresh to start over there, or give study.dir another directory",
           dir_, c_.train.config);
  }
  if (o_.fresh && fs::exists(dir_)) {
    // Only what a study writes is removed.
    for (const char* name : {"trials", "best", "results.csv", "results.json", "tune.json"}) fs::remove_all(fs::path(dir_) / name);
  }
  fs::create_directories(fs::path(dir_) / "trials");
  atomic_write_file(tune_json.string(), json{{"format", "aiscale-tune"}, {"fingerprint", fp}, {"backend", "train"}, {"name", c_.name},
                                             {"study_text", o_.study_text}, {"train_config", c_.train.config}}
                                            .dump(1) + "\n");
}

void Search::plan_slots() {
  const TrialPlacement p = plan_placement(c_);
  launcher_ = p.launcher;
  device_ = p.device;
  threads_ = p.threads;
  for (const auto& gpus : p.slot_gpus) slots_.push_back(Slot{gpus});
}

std::vector<std::string> Search::train_overrides(const TrialRecord& t) const {
  std::vector<std::string> set = c_.train.set;
  for (const auto& [k, v] : t.params) set.push_back(override_text(k, v));
  return set;
}

// Whether a slot's GPUs can hold a second trial beside the running one: its trial has
// trained a step (so its memory is allocated) and every GPU of the slot has used less than
// 45 % of its memory (nvidia-smi). Never on CPUs: the cores are shared out already.
bool Search::room_for_next(size_t slot) const {
  const Slot& sl = slots_[slot];
  if (sl.gpus.empty() || !prestart_ || sl.trial < -1 || sl.next != -2) return false;
  const auto it = running_.find(sl.trial + 1);
  if (it == running_.end() || trials_[static_cast<size_t>(sl.trial + 1)].last_step < 1) return false;
  return gpus_memory_below(sl.gpus, 0.45);
}

// The slot's trial has ended or been stopped: its waiting trial (if any) starts training.
void Search::free_slot(size_t slot, int64_t trial) {
  Slot& sl = slots_[slot];
  if (sl.trial != trial) return;
  sl.trial = -2;
  if (auto it = running_.find(trial + 1); it != running_.end() && !it->second.released) {
    it->second.released = true;
    busy_s_ += now_s() - it->second.started;  // the slot's time, up to here
  }
  if (sl.next == -2) return;
  const int64_t next = sl.next;
  sl.next = -2;
  sl.trial = next;
  Running& r = running_.at(next + 1);
  r.waiting = false;
  r.started = now_s();
  atomic_write_file(r.gate, "open\n");
  say(fmt::format("{} leaves its start gate", trials_[static_cast<size_t>(next + 1)].name));
}

void Search::launch(TrialRecord& t, size_t slot, bool prestart) {
  const std::string run_dir = trial_dir(t);
  const std::string log = (fs::path(dir_) / "trials" / (t.name + ".log")).string();
  std::vector<std::string> train_args;
  const bool resume = fs::exists(fs::path(run_dir) / "checkpoints") &&
                      train::latest_checkpoint((fs::path(run_dir) / "checkpoints").string()).has_value();
  if (resume) {
    train_args = {"train", "--resume", run_dir, "-q"};
    ++outcome_.resumed;
  } else {
    // A run directory without a checkpoint holds nothing to continue from.
    std::error_code ec;
    fs::remove_all(run_dir, ec);
    std::vector<std::string> set = train_overrides(t);
    set.push_back(fmt::format("run.dir={}", config::toml_quote((fs::path(dir_) / "trials").string())));
    set.push_back(fmt::format("run.name={}", config::toml_quote(t.name)));
    set.push_back(fmt::format("train.eval_every={}", eval_every_));
    set.push_back("train.log_every=1");
    if (device_ == "cpu") set.push_back(fmt::format("train.threads={}", threads_));
    // The trial's config is checked here first, so a bad combination fails with its reason
    // and no process is started for it.
    try {
      (void)resolved_toml(c_.train.config, set);
    } catch (const Error& e) {
      t.status = "failed";
      t.error = e.what();
      ++failures_;
      save(t);
      say(fmt::format("{} failed before it started: {}", t.name, t.error));
      return;
    }
    train_args = {"train", "-c", c_.train.config};
    for (const auto& s : set) {
      train_args.push_back("--set");
      train_args.push_back(s);
    }
    train_args.push_back("-q");
    ++outcome_.started;
  }
  const int64_t ranks = c_.train.ranks_per_trial;
  std::vector<std::string> argv;
  if (launcher_ == "srun") {
    argv = {"srun", "--exact", fmt::format("--ntasks={}", ranks), fmt::format("--cpus-per-task={}", threads_),
            "--kill-on-bad-exit=1", self_};
    if (device_ == "cuda") argv.insert(argv.begin() + 4, "--gpus-per-task=1");
  } else if (ranks > 1) {
    argv = {self_, "launch", "-n", std::to_string(ranks), "--threads-per-rank", std::to_string(threads_), "--"};
  } else {
    argv = {self_};
  }
  argv.insert(argv.end(), train_args.begin(), train_args.end());

  Running r;
  r.slot = slot;
  r.started = now_s();
  r.marker = fs::path(run_dir).lexically_normal().string();
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string_view v(*e);
    if (v.rfind(std::string(kPointEnv) + "=", 0) == 0) continue;
    if (!slots_[slot].gpus.empty() && v.rfind("CUDA_VISIBLE_DEVICES=", 0) == 0) continue;
    if (v.rfind("OMP_NUM_THREADS=", 0) == 0) continue;
    if (launcher_ == "local" && is_launcher_variable(v)) continue;
    env.emplace_back(*e);
  }
  env.push_back(std::string(kPointEnv) + "=" + r.marker);
  if (prestart) {
    r.gate = (fs::path(dir_) / "trials" / (t.name + ".gate")).string();
    std::error_code ec;
    fs::remove(r.gate, ec);
    r.waiting = true;
    env.push_back("AISCALE_START_GATE=" + r.gate);
  }
  env.push_back(fmt::format("OMP_NUM_THREADS={}", threads_));
  if (!slots_[slot].gpus.empty()) env.push_back(fmt::format("CUDA_VISIBLE_DEVICES={}", fmt::join(slots_[slot].gpus, ",")));
  r.pid = start_process(argv, env, log);
  t.status = "running";
  ++t.attempts;
  save(t);
  if (prestart) slots_[slot].next = t.trial;
  else slots_[slot].trial = t.trial;
  std::string keys;
  for (const auto& [k, v] : t.params) keys += fmt::format(" {}={}", k, tune::value_text(v));
  say(fmt::format("{} {}{}{}{}", t.name, resume ? "resumed from its checkpoint" : "started",
                  slots_[slot].gpus.empty() ? "" : fmt::format(" on GPU {}", fmt::join(slots_[slot].gpus, ",")),
                  prestart ? ", waiting at its start gate while the GPU's trial trains" : "", keys));
  running_[static_cast<int64_t>(&t - trials_.data())] = r;
}

void Search::stop_trial(Running& r, int sig) {
  ::kill(-r.pid, sig);
  signal_processes(find_point_processes(r.marker), sig);
}

void Search::read_metrics(TrialRecord& t, Running& r) {
  const fs::path metrics = fs::path(trial_dir(t)) / "metrics.jsonl";
  std::error_code ec;
  const auto size = fs::file_size(metrics, ec);
  if (ec || size <= r.offset) return;
  std::ifstream in(metrics, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(r.offset));
  std::string chunk(static_cast<size_t>(size - r.offset), '\0');
  in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
  chunk.resize(static_cast<size_t>(in.gcount()));
  const size_t end = chunk.rfind('\n');
  if (end == std::string::npos) return;  // a line still being written
  r.offset += end + 1;
  std::stringstream lines(chunk.substr(0, end));
  for (std::string line; std::getline(lines, line);) {
    json j = json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("step")) continue;
    const int64_t step = j["step"].get<int64_t>();
    if (step <= t.last_step && !j.contains("val_loss")) continue;  // a resumed run's lines already read
    if (step > t.last_step) {
      t.last_step = step;
      // Trained out: what is left (the last validation, its checkpoint) overlaps the next
      // trial, already set up beside it in memory.
      if (step >= steps_ && slots_[r.slot].trial == t.trial && slots_[r.slot].next != -2) free_slot(r.slot, t.trial);
      if (j.contains("step_time_s") && j["step_time_s"].is_number()) {
        t.step_seconds += j["step_time_s"].get<double>();
        step_s_ += j["step_time_s"].get<double>();
      }
    }
    if (!j.contains("val_loss")) continue;
    const double loss = number_of(j["val_loss"]);
    if (std::any_of(t.curve.begin(), t.curve.end(), [&](const auto& p) { return p.first == step; })) continue;
    t.curve.emplace_back(step, loss);
    t.val_loss = loss;
    if (halving_ && asha_.is_rung(step)) {
      const bool go_on = asha_.record(t.trial, step, loss, t.trial < 0);
      t.rungs.push_back({step, loss, go_on});
      const auto rank = asha_.recorded(step);
      if (!go_on && !r.stop_sent) {
        r.stop_sent = true;
        r.stopped_by_rung = true;
        r.kill_at = now_s() + c_.train.stop_grace_s;
        // SIGUSR1: aiscale train ends after its step without a checkpoint (a stopped trial
        // never continues, so writing one would only keep the slot from the next trial).
        stop_trial(r, SIGUSR1);
        free_slot(r.slot, t.trial);
        say(fmt::format("{} step {}: validation loss {:.4f}, not among the best 1/{} of the {} trial(s) at this "
                        "rung: stopped", t.name, step, loss, c_.halving.eta, rank.size()));
      } else {
        say(fmt::format("{} step {}: validation loss {:.4f}, goes on ({} trial(s) at this rung)", t.name, step,
                        loss, rank.size()));
      }
    }
    save(t);
  }
}

void Search::finish(TrialRecord& t, Running& r, int status) {
  read_metrics(t, r);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  // Ranks that outlive the launcher are ended with it.
  end_point_processes(r.marker, r.stop_sent ? SIGKILL : SIGTERM, r.stop_sent ? 1.0 : 10.0);
  if (!r.waiting) t.seconds += now_s() - r.started;
  t.exit_code = code;
  const std::string log = (fs::path(dir_) / "trials" / (t.name + ".log")).string();
  json summary;
  if (fs::exists(fs::path(trial_dir(t)) / "summary.json"))
    summary = json::parse(read_file((fs::path(trial_dir(t)) / "summary.json").string()), nullptr, false);
  const bool reached = summary.is_object() && summary.value("steps", int64_t{0}) >= steps_ &&
                       summary.value("status", std::string()) == "finished";
  if (r.stopped_by_rung) {
    t.status = "stopped";
    // A stopped trial never continues: a checkpoint it wrote (a periodic one, or one written
    // because the stop signal crossed a SIGTERM) only takes space.
    std::error_code ec;
    fs::remove_all(fs::path(trial_dir(t)) / "checkpoints", ec);
    say(fmt::format("{} stopped at step {} (validation loss {:.4f})", t.name, t.rungs.empty() ? t.last_step : t.rungs.back().step,
                    t.val_loss));
  } else if (code == 0 && reached) {
    t.status = "finished";
    if (summary.contains("val_loss")) t.val_loss = number_of(summary["val_loss"]);
    say(fmt::format("{} finished: validation loss {:.4f} after {} steps ({:.1f} s)", t.name, t.val_loss, steps_, t.seconds));
  } else if (StopSignals::received()) {
    t.status = "pending";  // interrupted with the study: resumed from its checkpoint next time
  } else if (code == 3) {
    t.status = "diverged";
    t.val_loss = kNaN;
    t.error = log_tail(log, 2);
    say(fmt::format("{} diverged (exit 3): {}", t.name, t.error));
  } else {
    t.status = "failed";
    t.error = code == 0 ? fmt::format("ended at step {} of {} without an error: {}", t.last_step, steps_, log_tail(log, 2))
                        : log_tail(log, 3);
    ++failures_;
    say(fmt::format("{} failed (exit {}): {} — its output: {}", t.name, code, t.error, log));
  }
  if (r.waiting && slots_[r.slot].next == t.trial) slots_[r.slot].next = -2;
  if (!r.waiting) free_slot(r.slot, t.trial);  // counts its slot time unless released before
  if (!r.gate.empty()) {
    std::error_code ec;
    fs::remove(r.gate, ec);
  }
  save(t);
}

TrainSearchOutcome Search::run() {
  const auto wall_start = now_s();
  self_ = o_.self_exe.empty() ? fs::read_symlink("/proc/self/exe").string() : o_.self_exe;
  // The trials' length and validation passes.
  steps_ = std::get<int64_t>(study_value(c_, "train.steps"));
  if (steps_ <= 0)
    fail("{}: the trials of {} train by epochs (train.steps = 0): a train study needs train.steps, in "
         "[fixed] or in the training config", c_.config_path, c_.train.config);
  halving_ = c_.halving.enabled;
  std::vector<int64_t> rungs;
  if (halving_) {
    rungs = asha_rungs(c_.halving.min_budget, steps_, c_.halving.eta);
    asha_ = Asha(c_.halving.eta, rungs);
    eval_every_ = c_.halving.min_budget;
  } else {
    eval_every_ = std::get<int64_t>(study_value(c_, "train.eval_every"));
    if (eval_every_ <= 0) eval_every_ = std::max<int64_t>(1, steps_ / 10);
  }
  plan_slots();  // every refusal before the study directory is touched
  prestart_ = c_.train.prestart && launcher_ == "local" && !slots_.empty() && !slots_.front().gpus.empty();
  prepare_dir();

  // The default configuration and the drawn trials, with their state from an earlier run.
  TrialRecord def;
  def.trial = -1;
  def.name = "default";
  def.params = c_.fixed;
  trials_.push_back(def);
  const std::vector<tune::Params> drawn = tune::make_trials(c_);
  for (size_t i = 0; i < drawn.size(); ++i) {
    TrialRecord t;
    t.trial = static_cast<int64_t>(i);
    t.name = fmt::format("trial-{:03d}", i);
    t.params = drawn[i];
    trials_.push_back(std::move(t));
  }
  std::deque<size_t> queue;
  for (size_t i = 0; i < trials_.size(); ++i) {
    TrialRecord& t = trials_[i];
    const std::string state = (fs::path(dir_) / "trials" / (t.name + ".json")).string();
    if (fs::exists(state)) {
      read_trial_state(t, state);
      for (const auto& r : t.rungs) asha_.restore(t.trial, r.step, r.val_loss, r.went_on);
      if (t.status == "failed") ++failures_;
    }
    if (t.status == "finished" || t.status == "stopped" || t.status == "failed" || t.status == "diverged") {
      ++outcome_.skipped;
      continue;
    }
    // A rung passed before the interruption that decided "stop" is final.
    if (std::any_of(t.rungs.begin(), t.rungs.end(), [](const auto& r) { return !r.went_on; })) {
      t.status = "stopped";
      save(t);
      ++outcome_.skipped;
      continue;
    }
    queue.push_back(i);
  }
  say(fmt::format("{}: {} trial(s) and the default configuration of {}, {} step(s) each; {} at a time ({}{}); "
                  "{}{} to run, {} done before",
                  c_.name, drawn.size(), c_.train.config, steps_, slots_.size(),
                  launcher_ == "srun" ? "Slurm job steps" : slots_.front().gpus.empty() ? "CPU" : "GPU",
                  c_.train.ranks_per_trial > 1 ? fmt::format(", {} ranks each", c_.train.ranks_per_trial) : "",
                  halving_ ? fmt::format("rungs at steps {} (eta {}); ", fmt::join(rungs, ", "), c_.halving.eta) : "",
                  queue.size(), outcome_.skipped));

  StopSignals signals;
  bool gave_up = false;
  while (!queue.empty() || !running_.empty()) {
    const bool stopping = StopSignals::received() != 0;
    if (!stopping && !gave_up && c_.train.max_failures >= 0 && failures_ > c_.train.max_failures) {
      gave_up = true;
      say(fmt::format("{} trial(s) failed, more than train.max_failures = {}: no further trial is started",
                      failures_, c_.train.max_failures));
    }
    // Fill the free slots.
    for (size_t s = 0; s < slots_.size() && !stopping && !gave_up && !queue.empty(); ++s) {
      if (slots_[s].trial != -2) continue;
      const size_t i = queue.front();
      queue.pop_front();
      launch(trials_[i], s);
    }
    // The next trial of a GPU set up while its trial trains (when the GPU has the room).
    if (!stopping && !gave_up && !queue.empty() && now_s() >= next_room_check_) {
      next_room_check_ = now_s() + 0.25;
      for (size_t s = 0; s < slots_.size() && !queue.empty(); ++s) {
        if (!room_for_next(s)) continue;
        const size_t i = queue.front();
        queue.pop_front();
        launch(trials_[i], s, /*prestart=*/true);
      }
    }
    // Watch the running trials.
    for (auto it = running_.begin(); it != running_.end();) {
      TrialRecord& t = trials_[static_cast<size_t>(it->first)];
      Running& r = it->second;
      if (stopping && !r.stop_sent) {
        r.stop_sent = true;
        r.kill_at = now_s() + c_.train.stop_grace_s;
        // A trial still at its start gate has trained nothing: it goes without a checkpoint.
        stop_trial(r, r.waiting ? SIGUSR1 : StopSignals::received());
      }
      if (r.stop_sent && (now_s() > r.kill_at || StopSignals::count() > 1)) stop_trial(r, SIGKILL);
      read_metrics(t, r);
      int status = 0;
      const pid_t w = ::waitpid(r.pid, &status, WNOHANG);
      if (w == r.pid) {
        finish(t, r, status);
        it = running_.erase(it);
      } else {
        ++it;
      }
    }
    if (stopping && running_.empty()) break;
    if (gave_up && running_.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }

  TrainSearchOutcome& out = outcome_;
  out.interrupted = StopSignals::received() != 0;
  out.wall_seconds = now_s() - wall_start;
  out.parallel_trials = static_cast<int64_t>(slots_.size());
  out.rungs = rungs;
  out.dir = dir_;
  write_results(out);
  if (gave_up)
    fail("{}: {} trial(s) failed (more than train.max_failures = {}); their errors are in {}/results.csv "
         "and each trial's log under {}/trials", c_.config_path, failures_, c_.train.max_failures, dir_, dir_);
  return out;
}

void Search::write_results(TrainSearchOutcome& out) const {
  std::vector<TrialRecord> board = trials_;
  std::stable_sort(board.begin(), board.end(), finished_better);
  out.trials = trials_;
  const double capacity = out.wall_seconds * static_cast<double>(std::max<int64_t>(1, out.parallel_trials));
  out.busy_share = capacity > 0 ? busy_s_ / capacity : 0;
  out.step_share = capacity > 0 ? step_s_ / capacity : 0;
  for (const auto& t : board)
    if (t.trial >= 0 && t.status == "finished" && std::isfinite(t.val_loss)) {
      out.best = t.trial;
      break;
    }
  // Keys, in the order of the study's [params] then [fixed].
  std::vector<std::string> keys;
  for (const auto& p : c_.params) keys.push_back(p.name);
  for (const auto& [k, v] : c_.fixed) keys.push_back(k);
  atomic_write_file((fs::path(dir_) / "results.csv").string(), leaderboard_csv(board, keys));
  json rows = json::array();
  for (const auto& t : board) {
    json row = trial_json(t);
    row["rank"] = rows.size() + 1;
    rows.push_back(std::move(row));
  }
  json params = json::array();
  for (const auto& p : c_.params) {
    static const char* kinds[] = {"uniform", "log-uniform", "int", "choice"};
    params.push_back({{"name", p.name}, {"type", kinds[static_cast<int>(p.kind)]}, {"low", p.low}, {"high", p.high}});
  }
  json j = {{"kind", "train-search"},
            {"name", c_.name},
            {"train_config", c_.train.config},
            {"metric", "val_loss"},
            {"search", c_.search},
            {"steps", steps_},
            {"halving", halving_ ? json{{"eta", c_.halving.eta}, {"rungs", out.rungs}} : json(nullptr)},
            {"params", params},
            {"parallel_trials", out.parallel_trials},
            {"ranks_per_trial", c_.train.ranks_per_trial},
            {"launcher", launcher_},
            {"device", device_},
            {"wall_seconds", out.wall_seconds},
            {"busy_share", out.busy_share},
            {"step_share", out.step_share},
            {"interrupted", out.interrupted},
            {"best", out.best >= 0 ? json(fmt::format("trial-{:03d}", out.best)) : json(nullptr)},
            {"default_val_loss", tune::number_or_null(trials_.front().val_loss)},  // the default is first
            {"trials", rows}};
  atomic_write_file((fs::path(dir_) / "results.json").string(), j.dump(1) + "\n");
  if (out.best >= 0) {
    const TrialRecord& b = trials_[static_cast<size_t>(out.best + 1)];
    std::string text = fmt::format(
        "# The best trial ({}, validation loss {:.6g} after {} steps) of the study {} ({}):\n"
        "# {} with these keys set. Train it with: aiscale train -c {}/best/config.toml\n",
        b.name, b.val_loss, steps_, c_.name, c_.config_path, c_.train.config, dir_);
    for (const auto& [k, v] : b.params) text += fmt::format("#   {}\n", override_text(k, v));
    text += resolved_toml(c_.train.config, train_overrides(b));
    fs::create_directories(fs::path(dir_) / "best");
    atomic_write_file((fs::path(dir_) / "best" / "config.toml").string(), text);
  }
}

}  // namespace

tune::TrainKeyCatalogue train_key_catalogue() {
  tune::TrainKeyCatalogue k;
  k.keys = [](const std::string& base, const std::vector<std::string>& set) { return keys_of(base, set); };
  return k;
}


TrainSearchOutcome run_train_search(const tune::StudyConfig& c, const TrainSearchOptions& o) {
  Search s(c, o);
  return s.run();
}

}  // namespace aiscale::sweep
