// Properties every plan must have, over many random requests (models, systems, GPU counts,
// global batches, precisions, pinned layouts, with and without the layouts `aiscale train`
// cannot run): no zero, negative or infinite durations; a step that is the sum of its
// parts; memory within the GPU; MFU within (0, 1]; efficiency at most 1 unless the row says
// why; a run at least as long as its steps. A seeded generator, so a failure names a
// request that can be replayed.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include <fmt/format.h>

#include "aiscale/core/error.h"
#include "aiscale/plan/planner.h"

using namespace aiscale;
using namespace aiscale::plan;

namespace {

const Catalog& catalog() {
  static const Catalog cat = load_catalog(std::string(AISCALE_SOURCE_DIR) + "/data/systems");
  return cat;
}

bool finite_positive(double v) { return std::isfinite(v) && v > 0; }

std::string check_candidate(const Candidate& c) {
  const StepEstimate& s = c.step;
  for (double part : {s.compute_s, s.tp_comm_s, s.bubble_s, s.pp_comm_s, s.dp_exposed_s, s.overlap_cost_s,
                      s.optimizer_s, s.sync_s, s.straggler_s})
    if (!std::isfinite(part) || part < 0) return "a step component is negative or not finite";
  if (!finite_positive(s.step_s) || !finite_positive(s.compute_s)) return "step or compute time not positive";
  const double sum = s.compute_s + s.tp_comm_s + s.bubble_s + s.pp_comm_s + s.dp_exposed_s + s.overlap_cost_s +
                     s.optimizer_s + s.sync_s + s.straggler_s;
  if (std::fabs(sum - s.step_s) > 1e-9 * s.step_s) return "the step is not the sum of its parts";
  if (s.dp_exposed_s > s.dp_comm_s * (1 + 1e-9) + 1e-15) return "more exposed than all the communication";
  if (!(s.mfu > 0) || s.mfu > 1) return fmt::format("MFU {} outside (0, 1]", s.mfu);
  if (!finite_positive(c.ideal_step_s)) return "ideal step not positive";
  if (!finite_positive(c.efficiency)) return "efficiency not positive";
  if (c.efficiency > 1 + 1e-9 && c.efficiency_note.empty()) return fmt::format("efficiency {} above 1 unexplained", c.efficiency);
  if (!finite_positive(c.steps) || !finite_positive(c.days) || !finite_positive(c.gpu_hours))
    return "steps, days or GPU-hours not positive";
  if (c.days * 86400.0 < c.steps * s.step_s * (1 - 1e-9)) return "the run is shorter than its steps";
  if (!finite_positive(c.scaling)) return "scaling not positive";
  if (!finite_positive(c.memory.total)) return "memory not positive";
  if (c.memory.total > c.target.partition->accelerator.memory_bytes() * (1 + 1e-9))
    return "memory beyond the GPU's";
  return "";
}

TEST(PlanProperties, TenThousandRandomPlansHoldEveryProperty) {
  const Catalog& cat = catalog();
  std::vector<Target> targets = cat.gpu_targets();
  for (const char* cpu : {"lumi/lumi-c", "karolina/cpu"})
    for (const Target& t : cat.resolve(cpu)) targets.push_back(t);
  const std::vector<std::string> models = {"gpt-tiny", "gpt2-124m", "gpt2-350m", "gpt2-1558m",
                                           "llama3-1b-shape", "llama3-8b-shape", "resnet50"};
  std::mt19937_64 rng(2026);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  int plans = 0, rows = 0, requests = 0;
  for (int i = 0; plans < 10000 && i < 20000; ++i, ++requests) {
    PlanRequest r;
    const std::string model = models[pick(models.size())];
    r.workload = make_workload(model);
    r.tokens = std::pow(10.0, 6 + static_cast<double>(pick(7)));
    const Target& t = targets[pick(targets.size())];
    const Partition& part = *t.partition;
    r.precision = part.is_cpu() ? Precision::fp32 : (pick(4) == 0 ? Precision::fp32 : Precision::bf16);
    // Mostly a given GPU count (one search of layouts); one request in 20 lets the planner
    // choose the count too (a search per count: slower), up to 32 GPUs.
    const long max_gpus = std::min<long>(part.max_gpus(), 512);
    r.gpus = pick(20) == 0 ? 0 : 1 + static_cast<long>(pick(static_cast<size_t>(max_gpus)));
    if (r.gpus == 0) r.max_gpus = std::min<long>(max_gpus, 32);
    if (pick(3) == 0) r.global_batch = int64_t{1} << pick(11);
    if (pick(5) == 0) r.pins.zero = static_cast<int>(pick(4));
    r.include_unsupported = pick(2) == 0;
    const std::string request = fmt::format("request {}: {} on {} ({} GPUs, global batch {}, {}, zero pin {}, unsupported {})",
                                            i, model, t.label(), r.gpus, r.global_batch,
                                            to_string(r.precision), r.pins.zero ? *r.pins.zero : -1,
                                            r.include_unsupported);
    PlanResult res;
    try {
      res = aiscale::plan::plan(r, {t}, cat, Calibration{}, Assumptions{});
    } catch (const Error&) {
      continue;  // a request the planner refuses, with a message: not a plan
    }
    ++plans;
    for (const Candidate& c : res.ranked) {
      ++rows;
      const std::string why = check_candidate(c);
      ASSERT_EQ(why, "") << request << ": " << c.layout.describe();
    }
    for (const Rejection& x : res.rejected) ASSERT_FALSE(x.reason.empty()) << request;
  }
  EXPECT_EQ(plans, 10000) << "of " << requests << " requests";
  EXPECT_GE(rows, 3000);  // rows checked (many requests fit no layout: a 8B model on one GPU)
}

}  // namespace
