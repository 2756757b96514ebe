// A study's configuration (TOML) and its search space: which backend, which data, which
// metric, how many folds, and for each searched hyperparameter its distribution.
//
//   [study]  name, backend ("mlp" | "xgboost"), task, metric, search ("random" | "grid"),
//            trials, folds, seed, threads, threads_per_task, dir
//   [data]   source ("csv" | "idx" | "synthetic"), path, target, images, labels, rows,
//            image_pool, synthetic_rows, noise
//   [halving] eta, min_budget, max_budget   (successive halving; the section turns it on)
//   [fixed]  hyperparameter = value          (held fixed for every trial)
//   [params.NAME] type = "uniform" | "log-uniform" | "int" | "choice", low, high, values,
//            points (grid search: how many values a continuous range is cut into)
//
// Every key is checked: an unknown key fails naming the nearest known one; an empty range,
// a non-positive log-uniform bound or a value outside a hyperparameter's limits fails
// naming the key (docs/guide/tune.md lists them all).
//
// backend = "train" searches training runs instead: [params] and [fixed] name keys of a
// training config ("train.lr"), each trial is an `aiscale train` run of the config in
// [train] (sweep/train_search.h runs them), and [halving] is asynchronous successive halving
// on the validation loss at training steps. Such a study has no [data] and no folds.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "aiscale/tune/dataset.h"

namespace aiscale::tune {

using Value = std::variant<int64_t, double, std::string>;
std::string value_text(const Value& v);  // 3, 0.001, adam
double value_number(const Value& v);     // ints and reals; fails on text
using Params = std::map<std::string, Value>;

enum class Backend { mlp, xgboost, train };
const char* backend_name(Backend b);

// One hyperparameter a backend understands.
struct Hyperparameter {
  std::string name;
  char type;  // 'i' integer, 'r' real, 's' text, 'b' boolean (a training config's; held as "true"/"false")
  double min = 0, max = 0;             // numbers: the allowed range
  std::vector<std::string> choices;    // text: the allowed values
  Value default_value;
  bool budget = false;                 // the training length successive halving varies
  std::string doc;
};
const std::vector<Hyperparameter>& hyperparameters(Backend b);
const Hyperparameter& budget_hyperparameter(Backend b);
// Every hyperparameter of the backend: `p`'s value where given, else the default.
Params with_defaults(Backend b, const Params& p);

enum class ParamKind { uniform, log_uniform, integer, choice };
struct ParamSpec {
  std::string name;
  ParamKind kind = ParamKind::choice;
  double low = 0, high = 0;
  std::vector<Value> values;  // choice
  int64_t points = 0;         // grid search of a continuous range
};

struct DataConfig {
  std::string source = "csv";
  std::string path, target;
  std::string images = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";
  std::string labels = "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz";
  int64_t rows = 0;                 // subsample to this many rows (0: all)
  int64_t image_pool = 1;           // idx: average k x k pixel blocks (fewer features)
  int64_t synthetic_rows = 100000;  // source = "synthetic"
  double noise = 0.1;
};

// backend = "train": the training runs the trials are, and where they run.
struct TrainSearchConfig {
  std::string config;              // the training config every trial starts from (absolute)
  std::vector<std::string> set;    // overrides of it for every trial and the default run
  std::string launcher = "auto";   // "local" (processes here), "srun" (job steps), "auto"
  int64_t ranks_per_trial = 1;     // ranks of each trial (aiscale launch -n / srun -n)
  int64_t gpus_per_trial = 0;      // GPUs of each trial; 0: CPU trials (train.device = cpu)
  int64_t gpus = -1;               // GPUs of this node to pack trials onto; -1: every visible one
  int64_t parallel_trials = 0;     // trials at once; 0: from the GPUs or cores
  int64_t threads_per_rank = 0;    // CPU threads of each rank; 0: the cores shared out
  double stop_grace_s = 60;        // a stopped trial's time to checkpoint before SIGKILL
  bool prestart = true;            // GPU trials: set up the next trial while one trains (when room)
  int64_t max_failures = -1;       // failed trials after which the study gives up; -1: never
};

// The keys a train study may search or fix: what the training config's schema says of each
// (tune sits beside train in the layering, so the caller supplies them from the config the
// study names). `keys(base_config, set)` lists every key with its type and limits, and the
// config's own value (after the overrides `set`) as its default.
struct TrainKeyCatalogue {
  std::function<std::vector<Hyperparameter>(const std::string& base_config, const std::vector<std::string>& set)> keys;
};

struct HalvingConfig {
  bool enabled = false;
  int64_t eta = 3;         // keep the best 1/eta of the trials at each rung
  int64_t min_budget = 0;  // budget (epochs / boosting rounds) of the first rung
  int64_t max_budget = 0;  // budget of the last rung
};

enum class Metric { rmse, mae, r2, accuracy, log_loss, val_loss };

struct StudyConfig {
  std::string config_path;  // the TOML file, for messages
  std::string name = "tune";
  Backend backend = Backend::mlp;
  TaskKind task = TaskKind::regression;
  bool task_given = false;
  Metric metric = Metric::rmse;
  bool metric_given = false;
  std::string search = "random";
  int64_t trials = 20;
  int64_t folds = 5;
  uint64_t seed = 1;
  int64_t threads = 0;           // per rank; 0: all cores (or OMP_NUM_THREADS)
  int64_t threads_per_task = 0;  // 0: chosen from the counts
  std::string dir;               // the tune directory; default tune/<name>
  DataConfig data;
  TrainSearchConfig train;  // backend = "train"
  std::vector<Hyperparameter> train_keys;  // backend = "train": the base config's keys
  HalvingConfig halving;
  Params fixed;
  std::vector<ParamSpec> params;
};

// Reads and checks a study file. `overrides` are "section.key=value" texts (--set).
// `train_keys` is needed for backend = "train" (a study of training runs).
StudyConfig load_study_config(const std::string& path, const std::vector<std::string>& overrides = {},
                              const TrainKeyCatalogue* train_keys = nullptr);
// Checks against the data once it is loaded: folds against rows, task against metric.
void check_against_data(StudyConfig& c, const Dataset& d);

// The trials to run: every point of the grid, or `trials` random draws, seeded. Each holds
// only the searched hyperparameters plus [fixed].
std::vector<Params> make_trials(const StudyConfig& c);
// `count` random draws with the study's seed offset by `stream` (the scaling table).
std::vector<Params> random_trials(const StudyConfig& c, int64_t count, uint64_t stream);

const char* metric_name(Metric m);
bool higher_is_better(Metric m);

}  // namespace aiscale::tune
