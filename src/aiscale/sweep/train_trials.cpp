#include "aiscale/sweep/train_trials.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>

#include "aiscale/core/config_schema.h"
#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/orchestrate/process.h"
#include "aiscale/sweep/point_processes.h"
#include "aiscale/train/config.h"
#include "aiscale/train/vision_config.h"
#include "aiscale/tune/results_io.h"

namespace aiscale::sweep::trials {

namespace fs = std::filesystem;
using json = nlohmann::json;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// ---- the training config's keys -------------------------------------------------------

namespace {

bool vision(const std::string& base, const std::vector<std::string>& set) {
  return train::is_vision_config(read_file(base), set);
}

}  // namespace

// The resolved config as TOML: every key with its value.
std::string resolved_toml(const std::string& base, const std::vector<std::string>& set) {
  if (vision(base, set)) return train::to_toml(train::load_vision_config(base, set));
  return train::to_toml(train::load_train_config(base, set));
}

namespace {

tune::Value value_at(const toml::table& t, const config::KeyInfo& k) {
  const toml::node* n = t.at_path(k.name).node();
  if (!n) return tune::Value{std::string()};
  if (auto i = n->value_exact<int64_t>()) return tune::Value{*i};
  if (auto d = n->value_exact<double>()) return tune::Value{*d};
  if (auto b = n->value_exact<bool>()) return tune::Value{std::string(*b ? "true" : "false")};
  if (auto s = n->value_exact<std::string>()) return tune::Value{*s};
  return tune::Value{std::string()};
}

}  // namespace

std::vector<tune::Hyperparameter> keys_of(const std::string& base, const std::vector<std::string>& set) {
  const bool v = vision(base, set);
  const std::vector<config::KeyInfo> infos = v ? train::vision_config_keys() : train::config_keys();
  toml::table resolved;
  try {
    resolved = toml::parse(resolved_toml(base, set), base);
  } catch (const toml::parse_error& e) {
    fail("internal: the resolved config of {} does not read back: {}", base, e.description());
  }
  std::vector<tune::Hyperparameter> out;
  for (const auto& k : infos) {
    tune::Hyperparameter h;
    h.name = k.name;
    h.doc = k.doc;
    h.default_value = value_at(resolved, k);
    if (k.type == "integer") {
      h.type = 'i';
      h.min = static_cast<double>(k.min_int);
      h.max = static_cast<double>(k.max_int);
    } else if (k.type == "number") {
      h.type = 'r';
      h.min = k.min_real;
      h.max = k.max_real;
    } else if (k.type == "boolean") {
      h.type = 'b';
    } else {
      h.type = 's';
      h.choices = k.choices;
    }
    h.budget = k.name == "train.steps";
    out.push_back(std::move(h));
  }
  return out;
}

tune::Value study_value(const tune::StudyConfig& c, const std::string& key) {
  if (const auto f = c.fixed.find(key); f != c.fixed.end()) return f->second;
  for (const auto& h : c.train_keys)
    if (h.name == key) return h.default_value;
  fail("internal: the training config has no key {}", key);
}

// ---- state files ----------------------------------------------------------------------

double number_of(const json& j) { return j.is_number() ? j.get<double>() : kNaN; }

json trial_json(const TrialRecord& t) {
  json curve = json::array(), rungs = json::array();
  for (const auto& [s, l] : t.curve) curve.push_back({s, tune::number_or_null(l)});
  for (const auto& r : t.rungs)
    rungs.push_back({{"step", r.step}, {"val_loss", tune::number_or_null(r.val_loss)}, {"went_on", r.went_on}});
  return {{"trial", t.trial}, {"name", t.name}, {"params", tune::params_to_json(t.params)}, {"status", t.status},
          {"curve", curve}, {"rungs", rungs}, {"last_step", t.last_step}, {"val_loss", tune::number_or_null(t.val_loss)},
          {"exit_code", t.exit_code}, {"error", t.error}, {"seconds", t.seconds},
          {"step_seconds", t.step_seconds}, {"attempts", t.attempts}};
}

void read_trial_state(TrialRecord& t, const std::string& path) {
  json j;
  try {
    j = json::parse(read_file(path));
    t.status = j.at("status").get<std::string>();
    t.curve.clear();
    for (const auto& p : j.at("curve")) t.curve.emplace_back(p.at(0).get<int64_t>(), number_of(p.at(1)));
    t.rungs.clear();
    for (const auto& r : j.at("rungs"))
      t.rungs.push_back({r.at("step").get<int64_t>(), number_of(r.at("val_loss")), r.at("went_on").get<bool>()});
    t.last_step = j.at("last_step").get<int64_t>();
    t.val_loss = number_of(j.at("val_loss"));
    t.exit_code = j.at("exit_code").get<int>();
    t.error = j.at("error").get<std::string>();
    t.seconds = j.at("seconds").get<double>();
    t.step_seconds = j.at("step_seconds").get<double>();
    t.attempts = j.at("attempts").get<int64_t>();
  } catch (const json::exception& e) {
    fail("{}: not a trial state this aiscale wrote ({}): remove it to run the trial again, or start the "
         "study over with --fresh", path, e.what());
  }
}

pid_t start_process(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                    const std::string& log) {
  return start_logged_process(argv, env, log, /*append=*/true, fmt::format("cannot run '{}'\n", argv[0]));
}

std::string log_tail(const std::string& log, size_t lines) {
  std::ifstream in(log);
  std::deque<std::string> last;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '$') continue;
    last.push_back(line);
    if (last.size() > lines) last.pop_front();
  }
  std::string out;
  for (const auto& l : last) out += (out.empty() ? "" : " | ") + l;
  return out;
}

