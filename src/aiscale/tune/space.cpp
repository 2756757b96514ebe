// Reading a study file: every key checked against the schema, every range and value
// against the backend's limits, with the key named in each message.
#include "aiscale/core/config_schema.h"
#include "aiscale/tune/space.h"

#include <algorithm>
#include <filesystem>
#include <cmath>
#include <map>
#include <sstream>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/core/toml_errors.h"
#include "aiscale/core/validate.h"
#include "aiscale/tune/model.h"

namespace aiscale::tune {
namespace {

namespace fs = std::filesystem;

const std::map<std::string, std::vector<std::string>>& section_keys() {
  static const std::map<std::string, std::vector<std::string>> keys = {
      {"study", {"name", "backend", "task", "metric", "search", "trials", "folds", "seed", "threads",
                 "threads_per_task", "dir"}},
      {"data", {"source", "path", "target", "images", "labels", "rows", "image_pool", "synthetic_rows", "noise"}},
      {"halving", {"eta", "min_budget", "max_budget"}},
      {"train", {"config", "set", "launcher", "ranks_per_trial", "gpus_per_trial", "gpus", "parallel_trials",
                 "threads_per_rank", "stop_grace_s", "max_failures", "prestart"}},
  };
  return keys;
}

using config::edit_distance;

[[noreturn]] void unknown_key(const std::string& source, const std::string& key,
                              const std::vector<std::string>& known, const std::string& what) {
  std::string best;
  size_t best_d = 1000;
  const std::string last = key.substr(key.rfind('.') + 1);  // "study.trails" -> "trails"
  for (const auto& k : known) {
    const size_t d = edit_distance(last, k);
    if (d < best_d) best_d = d, best = k;
  }
  fail("{}: unknown {} '{}'{}; known: {}", source, what, key,
       best_d <= 3 ? fmt::format(" — did you mean '{}'?", best) : "", fmt::join(known, ", "));
}

std::string node_text(const toml::node& n) {
  std::ostringstream os;
  n.visit([&](auto&& v) { os << v; });
  return os.str();
}

struct Reader {
  std::string source;  // "study.toml"
  const toml::table* root = nullptr;
  const std::map<std::string, std::string>* overridden = nullptr;  // key -> "--set key=value"

  // Where the key's value came from: the --set that gave it, or the file and its line.
  std::string where(const std::string& key) const {
    if (overridden)
      for (const auto& [k, origin] : *overridden)
        if (k == key || k.rfind(key + ".", 0) == 0) return fmt::format("{}: {}", origin, key);
    if (root)
      if (const toml::node* n = root->at_path(key).node(); n && n->source().begin.line > 0)
        return fmt::format("{}:{}: {}", source, n->source().begin.line, key);
    return fmt::format("{}: {}", source, key);
  }

