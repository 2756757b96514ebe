#include "aiscale/report/predictions.h"

#include <cmath>
#include <filesystem>
#include <optional>

#include <fmt/format.h>

#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/core/log.h"
#include "aiscale/plan/accelerator.h"
#include "aiscale/plan/calibration.h"
#include "aiscale/plan/catalog.h"
#include "aiscale/plan/planner.h"
#include "aiscale/plan/workload.h"
#include "aiscale/sweep/study_dir.h"
#include "aiscale/train/config.h"

namespace aiscale::report {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// What a measured point ran: the model and how it was laid out, from the point's run
// directory (the resolved training config, or the benchmark's record).
struct RunShape {
  std::string preset;
  plan::ModelOverrides model;
  std::string precision;
  int64_t batch = 0, seq = 0, grad_accum = 1;
  int zero = 0, tp = 1, pp = 1;
  bool recompute_layers = false;
};

std::optional<RunShape> shape_of(const fs::path& run) {
  RunShape s;
  if (fs::exists(run / "config.toml")) {
    const train::TrainConfig c = train::load_train_config((run / "config.toml").string(), {});
    s.preset = c.model_preset;
    s.model.n_layer = c.model.n_layer;
    s.model.n_head = c.model.n_head;
    s.model.n_embd = c.model.n_embd;
    s.model.vocab_size = c.model.vocab_size;
    s.model.seq_len = c.seq_len;
    if (c.model.llama()) {
      s.model.n_kv_head = c.model.n_kv_head;
      s.model.ffn_hidden = c.model.ffn_hidden;
      s.model.tie_embeddings = c.model.tie_embeddings;
    }
    s.precision = c.precision;
    s.batch = c.batch_size;
    s.seq = c.seq_len;
    s.grad_accum = c.grad_accum;
    s.zero = static_cast<int>(c.zero_stage);
    s.tp = static_cast<int>(c.tensor_parallel);
    s.pp = static_cast<int>(c.pipeline_parallel);
    s.recompute_layers = c.recompute_layers;
    return s;
  }
  if (fs::exists(run / "bench.jsonl")) {
    const json j = json::parse(read_file((run / "bench.jsonl").string()), nullptr, false);
    if (!j.is_object() || !j.contains("model")) return std::nullopt;
    s.preset = j.value("model", "");
    if (j.contains("n_layer")) s.model.n_layer = j["n_layer"].get<int64_t>();
    if (j.contains("n_head")) s.model.n_head = j["n_head"].get<int64_t>();
    if (j.contains("n_embd")) s.model.n_embd = j["n_embd"].get<int64_t>();
    if (j.contains("vocab_size")) s.model.vocab_size = j["vocab_size"].get<int64_t>();
    s.seq = j.value("seq", int64_t{0});
    if (s.seq > 0) s.model.seq_len = s.seq;
    s.precision = j.value("precision", "fp32");
    s.batch = j.value("batch", int64_t{0});
    s.grad_accum = j.value("grad_accum", int64_t{1});
    s.zero = j.value("zero_stage", 0);
    return s;
  }
  return std::nullopt;
}

json predict_point(const RunShape& s, int n, const plan::Catalog& cat, const std::vector<plan::Target>& targets,
                   const plan::Calibration& cal, const std::string& target) {
  plan::PlanRequest r;
  r.workload = plan::make_workload(s.preset, s.model);
  r.tokens = 1e9;
  r.precision = plan::parse_precision(s.precision);
  r.gpus = n;
  const int dp = std::max(1, n / std::max(1, s.tp * s.pp));
  r.global_batch = s.batch * s.grad_accum * dp;
  r.pins.micro_batch = static_cast<int>(s.batch);
  r.pins.zero = s.zero;
  r.pins.tp = s.tp;
  r.pins.pp = s.pp;
  r.pins.recompute = s.recompute_layers ? plan::Recompute::full : plan::Recompute::none;
  const plan::PlanResult res = plan::plan(r, targets, cat, cal, plan::Assumptions{});
  if (res.ranked.empty())
    return {{"target", target},
            {"reason", res.rejected.empty() ? std::string("no layout fits") : res.rejected.front().reason}};
  const plan::Candidate& c = res.ranked.front();
  const double tokens_per_step = static_cast<double>(r.global_batch) * static_cast<double>(s.seq);
  return {{"target", target},
          {"step_time_s", c.step.step_s},
          {"throughput_per_device", tokens_per_step / c.step.step_s / n},
          {"utilisation_source", c.figures.utilisation.measured ? "measured" : "assumed"}};
}

}  // namespace

void add_predictions(std::vector<json>& studies, const PredictOptions& o) {
  const plan::Catalog cat = plan::load_catalog(plan::default_catalog_dir(), o.systems);
  const std::vector<plan::Target> targets = cat.resolve(o.target);
  if (targets.size() != 1)
    fail("--predict {}: name one partition (SYSTEM/PARTITION); it names {}", o.target,
         targets.empty() ? std::string("none") : fmt::format("{} partitions", targets.size()));
  const plan::Calibration cal = plan::load_calibration(o.calibration, cat);
  const std::string label = targets.front().label();
  int predicted = 0;
  for (json& d : studies) {
    if (!d.contains("series") || d["series"].empty()) continue;
    const std::string dir = d["study"].value("dir", "");
    if (dir.empty() || !fs::exists(fs::path(dir) / "study.json")) continue;
    const json index = sweep::read_study_index(dir);
    d["study"]["predicted_on"] = label;
    ++predicted;
    for (json& s : d["series"]) {
      const std::string precision = s.value("precision", "");
      for (json& pt : s["points"]) {
        const int n = pt.value("n", 0);
        std::optional<RunShape> shape;
        for (const json& p : index["points"]) {
          if (p.value("ranks", 0) != n || (!precision.empty() && p.value("precision", "") != precision)) continue;
          shape = shape_of(fs::path(dir) / p.value("dir", "") / "run");
          if (shape) break;
        }
        if (!shape) {
          pt["predicted"] = {{"target", label}, {"reason", "the point's run directory holds no config.toml or bench record"}};
          continue;
        }
        json pred;
        try {
          pred = predict_point(*shape, n, cat, targets, cal, label);
        } catch (const Error& e) {
          pred = {{"target", label}, {"reason", e.what()}};
        }
        const json& dev = pt["throughput_per_device"];
        if (pred.contains("throughput_per_device") && dev.is_object() && dev["median"].is_number())
          pred["ratio"] = dev["median"].get<double>() / pred["throughput_per_device"].get<double>();
        pt["predicted"] = std::move(pred);
      }
    }
  }
  if (predicted == 0)
    log::warn("--predict {}: no input is a study directory (study.json with its points' run directories), "
              "so nothing was predicted; give the study directory rather than its analysis file", label);
}

}  // namespace aiscale::report
