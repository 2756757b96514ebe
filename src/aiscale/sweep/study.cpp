#include "aiscale/sweep/study.h"

#include <filesystem>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>

#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/core/toml_errors.h"
#include "aiscale/core/validate.h"
#include "aiscale/data/token_loader.h"
#include "aiscale/train/config.h"
#include "aiscale/train/parallel_layout.h"

namespace aiscale::sweep {
namespace fs = std::filesystem;
namespace {

uint64_t fnv1a64(std::string_view text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// Refuses keys outside `allowed`, naming the key and every allowed one.
void check_keys(const toml::table& t, const std::vector<std::string>& allowed,
                const std::string& where, const std::string& source) {
  for (const auto& [key, node] : t) {
    std::string k(key.str());
    if (std::find(allowed.begin(), allowed.end(), k) == allowed.end())
      fail("{}: unknown key '{}'{}; allowed keys{}: {}", source, where.empty() ? k : where + "." + k,
           where.empty() ? "" : " in [" + where + "]", where.empty() ? "" : " there",
           fmt::join(allowed, ", "));
  }
}

std::string key_name(const std::string& table, const std::string& key) {
  return table.empty() ? key : table + "." + key;
}

std::string get_string(const toml::table& t, const std::string& table, const std::string& key,
                       const std::string& fallback, const std::string& source) {
  const toml::node* n = t.get(key);
  if (!n) return fallback;
  if (auto v = n->value<std::string>()) return *v;
  fail("{}: {} must be a string (in quotes)", source, key_name(table, key));
}

// "study.toml:7" where the node has a line (it always has, parsed from the file).
std::string at(const std::string& source, const toml::node& n) {
  return n.source().begin.line > 0 ? fmt::format("{}:{}", source, n.source().begin.line) : source;
}

int64_t get_int(const toml::table& t, const std::string& table, const std::string& key,
                int64_t fallback, int64_t min, int64_t max, const std::string& source) {
  const toml::node* n = t.get(key);
  if (!n) return fallback;
  // The type first: toml++ converts a float to an integer with no range check.
  if (!n->is_integer()) fail("{}: {} must be an integer", at(source, *n), key_name(table, key));
  const auto v = n->value<int64_t>();
  validate::in_range(*v, min, max, fmt::format("{}: {}", at(source, *n), key_name(table, key)));
  return *v;
}

std::vector<std::string> get_strings(const toml::table& t, const std::string& table,
                                     const std::string& key, const std::string& source) {
  std::vector<std::string> out;
  const toml::node* n = t.get(key);
  if (!n) return out;
  const toml::array* a = n->as_array();
  if (!a) fail("{}: {} must be an array of strings, e.g. [\"a\", \"b\"]", source, key_name(table, key));
  for (const auto& e : *a) {
    auto v = e.value<std::string>();
    if (!v || !e.is_string())
      fail("{}: {} must be an array of strings, e.g. [\"a\", \"b\"]", source, key_name(table, key));
    out.push_back(*v);
  }
  return out;
}

std::vector<int64_t> get_ints(const toml::table& t, const std::string& table, const std::string& key,
                              int64_t min, int64_t max, const std::string& source) {
  std::vector<int64_t> out;
  const toml::node* n = t.get(key);
  if (!n) return out;
  const toml::array* a = n->as_array();
  if (!a) fail("{}: {} must be an array of integers, e.g. [1, 2, 4]", at(source, *n), key_name(table, key));
  for (const auto& e : *a) {
    if (!e.is_integer())
      fail("{}: {} must be an array of integers, e.g. [1, 2, 4]", at(source, *n), key_name(table, key));
    out.push_back(validate::in_range(*e.value<int64_t>(), min, max,
                                     fmt::format("{}: an element of {}", at(source, *n), key_name(table, key))));
  }
  return out;
}

// Bounds of the study's numbers: those of the train config keys they become (train.batch_size,
// train.grad_accum and train.steps), a million ranks, and enough repeats and epochs for any
// measurement; beyond them a value is a typo, and refused naming the key.
constexpr int64_t kMaxBatch = int64_t{1} << 20;
constexpr int64_t kMaxGlobalBatch = int64_t{1} << 40;
constexpr int64_t kMaxSteps = int64_t{1} << 40;
constexpr int64_t kMaxEpochs = 1000000;
constexpr int64_t kMaxRepeats = 1000;

// The range of a study's integer key, for a value beyond 64 bits (core/toml_errors.h).
IntRange study_key_range(const std::string& key) {
  static const std::map<std::string, std::pair<int64_t, int64_t>> ranges = {
      {"counts", {1, kMaxStudyRanks}},        {"repeats", {1, kMaxRepeats}},
      {"threads_per_rank", {0, validate::kMaxThreads}}, {"workload.batch", {1, kMaxBatch}},
      {"workload.global_batch", {1, kMaxGlobalBatch}}, {"workload.grad_accum", {1, kMaxBatch}},
      {"measure.steps", {1, kMaxSteps}},       {"measure.epoch", {1, kMaxEpochs}},
      {"measure.epochs", {1, kMaxEpochs}}};
  const auto it = ranges.find(key);
  return it == ranges.end() ? IntRange() : IntRange(it->second);
}

// Settings that the study sets per point, so a workload must not set them itself.
const std::vector<std::pair<std::string, std::string>>& study_owned_train_keys() {
  static const std::vector<std::pair<std::string, std::string>> keys = {
      {"train.batch_size", "workload.batch or workload.global_batch"},
      {"train.grad_accum", "workload.grad_accum"},
      {"train.precision", "precisions"},
      {"train.device", "device"},
      {"train.steps", "[measure]"},
      {"run.dir", "the study directory"},
      {"run.name", "the study directory"}};
  return keys;
}

const std::vector<std::pair<std::string, std::string>>& study_owned_bench_options() {
  static const std::vector<std::pair<std::string, std::string>> keys = {
      {"--batch-size", "workload.batch or workload.global_batch"},
      {"--batch", "workload.batch"}, {"-b", "workload.batch"}, {"--micro-batch", "workload.batch"},
      {"--grad-accum", "workload.grad_accum"}, {"--precision", "precisions"},
      {"--device", "device"}, {"--steps", "[measure] steps"}, {"--warmup", "[measure] steps"},
      {"--run-dir", "the study directory"}, {"--output", "the study directory"},
      {"-o", "the study directory"}, {"--baseline-tokens-per-s", "the study's analysis"}};
  return keys;
}

void validate_study(Study& s, const std::string& source) {
  if (s.name.empty()) fail("{}: name is not set: give the study a name, e.g. name = \"gpt2-ddp\"", source);
  if (s.kind != "strong" && s.kind != "weak")
    fail("{}: kind = \"{}\" is not allowed: use \"strong\" (fixed global batch) or \"weak\" "
         "(fixed batch per rank)", source, s.kind);
  if (s.counts.empty()) fail("{}: counts is not set: list the rank counts, e.g. counts = [1, 2, 4]", source);
  // A point listed twice would be measured once and its results counted as two repeats (the
  // points share one folder): each count and precision is listed once; `repeats` repeats.
  for (size_t i = 0; i < s.counts.size(); ++i) {
    if (s.counts[i] < 1) fail("{}: counts = [{}]: every count must be positive", source, fmt::join(s.counts, ", "));
    if (i > 0 && s.counts[i] == s.counts[i - 1])
      fail("{}: counts = [{}] lists {} twice: its points (n{}-{}-r1, ...) would be measured once "
           "and counted twice; list each count once, and set repeats = N to measure each point "
           "N times", source, fmt::join(s.counts, ", "), s.counts[i], s.counts[i],
           s.precisions.empty() ? "fp32" : s.precisions.front());
    if (i > 0 && s.counts[i] < s.counts[i - 1])
      fail("{}: counts = [{}] is not increasing ({} after {}): list each count once, smallest first",
           source, fmt::join(s.counts, ", "), s.counts[i], s.counts[i - 1]);
  }
  if (s.precisions.empty()) fail("{}: precisions is empty: give at least one, e.g. [\"fp32\"]", source);
  for (size_t i = 0; i < s.precisions.size(); ++i) {
    const auto& p = s.precisions[i];
    if (p != "fp32" && p != "bf16" && p != "fp16" && p != "fp8")
      fail("{}: precision \"{}\" is not allowed: use fp32, bf16, fp16 or fp8", source, p);
    if (std::find(s.precisions.begin(), s.precisions.begin() + i, p) != s.precisions.begin() + i)
      fail("{}: precisions = [\"{}\"] lists \"{}\" twice: its points (n{}-{}-r1, ...) would be "
           "measured once and counted twice; list each precision once, and set repeats = N to "
           "measure each point N times", source, fmt::join(s.precisions, "\", \""), p,
           s.counts.front(), p);
  }
  if (s.device != "cpu" && s.device != "cuda")
    fail("{}: device = \"{}\" is not allowed: use \"cpu\" or \"cuda\"", source, s.device);
  // Training and the benchmarks run in fp32 on the CPU: such a point could never run.
  if (s.device == "cpu")
    for (const auto& p : s.precisions)
      if (p != "fp32")
        fail("{}: precision \"{}\" needs device = \"cuda\" (the CPU trains in fp32 only): its "
             "points (n{}-{}-r1, ...) could never run; set device = \"cuda\", or precisions = "
             "[\"fp32\"] on the CPU", source, p, s.counts.front(), p);
  auto& w = s.workload;
  if (w.type == "train") {
    if (w.config.empty()) fail("{}: workload.config is not set: name the train config (TOML)", source);
    if (!fs::is_regular_file(w.config))
      fail("{}: workload.config '{}' does not exist (relative paths are taken from the study "
           "file's folder)", source, w.config);
    for (const auto& o : w.set)
      for (const auto& [key, instead] : study_owned_train_keys())
        if (o.rfind(key + "=", 0) == 0 || o.rfind(key + " =", 0) == 0)
          fail("{}: workload.set sets '{}', which the study sets per point: use {} instead", source, key, instead);
  } else if (w.type == "bench") {
    if (w.suite != "language")
      fail("{}: workload.suite = \"{}\" is not a bench suite a study can run: use \"language\"", source, w.suite);
    for (const auto& o : w.options)
      for (const auto& [opt, instead] : study_owned_bench_options())
        if (o == opt || o.rfind(opt + "=", 0) == 0)
          fail("{}: workload.options holds '{}', which the study sets per point: use {} instead", source, opt, instead);
  } else {
    fail("{}: workload.type = \"{}\" is not allowed: use \"train\" (a train config) or \"bench\" "
         "(a bench suite)", source, w.type);
  }
  if (w.split != "batch" && w.split != "grad_accum")
    fail("{}: workload.split = \"{}\" is not allowed: use \"batch\" or \"grad_accum\"", source, w.split);
  if (s.kind == "strong") {
    if (w.global_batch < 1)
      fail("{}: a strong study needs workload.global_batch (samples per optimizer step over all ranks)", source);
    if (w.split == "grad_accum" && w.batch < 1)
      fail("{}: split = \"grad_accum\" needs workload.batch (the per-rank micro-batch)", source);
  } else {
    if (w.batch < 1) fail("{}: a weak study needs workload.batch (the per-rank micro-batch)", source);
    if (w.global_batch > 0)
      fail("{}: workload.global_batch belongs to strong studies: a weak study fixes workload.batch "
           "and workload.grad_accum per rank", source);
  }
  auto& m = s.measure;
  const bool by_steps = m.last_step > 0, by_epoch = m.epochs > 0;
  if (by_steps == by_epoch)
    fail("{}: [measure] needs either steps = [N, M] (measure steps N..M; 1..N-1 are warm-up) or "
         "epoch = k with epochs = K (measure the k-th of K epochs)", source);
  if (by_steps && (m.first_step < 1 || m.last_step < m.first_step))
    fail("{}: [measure] steps = [{}, {}]: give 1 <= N <= M", source, m.first_step, m.last_step);
  if (by_epoch) {
    if (w.type != "train") fail("{}: [measure] epoch/epochs needs a train workload (bench data has no epochs)", source);
    if (m.epoch < 1 || m.epoch > m.epochs)
      fail("{}: [measure] epoch = {} of epochs = {}: give 1 <= epoch <= epochs", source, m.epoch, m.epochs);
  }
}

}  // namespace

Study parse_study(const std::string& text, const std::string& source, const std::string& base_dir) {
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    if (auto m = toml_integer_out_of_range(e, text, source, study_key_range)) fail("{}", *m);
    fail("{}: not valid TOML at line {}: {}", source, e.source().begin.line, e.description());
  }
  check_keys(root, {"name", "description", "kind", "counts", "precisions", "repeats", "device",
                    "threads_per_rank", "workload", "measure"}, "", source);
  Study s;
  s.source_path = source;
  s.toml_text = text;
  s.name = get_string(root, "", "name", "", source);
  s.description = get_string(root, "", "description", "", source);
  s.kind = get_string(root, "", "kind", "", source);
  if (s.kind.empty()) fail("{}: kind is not set: use kind = \"strong\" or \"weak\"", source);
  for (int64_t c : get_ints(root, "", "counts", 1, kMaxStudyRanks, source)) s.counts.push_back(static_cast<int>(c));
  if (root.get("precisions")) s.precisions = get_strings(root, "", "precisions", source);
  s.repeats = static_cast<int>(get_int(root, "", "repeats", 1, 1, kMaxRepeats, source));
  s.device = get_string(root, "", "device", "cpu", source);
  s.threads_per_rank = static_cast<int>(get_int(root, "", "threads_per_rank", 0, 0, validate::kMaxThreads, source));