// ---- the study -------------------------------------------------------------------------

std::string override_text(const std::string& key, const tune::Value& v) {
  if (auto* s = std::get_if<std::string>(&v)) {
    if (*s == "true" || *s == "false") return key + "=" + *s;
    return key + "=" + config::toml_quote(*s);
  }
  return key + "=" + tune::value_text(v);
}

// CUDA devices this node offers: CUDA_VISIBLE_DEVICES when set, else /dev/nvidiaN.
std::vector<int> visible_gpus() {
  std::vector<int> out;
  if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES")) {
    std::stringstream ss(v);
    for (std::string item; std::getline(ss, item, ',');)
      if (!item.empty() && std::all_of(item.begin(), item.end(), ::isdigit)) out.push_back(std::stoi(item));
    return out;
  }
  for (int i = 0; i < 1024; ++i)
    if (fs::exists(fmt::format("/dev/nvidia{}", i))) out.push_back(i);
  return out;
}

// What a launcher tells its ranks about their place (Slurm, PMIx, OpenMPI, MPICH,
// torchrun): a trial started here by this process is not one of those ranks, even where the
// study itself runs inside a job.
bool is_launcher_variable(std::string_view v) {
  for (const char* prefix : {"SLURM_PROCID=", "SLURM_NTASKS=", "SLURM_LOCALID=", "SLURM_STEP_ID=", "PMIX_RANK=",
                             "PMI_RANK=", "PMI_SIZE=", "OMPI_COMM_WORLD_", "RANK=", "WORLD_SIZE=", "LOCAL_RANK="})
    if (v.rfind(prefix, 0) == 0) return true;
  return false;
}

int cores() {
  const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

bool finished_better(const TrialRecord& a, const TrialRecord& b) {
  // Finished first, by loss; then stopped, the later rung first; then the rest.
  auto group = [](const TrialRecord& t) {
    if (t.status == "finished" && std::isfinite(t.val_loss)) return 0;
    if (t.status == "stopped") return 1;
    if (t.status == "pending" || t.status == "running") return 2;
    return 3;
  };
  const int ga = group(a), gb = group(b);
  if (ga != gb) return ga < gb;
  if (ga == 1 && a.last_step != b.last_step) return a.last_step > b.last_step;
  const bool an = !std::isfinite(a.val_loss), bn = !std::isfinite(b.val_loss);
  if (an != bn) return bn;
  if (!an && a.val_loss != b.val_loss) return a.val_loss < b.val_loss;
  return a.trial < b.trial;
}

std::string csv_cell(std::string s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char ch : s) out += ch == '"' ? std::string("\"\"") : std::string(1, ch == '\n' ? ' ' : ch);
  return out + "\"";
}


std::string leaderboard_csv(const std::vector<TrialRecord>& board, const std::vector<std::string>& keys) {
  std::string csv = "rank,trial,status,last_step,val_loss,seconds,step_seconds";
  for (const auto& k : keys) csv += "," + csv_cell(k);
  csv += ",error\n";
  int64_t rank = 0;
  for (const auto& t : board) {
    csv += fmt::format("{},{},{},{},{},{:.3f},{:.3f}", ++rank, t.name, csv_cell(trial_status_text(t)), t.last_step,
                       std::isfinite(t.val_loss) ? fmt::format("{:.6g}", t.val_loss) : std::string(), t.seconds,
                       t.step_seconds);
    for (const auto& k : keys) {
      const auto it = t.params.find(k);
      csv += "," + (it == t.params.end() ? std::string() : csv_cell(tune::value_text(it->second)));
    }
    csv += "," + csv_cell(t.error) + "\n";
  }
  return csv;
}

bool gpus_memory_below(const std::vector<int>& gpus, double share) {
  for (int g : gpus) {
    const auto r = orchestrate::run_process({"nvidia-smi", "--query-gpu=memory.used,memory.total",
                                             "--format=csv,noheader,nounits", "-i", std::to_string(g)});
    double used = 0, total = 0;
    if (!r.ok() || std::sscanf(r.out.c_str(), "%lf, %lf", &used, &total) != 2 || total <= 0) return false;
    if (used > share * total) return false;
  }
  return true;
}

}  // namespace aiscale::sweep::trials

namespace aiscale::sweep {

std::string trial_status_text(const TrialRecord& t) {
  if (t.status == "stopped") {
    for (const auto& r : t.rungs)
      if (!r.went_on) return fmt::format("stopped at step {}", r.step);
    return "stopped";
  }
  if (t.status == "failed") return t.exit_code >= 0 ? fmt::format("failed (exit {})", t.exit_code) : "failed";
  if (t.status == "pending" && t.last_step > 0) return fmt::format("interrupted at step {}", t.last_step);
  return t.status;
}

}  // namespace aiscale::sweep