  std::string text(const toml::node& n, const std::string& key, const std::vector<std::string>& choices = {}) const {
    auto v = n.value_exact<std::string>();
    if (!v) fail("{} = {} must be a string (in quotes)", where(key), node_text(n));
    if (!choices.empty() && std::find(choices.begin(), choices.end(), *v) == choices.end())
      fail("{} = \"{}\" is not allowed: choose one of {}", where(key), *v, fmt::join(choices, ", "));
    return *v;
  }
  int64_t integer(const toml::node& n, const std::string& key, int64_t lo, int64_t hi) const {
    auto v = n.value_exact<int64_t>();
    // A --set of digits beyond 64 bits arrives as text: it is a number out of range.
    if (!v && n.is_string() && validate::looks_integer(*n.value<std::string>()))
      fail("{}", validate::out_of_range_text(where(key), *n.value<std::string>(), lo, hi));
    if (!v) fail("{} = {} must be an integer", where(key), node_text(n));
    return validate::in_range(*v, lo, hi, where(key));
  }
  double real(const toml::node& n, const std::string& key, double lo, double hi) const {
    auto v = n.value<double>();
    if (!v || !n.is_number()) fail("{} = {} must be a number", where(key), node_text(n));
    return validate::in_range(*v, lo, hi, where(key));
  }
  // A value of hyperparameter h, checked against its type and limits.
  Value hyper_value(const toml::node& n, const std::string& key, const Hyperparameter& h) const {
    if (h.type == 'b') {  // a boolean key of a training config: true or false
      auto v = n.value_exact<bool>();
      if (!v) fail("{} = {} must be true or false", where(key), node_text(n));
      return Value{std::string(*v ? "true" : "false")};
    }
    if (h.type == 's') return text(n, key, h.choices);
    if (h.type == 'i') return integer(n, key, static_cast<int64_t>(h.min), static_cast<int64_t>(h.max));
    return real(n, key, h.min, h.max);
  }
};

const Hyperparameter& find_hyper(const StudyConfig& c, const std::string& name, const std::string& what) {
  const std::vector<Hyperparameter>& all = c.backend == Backend::train ? c.train_keys : hyperparameters(c.backend);
  std::vector<std::string> names;
  for (const auto& h : all) {
    if (h.name == name) return h;
    names.push_back(h.name);
  }
  if (c.backend == Backend::train) {
    // The nearest key of the training config, not the whole list of them.
    std::string best;
    size_t best_d = 1000;
    for (const auto& k : names)
      if (const size_t d = edit_distance(name, k); d < best_d) best_d = d, best = k;
    fail("{}: '{}' (in {}) is not a key of the training config {}{}; every key is listed by "
         "`aiscale train --config-reference`", c.config_path, name, what, c.train.config,
         best_d <= 3 ? fmt::format(" — did you mean '{}'?", best) : "");
  }
  unknown_key(c.config_path, name, names, fmt::format("{} hyperparameter (in {})", backend_name(c.backend), what));
}

ParamSpec read_param(const Reader& r, const StudyConfig& c, const std::string& name, const toml::node& node) {
  const std::string prefix = "params." + name;
  const Hyperparameter& h = find_hyper(c, name, "[params]");
  const toml::table* t = node.as_table();
  if (!t) fail("{} must be a table, e.g. [{}] type = \"uniform\", low = 0.1, high = 1", r.where(prefix), prefix);
  for (const auto& [k, v] : *t) {
    const std::string key(k.str());
    static const std::vector<std::string> known = {"type", "low", "high", "values", "points"};
    if (std::find(known.begin(), known.end(), key) == known.end())
      unknown_key(r.source, prefix + "." + key, known, "key");
  }
  ParamSpec p;
  p.name = name;
  const toml::node* type = t->get("type");
  if (!type) fail("{} has no type: add type = \"uniform\", \"log-uniform\", \"int\" or \"choice\"", r.where(prefix));
  const std::string kind = r.text(*type, prefix + ".type", {"uniform", "log-uniform", "int", "choice"});
  if (kind == "choice") {
    p.kind = ParamKind::choice;
    const toml::array* values = t->get("values") ? t->get("values")->as_array() : nullptr;
    if (!values) fail("{}: a choice needs values = [...]", r.where(prefix));
    if (values->empty()) fail("{}.values is empty: list at least one value", r.where(prefix));
    for (size_t i = 0; i < values->size(); ++i)
      p.values.push_back(r.hyper_value(*values->get(i), fmt::format("{}.values[{}]", prefix, i), h));
    if (t->get("low") || t->get("high"))
      fail("{}: a choice takes values, not low/high", r.where(prefix));
    return p;
  }
  if (h.type == 's' || h.type == 'b')
    fail("{}: '{}' is a {} hyperparameter ({}): use type = \"choice\"", r.where(prefix + ".type"),
         name, h.type == 'b' ? "boolean" : "text", h.type == 'b' ? "true, false" : fmt::format("{}", fmt::join(h.choices, ", ")));
  p.kind = kind == "uniform" ? ParamKind::uniform : kind == "log-uniform" ? ParamKind::log_uniform : ParamKind::integer;
  if (p.kind == ParamKind::integer && h.type != 'i')
    fail("{}: '{}' is a real hyperparameter: use type = \"uniform\" or \"log-uniform\"", r.where(prefix + ".type"), name);
  if (t->get("values")) fail("{}: values belong to type = \"choice\"; a {} range takes low and high", r.where(prefix), kind);
  for (const char* bound : {"low", "high"})
    if (!t->get(bound)) fail("{} has no {}: a {} range needs low and high", r.where(prefix), bound, kind);
  if (p.kind == ParamKind::integer) {
    p.low = static_cast<double>(r.integer(*t->get("low"), prefix + ".low", static_cast<int64_t>(h.min), static_cast<int64_t>(h.max)));
    p.high = static_cast<double>(r.integer(*t->get("high"), prefix + ".high", static_cast<int64_t>(h.min), static_cast<int64_t>(h.max)));
    if (p.low > p.high)
      fail("{}: the range [{}, {}] is empty (low > high): make low at most high", r.where(prefix), p.low, p.high);
  } else {
    p.low = r.real(*t->get("low"), prefix + ".low", h.min, h.max);
    p.high = r.real(*t->get("high"), prefix + ".high", h.min, h.max);
    if (!(p.low < p.high))
      fail("{}: the range [{}, {}] is empty (low >= high): make low smaller than high, or fix the "
           "value in [fixed]", r.where(prefix), p.low, p.high);
    if (p.kind == ParamKind::log_uniform && p.low <= 0)
      fail("{}: a log-uniform range needs low > 0 (got {})", r.where(prefix + ".low"), p.low);
  }
  if (const toml::node* pts = t->get("points")) p.points = r.integer(*pts, prefix + ".points", 1, 10000);
  return p;
}

// "a.b.c=value" into the TOML document (the value parsed as TOML, else taken as text).
void apply_override(toml::table& root, const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    fail("--set '{}': write section.key=value, e.g. --set study.trials=50", text);
  const std::string path = text.substr(0, eq), raw = text.substr(eq + 1);
  // Dots part the path, except inside quotes: fixed."train.steps" is the key "train.steps"
  // of [fixed], as TOML reads it.
  std::vector<std::string> parts(1);
  bool quoted = false;
  for (const char ch : path) {
    if (ch == '"') quoted = !quoted;
    else if (ch == '.' && !quoted) parts.emplace_back();
    else parts.back() += ch;
  }
  if (quoted) fail("--set '{}': a quote in the key is not closed", text);
  if (parts.size() < 2) fail("--set '{}': name the section too, e.g. study.{}", text, path);
  toml::table* t = &root;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    if (!t->contains(parts[i])) t->insert(parts[i], toml::table{});
    t = (*t)[parts[i]].as_table();
    if (!t) fail("--set '{}': '{}' is not a table", text, parts[i]);
  }
  try {
    const toml::table parsed = toml::parse("v = " + raw);
    t->insert_or_assign(parts.back(), *parsed.get("v"));
  } catch (const toml::parse_error&) {
    t->insert_or_assign(parts.back(), raw);  // a bare word: text
  }
}

// The leaves of a [fixed] or [params] table of a train study, by their dotted key: TOML
// reads `[params.train.lr]` and `[params."train.lr"]` alike once flattened. A [params]
// leaf is a table with a type (its distribution); a [fixed] leaf is any value.
void flatten(const toml::table& t, const std::string& prefix, bool params,
             std::vector<std::pair<std::string, const toml::node*>>& out) {
  static const std::vector<std::string> spec_keys = {"type", "low", "high", "values", "points"};
  for (const auto& [k, v] : t) {
    const std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    const toml::table* sub = v.as_table();
    bool leaf = !sub || sub->empty();
    if (sub && params)
      for (const auto& s : spec_keys) leaf = leaf || sub->contains(s);
    if (leaf) out.emplace_back(key, &v);
    else flatten(*sub, key, params, out);
  }
}

void apply_train(StudyConfig& c, const Reader& r, const toml::table& root) {
  const toml::table* t = root["train"].as_table();
  if (!t || !t->get("config"))
    fail("{}: study.backend = \"train\" needs [train] config = \"...\" (the training config every "
         "trial starts from, relative to this file)", c.config_path);
  if (root["data"].as_table())
    fail("{}: [data] belongs to mlp and xgboost studies; a train study's data is the [data] of its "
         "training config ({})", c.config_path, r.text(*t->get("config"), "train.config"));
  for (const char* key : {"folds", "task", "threads", "threads_per_task"})
    if (root["study"][key])
      fail("{}: study.{} belongs to mlp and xgboost studies; remove it (a train study's trials are "
           "placed by [train])", r.where(std::string("study.") + key), key);
  const fs::path base = fs::path(c.config_path).parent_path();
  c.train.config = fs::absolute(base / r.text(*t->get("config"), "train.config")).lexically_normal().string();
  validate::regular_file(c.train.config, fmt::format("{}: train.config", c.config_path));
  if (const toml::node* n = t->get("set")) {
    const toml::array* a = n->as_array();
    if (!a) fail("{} must be a list of \"section.key=value\" texts", r.where("train.set"));
    for (size_t i = 0; i < a->size(); ++i) {
      const std::string o = r.text(*a->get(i), fmt::format("train.set[{}]", i));
      if (o.find('=') == std::string::npos || o.find('=') == 0)
        fail("{} = \"{}\": write section.key=value, e.g. \"train.steps=200\"", r.where("train.set"), o);
      c.train.set.push_back(o);
    }
  }
  auto get = [&](const char* key) { return t->get(key); };
  if (auto* n = get("launcher")) c.train.launcher = r.text(*n, "train.launcher", {"auto", "local", "srun"});
  if (auto* n = get("ranks_per_trial")) c.train.ranks_per_trial = r.integer(*n, "train.ranks_per_trial", 1, 1 << 20);
  if (auto* n = get("gpus_per_trial")) c.train.gpus_per_trial = r.integer(*n, "train.gpus_per_trial", 0, 1 << 16);
  if (auto* n = get("gpus")) c.train.gpus = r.integer(*n, "train.gpus", -1, 1 << 16);
  if (auto* n = get("parallel_trials")) c.train.parallel_trials = r.integer(*n, "train.parallel_trials", 0, 1 << 20);
  if (auto* n = get("threads_per_rank"))
    c.train.threads_per_rank = r.integer(*n, "train.threads_per_rank", 0, validate::kMaxThreads);
  if (auto* n = get("stop_grace_s")) c.train.stop_grace_s = r.real(*n, "train.stop_grace_s", 0, 86400);
  if (auto* n = get("max_failures")) c.train.max_failures = r.integer(*n, "train.max_failures", -1, INT64_MAX);
  if (auto* n = get("prestart")) {
    auto v = n->value_exact<bool>();
    if (!v) fail("{} = {} must be true or false", r.where("train.prestart"), node_text(*n));
    c.train.prestart = *v;
  }
  if (c.train.gpus_per_trial > 0 && c.train.gpus_per_trial != c.train.ranks_per_trial)
    fail("{}: train.gpus_per_trial = {} with train.ranks_per_trial = {}: a trial's ranks take one GPU "
         "each; make them equal", c.config_path, c.train.gpus_per_trial, c.train.ranks_per_trial);
}

void apply(StudyConfig& c, const toml::table& root, const std::map<std::string, std::string>& overridden,
           const TrainKeyCatalogue* catalogue) {
  Reader r{c.config_path, &root, &overridden};
  static const std::vector<std::string> sections = {"study", "data", "halving", "fixed", "params", "train"};
  for (const auto& [k, v] : root) {
    const std::string s(k.str());
    if (std::find(sections.begin(), sections.end(), s) == sections.end())
      unknown_key(c.config_path, s, sections, "section");
    if (!v.as_table()) fail("{}: '{}' must be a section ([{}])", c.config_path, s, s);
  }
  for (const auto& [section, keys] : section_keys())
    if (const toml::table* t = root[section].as_table())
      for (const auto& [k, v] : *t)
        if (std::find(keys.begin(), keys.end(), std::string(k.str())) == keys.end())
          unknown_key(c.config_path, section + "." + std::string(k.str()), keys, "key");

  auto get = [&](const char* section, const char* key) -> const toml::node* {
    const toml::table* t = root[section].as_table();
    return t ? t->get(key) : nullptr;
  };
  const std::string sk = "study.";
  if (auto* n = get("study", "name")) c.name = r.text(*n, "study.name");
  if (auto* n = get("study", "backend")) {
    const std::string b = r.text(*n, "study.backend", {"mlp", "xgboost", "train"});
    c.backend = b == "mlp" ? Backend::mlp : b == "xgboost" ? Backend::xgboost : Backend::train;
  }
  if (c.backend == Backend::xgboost && !xgboost_compiled())
    fail("{}: study.backend = \"xgboost\", but this aiscale was built without XGBoost: install "
         "Debian's libxgboost-dev (scripts/setup.sh does) and rebuild, or use backend = \"mlp\"", c.config_path);
  if (c.backend != Backend::train && root["train"].as_table())
    fail("{}: [train] belongs to studies of training runs: add study.backend = \"train\", or remove [train]",
         c.config_path);
  if (c.backend == Backend::train) {
    apply_train(c, r, root);
    if (!catalogue || !catalogue->keys)
      fail("internal: a train study needs the training config's keys");
    c.train_keys = catalogue->keys(c.train.config, c.train.set);
    c.metric = Metric::val_loss;
    c.folds = 0;
  }
  if (auto* n = get("study", "task")) {
    c.task = r.text(*n, "study.task", {"regression", "classification"}) == "regression"
                 ? TaskKind::regression : TaskKind::classification;
    c.task_given = true;
  }
  if (auto* n = get("study", "metric")) {
    if (c.backend == Backend::train) {
      r.text(*n, "study.metric", {"val_loss"});
    } else {
      const std::string m = r.text(*n, "study.metric", {"rmse", "mae", "r2", "accuracy", "log-loss"});
      c.metric = m == "rmse" ? Metric::rmse : m == "mae" ? Metric::mae : m == "r2" ? Metric::r2
               : m == "accuracy" ? Metric::accuracy : Metric::log_loss;
    }
    c.metric_given = true;
  }
  if (auto* n = get("study", "search")) c.search = r.text(*n, "study.search", {"random", "grid"});
  if (auto* n = get("study", "trials")) c.trials = r.integer(*n, "study.trials", 1, 1000000);
  if (auto* n = get("study", "folds")) c.folds = r.integer(*n, "study.folds", 2, 1000);
  if (auto* n = get("study", "seed")) c.seed = static_cast<uint64_t>(r.integer(*n, "study.seed", 0, INT64_MAX));
  if (auto* n = get("study", "threads")) c.threads = validate::thread_count(r.integer(*n, "study.threads", 0, INT64_MAX), r.where("study.threads"));
  if (auto* n = get("study", "threads_per_task"))
    c.threads_per_task = r.integer(*n, "study.threads_per_task", 0, validate::kMaxThreads);
  if (auto* n = get("study", "dir")) c.dir = r.text(*n, "study.dir");

  if (auto* n = get("data", "source")) c.data.source = r.text(*n, "data.source", {"csv", "idx", "synthetic"});
  if (auto* n = get("data", "path")) c.data.path = r.text(*n, "data.path");
  if (auto* n = get("data", "target")) c.data.target = r.text(*n, "data.target");
  if (auto* n = get("data", "images")) c.data.images = r.text(*n, "data.images");
  if (auto* n = get("data", "labels")) c.data.labels = r.text(*n, "data.labels");
  if (auto* n = get("data", "rows")) c.data.rows = r.integer(*n, "data.rows", 0, INT64_MAX);
  if (auto* n = get("data", "image_pool")) c.data.image_pool = r.integer(*n, "data.image_pool", 1, 28);
  if (auto* n = get("data", "synthetic_rows")) c.data.synthetic_rows = r.integer(*n, "data.synthetic_rows", 1, 100000000);
  if (auto* n = get("data", "noise")) c.data.noise = r.real(*n, "data.noise", 0, 1e6);

  // [fixed] first: a train study's budget may be fixed there (train.steps).
  std::vector<std::pair<std::string, const toml::node*>> fixed, params;
  if (const toml::table* t = root["fixed"].as_table()) {
    if (c.backend == Backend::train) flatten(*t, "", false, fixed);
    else for (const auto& [k, v] : *t) fixed.emplace_back(std::string(k.str()), &v);
  }
  if (const toml::table* t = root["params"].as_table()) {
    if (c.backend == Backend::train) flatten(*t, "", true, params);
    else for (const auto& [k, v] : *t) params.emplace_back(std::string(k.str()), &v);
  }
  for (const auto* list : {&fixed, &params})
    for (size_t i = 0; i < list->size(); ++i)
      for (size_t j = 0; j < i; ++j)
        if ((*list)[i].first == (*list)[j].first)
          fail("{}: '{}' is given twice in [{}] (once as a quoted key, once as dotted tables): keep one",
               c.config_path, (*list)[i].first, list == &fixed ? "fixed" : "params");
  for (const auto& [name, v] : fixed)
    c.fixed[name] = r.hyper_value(*v, "fixed." + name, find_hyper(c, name, "[fixed]"));

  if (root["halving"].as_table()) {
    c.halving.enabled = true;
    if (auto* n = get("halving", "eta")) c.halving.eta = r.integer(*n, "halving.eta", 2, 100);
    const Hyperparameter& budget = c.backend == Backend::train ? find_hyper(c, "train.steps", "[halving]")
                                                               : budget_hyperparameter(c.backend);
    const int64_t most = static_cast<int64_t>(budget.max);
    for (auto [key, field] : {std::pair{"min_budget", &c.halving.min_budget}, std::pair{"max_budget", &c.halving.max_budget}}) {
      const toml::node* n = get("halving", key);
      if (!n && c.backend == Backend::train && std::string(key) == "max_budget") {
        // The trials' own length: train.steps of [fixed], else of the training config.
        const auto f = c.fixed.find("train.steps");
        *field = f != c.fixed.end() ? std::get<int64_t>(f->second) : std::get<int64_t>(budget.default_value);
        continue;
      }
      if (!n)
        fail("{}: [halving] needs {} ({} of the {} backend{})", c.config_path, key, budget.name, backend_name(c.backend),
             c.backend == Backend::train ? ": the training step of the first rung" : "");
      *field = r.integer(*n, std::string("halving.") + key, 1, most);
    }
    if (c.backend == Backend::train) {
      const auto f = c.fixed.find("train.steps");
      const int64_t steps = f != c.fixed.end() ? std::get<int64_t>(f->second) : std::get<int64_t>(budget.default_value);
      if (c.halving.max_budget != steps)
        fail("{}: halving.max_budget = {}, but the trials train {} steps (train.steps of {}): the last "
             "rung is the end of training; leave max_budget out or set train.steps in [fixed]",
             c.config_path, c.halving.max_budget, steps, f != c.fixed.end() ? "[fixed]" : c.train.config);
      if (c.halving.min_budget >= steps)
        fail("{}: halving.min_budget = {} is not below the {} steps a trial trains: no trial could be "
             "stopped early; make min_budget smaller (e.g. {}) or train longer",
             c.config_path, c.halving.min_budget, steps, std::max<int64_t>(1, steps / 9));
    }
    if (c.halving.min_budget > c.halving.max_budget)
      fail("{}: halving.min_budget = {} is more than halving.max_budget = {}: the budget range is empty",
           c.config_path, c.halving.min_budget, c.halving.max_budget);
  }
  for (const auto& [name, v] : params) {
    ParamSpec p = read_param(r, c, name, *v);
    if (c.fixed.count(p.name))
      fail("{}: '{}' is both in [fixed] and in [params]: keep one", c.config_path, p.name);
    if (c.halving.enabled && budget_hyperparameter(c.backend).name == p.name)
      fail("{}: params.{} is the budget that successive halving sets: remove it from [params] "
           "or remove [halving]", c.config_path, p.name);
    c.params.push_back(std::move(p));
  }
  // Data keys that belong together.
  if (c.backend != Backend::train && c.data.source == "csv") {
    if (c.data.path.empty()) fail("{}: data.source = \"csv\" needs data.path (the CSV file)", c.config_path);
    if (c.data.target.empty()) fail("{}: data.source = \"csv\" needs data.target (the target column's name)", c.config_path);
  }
  if (c.search == "grid") {
    for (const auto& p : c.params)
      if ((p.kind == ParamKind::uniform || p.kind == ParamKind::log_uniform) && p.points < 1)
        fail("{}: grid search cuts params.{} into points: add points = N (e.g. 4)", c.config_path, p.name);
  }
  if (c.dir.empty()) c.dir = "tune/" + c.name;
}

}  // namespace