  const toml::table* w = root["workload"].as_table();
  if (!w) fail("{}: [workload] is missing: give type = \"train\" with config = \"FILE\", or "
               "type = \"bench\" with suite = \"language\"", source);
  check_keys(*w, {"type", "config", "set", "suite", "options", "batch", "global_batch", "grad_accum", "split"},
             "workload", source);
  auto& wl = s.workload;
  wl.type = get_string(*w, "workload", "type", "", source);
  wl.config = get_string(*w, "workload", "config", "", source);
  if (!wl.config.empty())
    wl.config = fs::absolute(fs::path(base_dir) / wl.config).lexically_normal().string();
  wl.set = get_strings(*w, "workload", "set", source);
  wl.suite = get_string(*w, "workload", "suite", "", source);
  wl.options = get_strings(*w, "workload", "options", source);
  wl.batch = get_int(*w, "workload", "batch", 0, 1, kMaxBatch, source);
  wl.global_batch = get_int(*w, "workload", "global_batch", 0, 1, kMaxGlobalBatch, source);
  wl.grad_accum = get_int(*w, "workload", "grad_accum", 1, 1, kMaxBatch, source);
  wl.split = get_string(*w, "workload", "split", "batch", source);

  const toml::table* m = root["measure"].as_table();
  if (!m) fail("{}: [measure] is missing: give steps = [N, M] or epoch = k with epochs = K", source);
  check_keys(*m, {"steps", "epoch", "epochs"}, "measure", source);
  auto steps = get_ints(*m, "measure", "steps", 1, kMaxSteps, source);
  if (!steps.empty()) {
    if (steps.size() != 2) fail("{}: [measure] steps must be [N, M] (first and last measured step)", source);
    s.measure.first_step = steps[0];
    s.measure.last_step = steps[1];
  }
  s.measure.epoch = get_int(*m, "measure", "epoch", 0, 1, kMaxEpochs, source);
  s.measure.epochs = get_int(*m, "measure", "epochs", 0, 1, kMaxEpochs, source);
  validate_study(s, source);
  return s;
}

Study load_study(const std::string& path) {
  if (!fs::is_regular_file(path)) fail("study file '{}' does not exist", path);
  return parse_study(read_file(path), path, fs::absolute(path).parent_path().string());
}

nlohmann::json Study::resolved() const {
  nlohmann::json w = {{"type", workload.type}, {"batch", workload.batch},
                      {"global_batch", workload.global_batch}, {"grad_accum", workload.grad_accum},
                      {"split", workload.split}};
  if (workload.type == "train") {
    w["config"] = workload.config;
    w["config_fnv1a64"] = fmt::format("{:016x}", fnv1a64(read_file(workload.config)));
    w["set"] = workload.set;
  } else {
    w["suite"] = workload.suite;
    w["options"] = workload.options;
  }
  return {{"name", name},           {"kind", kind},
          {"counts", counts},       {"precisions", precisions},
          {"repeats", repeats},     {"device", device},
          {"threads_per_rank", threads_per_rank},
          {"workload", w},
          {"measure", {{"first_step", measure.first_step}, {"last_step", measure.last_step},
                       {"epoch", measure.epoch}, {"epochs", measure.epochs}}}};
}

std::string Study::study_id() const { return fmt::format("{:016x}", fnv1a64(resolved().dump())); }

std::string Study::workload_text() const {
  if (workload.type == "train") {
    std::string t = "train " + fs::path(workload.config).filename().string();
    for (const auto& o : workload.set) t += " --set " + o;
    return t;
  }
  return fmt::format("bench {} {}", workload.suite, fmt::join(workload.options, " "));
}

std::vector<PointSpec> study_points(const Study& s) {
  std::vector<PointSpec> out;
  const auto& w = s.workload;
  for (int n : s.counts) {
    int64_t batch = w.batch, accum = w.grad_accum;
    if (s.kind == "strong") {
      const int64_t per_step = w.split == "batch" ? int64_t(n) * w.grad_accum : int64_t(n) * w.batch;
      if (w.global_batch % per_step != 0)
        fail("{}: count {} does not divide the global batch {} ({} x {} = {} does not go into "
             "it): choose counts and workload.global_batch so that it divides",
             s.source_path, n, w.global_batch, n,
             w.split == "batch" ? w.grad_accum : w.batch, per_step);
      if (w.split == "batch") batch = w.global_batch / per_step;
      else accum = w.global_batch / per_step;
    }
    for (int r = 1; r <= s.repeats; ++r)
      for (const auto& p : s.precisions)
        out.push_back({fmt::format("n{}-{}-r{}", n, p, r), n, p, r, batch, accum});
  }
  // Repeats outermost.
  std::stable_sort(out.begin(), out.end(), [](const PointSpec& a, const PointSpec& b) { return a.repeat < b.repeat; });
  // Every point has a folder of its own (validate_study refuses counts or precisions listed twice).
  std::set<std::string> ids;
  for (const auto& p : out) AISCALE_CHECK(ids.insert(p.id).second, "point {} twice in {}", p.id, s.source_path);
  return out;
}

namespace {
// Steps per epoch (global batches of the point's shape / accumulation), from the data.
int64_t train_batches_per_epoch(const Study& s, const PointSpec& p) {
  std::vector<std::string> overrides = s.workload.set;
  train::TrainConfig c = train::load_train_config(s.workload.config, overrides);
  if (c.train_data.empty()) fail("{}: epoch mode needs data.train in '{}'", s.source_path, s.workload.config);
  data::TokenLoader loader(c.train_data, p.batch, c.seq_len, 0, p.ranks, c.seed, true);
  if (loader.batches_per_epoch() < 1)
    fail("{}: the data of '{}' holds less than one global batch of {} ranks x {} samples",
         s.source_path, s.workload.config, p.ranks, p.batch);
  return loader.batches_per_epoch();
}
}  // namespace

int64_t point_total_steps(const Study& s, const PointSpec& p) {
  if (s.measure.last_step > 0) return s.measure.last_step;
  const int64_t batches = train_batches_per_epoch(s, p);
  return (s.measure.epochs * batches + p.grad_accum - 1) / p.grad_accum;
}

std::vector<std::string> point_overrides(const Study& s, const PointSpec& p, const std::string& point_dir) {
  AISCALE_CHECK(s.workload.type == "train", "point_overrides is for train workloads");
  std::vector<std::string> o = s.workload.set;
  o.push_back(fmt::format("train.batch_size={}", p.batch));
  o.push_back(fmt::format("train.grad_accum={}", p.grad_accum));
  o.push_back(fmt::format("train.precision=\"{}\"", p.precision));
  o.push_back(fmt::format("train.device=\"{}\"", s.device));
  const int64_t steps = point_total_steps(s, p);
  o.push_back(fmt::format("train.steps={}", steps));
  if (s.measure.epochs > 0) {
    // One validation pass per epoch where epochs are whole steps (its time is the epoch's
    // validation part).
    const int64_t batches = train_batches_per_epoch(s, p);
    if (batches % p.grad_accum == 0 && batches / p.grad_accum < steps)
      o.push_back(fmt::format("train.eval_every={}", batches / p.grad_accum));
  }
  o.push_back(fmt::format("run.dir=\"{}\"", point_dir));
  o.push_back("run.name=\"run\"");
  return o;
}

std::vector<std::string> point_argv(const Study& s, const PointSpec& p, const std::string& point_dir) {
  const std::string run = (fs::path(point_dir) / "run").string();
  std::vector<std::string> a;
  if (s.workload.type == "train") {
    a = {"train", "--config", s.workload.config, "--quiet"};
    for (const auto& kv : point_overrides(s, p, point_dir)) a.insert(a.end(), {"--set", kv});
  } else {
    a = {"bench", s.workload.suite};
    a.insert(a.end(), s.workload.options.begin(), s.workload.options.end());
    a.insert(a.end(), {"--batch-size", std::to_string(p.batch), "--grad-accum", std::to_string(p.grad_accum),
                       "--precision", p.precision, "--device", s.device,
                       "--warmup", std::to_string(s.measure.first_step - 1),
                       "--steps", std::to_string(s.measure.last_step - s.measure.first_step + 1),
                       "--run-dir", run});
  }
  return a;
}

void check_study_points(const Study& s) {
  if (s.workload.type != "train") return;
  // Repeats run the same configuration: one check per count and precision.
  std::set<std::pair<int, std::string>> seen;
  for (const auto& p : study_points(s)) {
    if (!seen.insert({p.ranks, p.precision}).second) continue;
    try {
      const train::TrainConfig c = train::load_train_config(
          s.workload.config, point_overrides(s, p, (fs::temp_directory_path() / "check").string()));
      train::parallel_layout(c, p.ranks);
    } catch (const Error& e) {
      fail("{}: point {} ({} rank(s), {}) could never run: {}; change the study (counts, "
           "precisions, workload) or the train config", s.source_path, p.id, p.ranks, p.precision,
           e.what());
    }
  }
}

}  // namespace aiscale::sweep
