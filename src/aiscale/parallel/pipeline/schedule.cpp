#include "aiscale/parallel/pipeline/schedule.h"

#include <algorithm>

#include "aiscale/core/error.h"

namespace aiscale::parallel::pipeline {

StageLayers stage_layers(int64_t n_layer, int stages, int stage) {
  AISCALE_CHECK(stages >= 1 && stage >= 0 && stage < stages && n_layer >= 0, "bad pipeline position");
  return {n_layer * stage / stages, n_layer * (stage + 1) / stages};
}

StageSchedule gpipe_schedule(int stages, int stage, int microbatches) {
  AISCALE_CHECK(stage >= 0 && stage < stages && microbatches >= 1, "bad pipeline position");
  StageSchedule s;
  for (int m = 0; m < microbatches; ++m) s.push_back({PassKind::forward, m});
  for (int m = 0; m < microbatches; ++m) s.push_back({PassKind::backward, m});
  return s;
}

StageSchedule one_f_one_b_schedule(int stages, int stage, int microbatches) {
  AISCALE_CHECK(stage >= 0 && stage < stages && microbatches >= 1, "bad pipeline position");
  const int warmup = std::min(stages - stage - 1, microbatches);
  StageSchedule s;
  int next_forward = 0, next_backward = 0;
  for (; next_forward < warmup; ++next_forward) s.push_back({PassKind::forward, next_forward});
  while (next_forward < microbatches) {
    s.push_back({PassKind::forward, next_forward++});
    s.push_back({PassKind::backward, next_backward++});
  }
  while (next_backward < microbatches) s.push_back({PassKind::backward, next_backward++});
  return s;
}

StageSchedule schedule_by_name(const std::string& name, int stages, int stage, int microbatches) {
  if (name == "gpipe") return gpipe_schedule(stages, stage, microbatches);
  if (name == "1f1b") return one_f_one_b_schedule(stages, stage, microbatches);
  fail("pipeline schedule '{}' is not known: use gpipe or 1f1b", name);
}

int max_in_flight(const StageSchedule& s) {
  int held = 0, most = 0;
  for (const Pass& p : s) {
    held += p.kind == PassKind::forward ? 1 : -1;
    most = std::max(most, held);
  }
  return most;
}

PipelineRun simulate_pipeline(const std::vector<StageSchedule>& stages, double forward,
                              double backward, double recompute) {
  const int pp = static_cast<int>(stages.size());
  int micro = 0;
  for (const auto& s : stages)
    for (const Pass& p : s) micro = std::max(micro, p.microbatch + 1);
  // done[kind][stage][m]: when that pass ended (< 0: not yet).
  std::vector<std::vector<std::vector<double>>> done(
      2, std::vector<std::vector<double>>(pp, std::vector<double>(micro, -1.0)));
  std::vector<size_t> next(pp, 0);
  std::vector<int> held(pp, -1);  // the micro-batch whose forward a stage ran last
  PipelineRun run;
  std::vector<double> clock(pp, 0.0);
  run.busy.assign(pp, 0.0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < pp; ++s) {
      if (next[s] == stages[s].size()) continue;
      const Pass p = stages[s][next[s]];
      const bool fwd = p.kind == PassKind::forward;
      double ready = clock[s], extra = 0.0;
      if (fwd && s > 0) {
        if (done[0][s - 1][p.microbatch] < 0) continue;
        ready = std::max(ready, done[0][s - 1][p.microbatch]);
      }
      if (!fwd) {
        if (done[0][s][p.microbatch] < 0) {  // backward before its forward
          run.deadlock = true;
          return run;
        }
        if (s + 1 < pp && done[1][s + 1][p.microbatch] < 0) continue;
        if (recompute > 0 && held[s] != p.microbatch) extra = recompute;
        ready = std::max(ready + extra, s + 1 < pp ? done[1][s + 1][p.microbatch] : 0.0);
      }
      const double cost = fwd ? forward : backward;
      clock[s] = ready + cost;
      run.busy[s] += cost + extra;
      done[fwd ? 0 : 1][s][p.microbatch] = clock[s];
      held[s] = fwd ? p.microbatch : -1;
      ++next[s];
      progress = true;
    }
  }
  for (int s = 0; s < pp; ++s)
    if (next[s] != stages[s].size()) run.deadlock = true;
  run.makespan = *std::max_element(clock.begin(), clock.end());
  return run;
}

double simulated_bubble(const std::vector<StageSchedule>& stages, double backward_cost) {
  const PipelineRun run = simulate_pipeline(stages, 1.0, backward_cost);
  if (run.deadlock) return -1.0;
  const int pp = static_cast<int>(stages.size());
  double idle = 0.0;
  for (int s = 0; s < pp; ++s) idle += run.makespan - run.busy[s];
  return idle / (run.makespan * pp);
}

}  // namespace aiscale::parallel::pipeline
