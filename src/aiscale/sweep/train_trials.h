// The pieces of a search over training runs (train_search.h) that know one trial at a time:
// the training config's keys and resolved text, a trial's state file, its process and its
// log, where trials may run (GPUs, cores), and the leaderboard's order.
#pragma once
#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "aiscale/sweep/train_search.h"
#include "aiscale/tune/space.h"

namespace aiscale::sweep::trials {

double now_s();  // a steady clock, in seconds

// The training config `base` with the overrides `set`, resolved (every key with its value),
// as TOML; a GPT/Llama config or an image classifier's. Throws Error for a bad config.
std::string resolved_toml(const std::string& base, const std::vector<std::string>& set);
// Every key of that config's schema with its type and range, its value there the default.
std::vector<tune::Hyperparameter> keys_of(const std::string& base, const std::vector<std::string>& set);
// "train.lr=0.003", "train.schedule='cosine'", "train.recompute=true": a --set override.
std::string override_text(const std::string& key, const tune::Value& v);

// The value a study's trials train with unless a trial sets it: [fixed]'s, else the
// training config's own (StudyConfig::train_keys).
tune::Value study_value(const tune::StudyConfig& c, const std::string& key);

double number_of(const nlohmann::json& j);  // NaN for null
// A trial's state file (trials/<name>.json), and reading one back into `t` (its number,
// name and keys are the study's); a damaged file fails naming it and the fix.
nlohmann::json trial_json(const TrialRecord& t);
void read_trial_state(TrialRecord& t, const std::string& path);

// Starts argv with environment `env` in a session of its own, its output appended to `log`
// (after a "$ command" line); stdin is /dev/null.
pid_t start_process(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                    const std::string& log);
// The last `lines` lines of a trial's log (not its command line), joined by " | ".
std::string log_tail(const std::string& log, size_t lines);

// CUDA devices this node offers: CUDA_VISIBLE_DEVICES when set, else /dev/nvidiaN.
std::vector<int> visible_gpus();
// Whether each of these GPUs has used at most `share` of its memory (nvidia-smi); false when
// nvidia-smi cannot say.
bool gpus_memory_below(const std::vector<int>& gpus, double share);
int cores();
// Whether an environment entry is a launcher's word to its ranks (Slurm, PMIx, OpenMPI,
// MPICH, torchrun): a trial started by the study is not one of those ranks.
bool is_launcher_variable(std::string_view v);

// The leaderboard's order: finished trials by their loss, then stopped ones (the later rung
// first), then those not done, then failed ones.
bool finished_better(const TrialRecord& a, const TrialRecord& b);
std::string csv_cell(std::string s);
// results.csv: a header naming `keys`, then one row per trial of `board` (in its order).
std::string leaderboard_csv(const std::vector<TrialRecord>& board, const std::vector<std::string>& keys);

}  // namespace aiscale::sweep::trials
