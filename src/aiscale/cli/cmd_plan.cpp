// `aiscale plan`: match an AI workload to HPC systems and layouts.
//   aiscale plan --model gpt2-1558m --tokens 10e9 [--system leonardo] [--gpus N] [--json]
//   aiscale plan systems                          the catalogue
//   aiscale plan scaling --system leonardo --model gpt2-124m   predicted scaling curve
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "aiscale/cli/commands.h"
#include "aiscale/cli/help_text.h"
#include "aiscale/cli/options.h"
#include "aiscale/cli/plan_emit.h"
#include "aiscale/cli/run_options.h"
#include "aiscale/core/error.h"
#include "aiscale/core/log.h"
#include "aiscale/core/validate.h"
#include "aiscale/plan/machine_profile.h"
#include "aiscale/plan/planner.h"
#include "aiscale/plan/report.h"
#include "aiscale/plan/units.h"

namespace aiscale::cli {
namespace {
using namespace aiscale::plan;

struct PlanOptions {
  // catalogue and calibration
  std::string catalog_dir;
  std::vector<std::string> system_files;
  std::vector<std::string> calibration;
  std::string machine_profile;
  // workload
  std::string model;
  RunOptions run;  // model shape, micro-batch, ZeRO stage, gradient transport (cli/run_options.h)
  std::optional<int> image_size;
  // The Llama family (the train config's model.family, model.n_kv_head, model.ffn_hidden,
  // model.tie_embeddings)
  std::string family;
  std::optional<int64_t> n_kv_head, ffn_hidden;
  std::string tie_embeddings;
  double tokens = 0;
  double images = static_cast<double>(kImageNetTrainImages);
  double epochs = 90;
  std::optional<double> samples_per_epoch, validation_samples, validation_fraction, bytes_per_sample,
      decode_rate;
  std::string precision;  // "": bf16, or fp32 when every partition planned is a CPU partition
  std::string attention;  // "": flash on GPU partitions, materialized on CPU partitions
  // where and how
  std::vector<std::string> systems;
  long gpus = 0;
  long global_batch = 0;
  double min_efficiency = 0.7;
  std::string min_duration = "1h";
  std::string deadline;
  std::string applicant = "experienced";
  bool include_unsupported = false;
  bool explain = false;
  long max_gpus = 0;
  long max_nodes = 64;
  std::optional<int> tp, pp;
  std::string recompute;
  std::string rank = "time";
  std::vector<std::string> prices;  // --price NAME=AMOUNT
  std::string emit_dir, emit_data = "data/fortunes/fortunes_train_*.bin";
  int emit_row = 1;
  std::optional<double> utilisation;
  bool json = false;
};

void add_catalog_options(CLI::App* app, PlanOptions& o) {
  const HelpSection help("plan", "catalog options");
  help.option(app, "--catalog", o.catalog_dir);
  help.option(app, "--systems", o.system_files)->allow_extra_args(false);
  help.flag(app, "--json", o.json);
}

void add_plan_choice_options(CLI::App* app, PlanOptions& o) {
  const HelpSection help("plan", "plan choice options");
  help.flag(app, "--include-unsupported", o.include_unsupported);
}

void add_workload_options(CLI::App* app, PlanOptions& o) {
  const HelpSection help("plan", "workload options");
  help.option(app, "--model", o.model);
  const std::string model_group = "Model (custom size, or override a preset; the train config's keys)";
  add_run_options(app, o.run,
                  {"model.n_layer", "model.n_head", "model.n_embd", "train.seq_len", "model.vocab_size"},
                  model_group);
  help.option(app, "--family", o.family)->group(model_group);
  help.option(app, "--n-kv-head", o.n_kv_head)->check(integer_in(1, 1024))->group(model_group);
  help.option(app, "--ffn-hidden", o.ffn_hidden)->check(integer_in(1, int64_t{1} << 20))
      ->group(model_group);
  help.option(app, "--tie-embeddings", o.tie_embeddings)->group(model_group);
  help.option(app, "--image-size", o.image_size)->check(integer_in(8, 1 << 16));
  help.option(app, "--tokens", o.tokens)->check(number_in(0, 1e18));
  help.option(app, "--images", o.images)->check(number_in(1, 1e15));
  help.option(app, "--epochs", o.epochs)->check(number_in(0.001, 1e6));
  help.option(app, "--samples-per-epoch", o.samples_per_epoch)->check(number_in(1, 1e15));
  help.option(app, "--validation-samples", o.validation_samples)->check(number_in(0, 1e15));
  help.option(app, "--validation-fraction", o.validation_fraction)->check(number_in(0, 1));
  help.option(app, "--bytes-per-sample", o.bytes_per_sample)->check(number_in(0, 1e12));
  help.option(app, "--decode-rate", o.decode_rate)->check(number_in(0.001, 1e9));
  help.option(app, "--precision", o.precision);
  help.option(app, "--attention", o.attention);
}

void add_layout_options(CLI::App* app, PlanOptions& o) {
  const HelpSection help("plan", "layout options");
  help.option(app, "--system", o.systems)->allow_extra_args(false);
  help.option(app, "--global-batch", o.global_batch)->check(integer_in(0, int64_t{1} << 30));
  help.option(app, "--tp", o.tp)->check(integer_in(1, 1 << 16));
  help.option(app, "--pp", o.pp)->check(integer_in(1, 1 << 16));
  add_run_options(app, o.run,
                  {"train.batch_size", "parallel.zero_stage", "parallel.grad_transport",
                   "parallel.offload_optimizer"},
                  "Fixed choices (the train config's keys; default: the planner chooses)");
  help.option(app, "--recompute", o.recompute);
  help.option(app, "--calibration", o.calibration)->allow_extra_args(false);
  help.option(app, "--machine-profile", o.machine_profile);
  help.option(app, "--utilisation", o.utilisation)->check(number_in(0.000001, 1));
}

// The calibration results and, with --machine-profile, the profile; a profile measured on
// another device than a planned partition's is warned about by name and not used for it.
Calibration open_calibration(const PlanOptions& o, const Catalog& cat, const std::vector<Target>& targets) {
  Calibration cal = load_calibration(o.calibration, cat);
  if (!o.machine_profile.empty())
    for (const auto& w : attach_machine_profile(o.machine_profile, cat, targets, cal))
      log::warn("{}", w);
  return cal;
}

Catalog open_catalog(const PlanOptions& o) {
  return load_catalog(o.catalog_dir.empty() ? default_catalog_dir() : o.catalog_dir, o.system_files);
}

// bf16 unless every partition to plan is a CPU partition (aiscale's CPU backend trains in
// fp32); an explicit --precision always wins.
std::string default_precision(const PlanOptions& o, const std::vector<Target>& targets) {
  if (!o.precision.empty()) return o.precision;
  const bool all_cpu = !targets.empty() &&
                       std::all_of(targets.begin(), targets.end(),
                                   [](const Target& t) { return t.partition->is_cpu(); });
  return all_cpu ? "fp32" : "bf16";
}

PlanRequest make_request(const PlanOptions& o, bool need_tokens, const std::vector<Target>& targets) {
  if (o.model.empty())
    fail("give the workload with --model (e.g. --model gpt2-1558m); `aiscale plan --help` lists "
         "the options");
  PlanRequest r;
  ModelOverrides mo;
  mo.n_layer = o.run.integer("model.n_layer");
  mo.n_head = o.run.integer("model.n_head");
  mo.n_embd = o.run.integer("model.n_embd");
  mo.seq_len = o.run.integer("train.seq_len");
  mo.vocab_size = o.run.integer("model.vocab_size");
  mo.image_size = o.image_size;
  if (!o.family.empty()) {
    if (o.family != "gpt2" && o.family != "llama")
      fail("--family {} is unknown: choose gpt2 or llama", o.family);
    mo.family = nn::parse_gpt_family(o.family);
  }
  mo.n_kv_head = o.n_kv_head;
  mo.ffn_hidden = o.ffn_hidden;
  if (!o.tie_embeddings.empty()) {
    if (o.tie_embeddings != "true" && o.tie_embeddings != "false")
      fail("--tie-embeddings {} is invalid: use true (the LM head is the token embedding) or "
           "false (a head of its own)", o.tie_embeddings);
    mo.tie_embeddings = o.tie_embeddings == "true";
  }
  r.workload = make_workload(o.model, mo);
  r.tokens = o.tokens;
  if (r.workload.is_transformer() && !(r.tokens > 0)) {
    if (need_tokens)
      fail("give the training tokens with --tokens (e.g. --tokens 10e9) for {}", o.model);
    r.tokens = 1e9;  // the step columns do not depend on it; the epoch column is one pass over it
  }
  r.images = o.images;
  r.epochs = o.epochs;
  r.samples_per_epoch = o.samples_per_epoch;
  r.validation_samples = o.validation_samples;
  r.validation_fraction = o.validation_fraction;
  r.bytes_per_sample = o.bytes_per_sample;
  r.decode_per_core = o.decode_rate;
  r.precision = parse_precision(default_precision(o, targets));
  if (!o.attention.empty()) {
    r.attention = parse_attention(o.attention);
    if (!r.workload.is_transformer())
      fail("--attention applies to transformer models only, not {}", r.workload.name);
  }
  r.gpus = o.gpus;
  r.global_batch = o.global_batch;
  r.min_efficiency = o.min_efficiency;
  r.max_gpus = o.max_gpus;
  r.pins.tp = o.tp;
  r.pins.pp = o.pp;
  if (const auto zero = o.run.integer("parallel.zero_stage")) r.pins.zero = static_cast<int>(*zero);
  if (const auto mb = o.run.integer("train.batch_size")) r.pins.micro_batch = static_cast<int>(*mb);
  if (!o.recompute.empty()) r.pins.recompute = parse_recompute(o.recompute);
  r.pins.offload = o.run.text("parallel.offload_optimizer").value_or("false") == "true";
  if (const auto t = o.run.text("parallel.grad_transport"); t && *t != "auto")
    r.grad_transport = parse_grad_transport(*t);
  r.objective = parse_objective(o.rank);
  for (const auto& text : o.prices) {
    const size_t eq = text.find('=');
    if (eq == std::string::npos || eq == 0)
      fail("--price '{}': write SYSTEM=AMOUNT or SYSTEM/PARTITION=AMOUNT, the cost of one GPU-hour there "
           "(e.g. --price leonardo/booster=1.2)", text);
    const std::string name = text.substr(0, eq);
    bool known = false;
    std::vector<std::string> names;
    for (const auto& t : targets) {
      known = known || t.label() == name || t.system->id == name;
      names.push_back(t.label());
    }
    if (!known)
      fail("--price '{}': '{}' is none of the partitions planned ({}); name a system or system/partition "
           "among them (--system picks which are planned)", text, name, fmt::join(names, ", "));
    r.prices[name] = validate::parse_real(text.substr(eq + 1), 0.0, 1e12, fmt::format("--price {}", name));
  }
  if (r.objective == Objective::cost && r.prices.empty())
    fail("--rank cost needs what a GPU-hour costs: give --price SYSTEM=AMOUNT (or SYSTEM/PARTITION=AMOUNT) "
         "for the systems to compare");
  if (!o.deadline.empty()) r.deadline_s = parse_duration(o.deadline, "--deadline");
  r.min_duration_s = parse_duration(o.min_duration, "--min-duration");
  r.applicant = parse_applicant(o.applicant);
  r.include_unsupported = o.include_unsupported;
  return r;
}

Assumptions make_assumptions(const PlanOptions& o) {
  Assumptions a;
  if (o.utilisation) {
    if (!(*o.utilisation > 0) || *o.utilisation > 1)
      fail("--utilisation must lie in (0, 1] (got {})", *o.utilisation);
    a.transformer_utilisation = a.cnn_utilisation = a.cnn_utilisation_fp32 = *o.utilisation;
  }
  return a;
}

std::vector<Target> targets_of(const Catalog& cat, const std::vector<std::string>& names) {
  if (names.empty()) return cat.gpu_targets();
  std::vector<Target> out;
  for (const auto& n : names)
    for (const auto& t : cat.resolve(n)) out.push_back(t);
  return out;
}

void run_systems(const PlanOptions& o) {
  const Catalog cat = open_catalog(o);
  if (o.json) fmt::print("{}\n", systems_json(cat).dump(2));
  else fmt::print("{}", systems_text(cat));
}

void run_plan(const PlanOptions& o) {
  const Catalog cat = open_catalog(o);
  const std::vector<Target> targets = targets_of(cat, o.systems);
  const PlanRequest r = make_request(o, true, targets);
  const Assumptions a = make_assumptions(o);
  const Calibration cal = open_calibration(o, cat, targets);
  const PlanResult res = aiscale::plan::plan(r, targets, cat, cal, a);
  if (o.json) fmt::print("{}\n", plan_json(r, res, cal, a).dump(2));
  else fmt::print("{}", plan_text(r, res, cal, a, o.explain));
  if (!o.emit_dir.empty()) {
    const std::string written = emit_plan_row(r, res, o.emit_row, cat, {o.emit_dir, o.emit_data, ""});
    if (o.json) fmt::print(stderr, "{}", written);
    else fmt::print("{}", written);
  }
}

void run_scaling(const PlanOptions& o) {
  const Catalog cat = open_catalog(o);
  if (o.systems.size() != 1)
    fail("give one system for the scaling curve with --system (e.g. --system leonardo)");
  const auto targets = cat.resolve(o.systems.front());
  const PlanRequest r = make_request(o, false, targets);
  const Assumptions a = make_assumptions(o);
  if (targets.size() != 1) {
    std::string names;
    for (const auto& t : targets) names += (names.empty() ? "" : ", ") + t.label();
    fail("system '{}' has several GPU partitions ({}): name one as system/partition",
         o.systems.front(), names);
  }
  const Calibration cal = open_calibration(o, cat, targets);
  const ScalingCurve c = scaling_curve(r, targets.front(), o.max_nodes, cat, cal, a);
  if (o.json) fmt::print("{}\n", scaling_json(r, c, cal, a).dump(2));
  else fmt::print("{}", scaling_text(r, c, cal, a));
}

}  // namespace

void add_plan_command(CLI::App& app) {
  const HelpSection plan_help("plan", "plan");
  const HelpSection systems_help("plan", "systems");
  const HelpSection scaling_help("plan", "scaling");
  auto o = std::make_shared<PlanOptions>();
  CLI::App* plan = app.add_subcommand("plan", plan_help.about());
  add_catalog_options(plan, *o);
  add_workload_options(plan, *o);
  add_layout_options(plan, *o);
  plan_help.option(plan, "--gpus", o->gpus)->check(integer_in(0, 1 << 24));
  plan_help.option(plan, "--max-gpus", o->max_gpus)->check(integer_in(0, 1 << 24));
  plan_help.option(plan, "--min-efficiency", o->min_efficiency)->check(number_in(0, 1));
  plan_help.option(plan, "--rank", o->rank);
  plan_help.option(plan, "--price", o->prices);
  plan_help.option(plan, "--deadline", o->deadline);
  plan_help.option(plan, "--min-duration", o->min_duration);
  plan_help.option(plan, "--applicant", o->applicant);
  plan_help.flag(plan, "--explain", o->explain);
  plan_help.option(plan, "--emit", o->emit_dir);
  plan_help.option(plan, "--emit-row", o->emit_row)->check(integer_in(1, 1 << 20));
  plan_help.option(plan, "--emit-data", o->emit_data);
  add_plan_choice_options(plan, *o);

  CLI::App* systems = plan->add_subcommand("systems", systems_help.about());
  add_catalog_options(systems, *o);

  CLI::App* scaling = plan->add_subcommand("scaling", scaling_help.about());
  add_catalog_options(scaling, *o);
  add_workload_options(scaling, *o);
  add_layout_options(scaling, *o);
  add_plan_choice_options(scaling, *o);
  scaling_help.option(scaling, "--max-nodes", o->max_nodes)->check(integer_in(1, 1 << 20));

  plan->require_subcommand(0, 1);
  plan->callback([o, systems, scaling] {
    if (systems->parsed()) run_systems(*o);
    else if (scaling->parsed()) run_scaling(*o);
    else run_plan(*o);
  });
}

}  // namespace aiscale::cli