StudyConfig load_study_config(const std::string& path, const std::vector<std::string>& overrides,
                              const TrainKeyCatalogue* train_keys) {
  validate::regular_file(path, "tune config");
  toml::table root;
  const std::string text = read_file(path);
  try {
    root = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    if (auto m = toml_integer_out_of_range(e, text, path)) fail("{}", *m);
    fail("{}: not valid TOML at line {}, column {}: {}", path, e.source().begin.line,
         e.source().begin.column, e.description());
  }
  std::map<std::string, std::string> overridden;
  for (const auto& o : overrides) {
    apply_override(root, o);
    overridden[o.substr(0, o.find('='))] = "--set " + o;
  }
  StudyConfig c;
  c.config_path = path;
  apply(c, root, overridden, train_keys);
  return c;
}

void check_against_data(StudyConfig& c, const Dataset& d) {
  if (!c.task_given) c.task = d.kind;
  if (c.task != d.kind)
    fail("{}: study.task = \"{}\", but {} is a {} data set: {}", c.config_path, task_kind_name(c.task),
         d.source, task_kind_name(d.kind),
         d.kind == TaskKind::classification ? "IDX labels are classes; use task = \"classification\""
                                            : "the synthetic data is a regression; use task = \"regression\"");
  if (!c.metric_given) c.metric = c.task == TaskKind::regression ? Metric::rmse : Metric::accuracy;
  const bool class_metric = c.metric == Metric::accuracy || c.metric == Metric::log_loss;
  if (class_metric != (c.task == TaskKind::classification))
    fail("{}: study.metric = \"{}\" does not fit a {} task: use {}", c.config_path, metric_name(c.metric),
         task_kind_name(c.task), c.task == TaskKind::regression ? "rmse, mae or r2" : "accuracy or log-loss");
  if (c.folds > d.rows)
    fail("{}: study.folds = {} is more than the {} rows of {}: use at most {} folds or more rows "
         "(data.rows)", c.config_path, c.folds, d.rows, d.source, d.rows);
}

const char* metric_name(Metric m) {
  switch (m) {
    case Metric::rmse: return "rmse";
    case Metric::mae: return "mae";
    case Metric::r2: return "r2";
    case Metric::accuracy: return "accuracy";
    case Metric::log_loss: return "log-loss";
    case Metric::val_loss: return "val_loss";
  }
  return "?";
}

bool higher_is_better(Metric m) { return m == Metric::r2 || m == Metric::accuracy; }

}  // namespace aiscale::tune
