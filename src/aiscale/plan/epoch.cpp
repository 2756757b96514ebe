#include "aiscale/plan/epoch.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace aiscale::plan {

EpochFigures epoch_figures(const Partition& part, int nodes, double node_bytes_per_s,
                           const Calibration& cal, double decode_override, const Assumptions& a) {
  EpochFigures f;
  // The filesystem: the job's share of its aggregate read bandwidth, and never more than
  // its nodes can take in over the network.
  const bool known = part.storage.gbytes_per_s > 0;
  const double aggregate = (known ? part.storage.gbytes_per_s : a.epoch.storage_gbytes_per_s) * 1e9;
  const double share = aggregate * a.epoch.storage_share;
  const double intake = node_bytes_per_s > 0 ? node_bytes_per_s * std::max(1, nodes) : share;
  f.storage_bytes_per_s = {
      std::min(share, intake), false,
      fmt::format("{} {:.0f} GB/s{} × {:.0f}% assumed share for one job{}",
                  known ? part.storage.kind : std::string("filesystem"), aggregate / 1e9,
                  known ? " (" + part.storage.source + ")" : std::string(" (assumed: not in the catalogue)"),
                  a.epoch.storage_share * 100,
                  intake < share ? fmt::format(", capped by {} node(s)' network intake", nodes) : "")};
  f.decode_per_core = {a.epoch.decode_images_per_s_per_core, false,
                       fmt::format("assumed {:.0f} images/s per core, as `aiscale bench loader` measured "
                                   "on one core of the 2x H100 host (docs/results/machine.md)",
                                   a.epoch.decode_images_per_s_per_core)};
  if (!cal.loader.empty()) {
    const LoaderSample& s = cal.loader.front();
    f.decode_per_core = {s.images_per_s_per_thread, true,
                         fmt::format("`bench loader` with {} threads{} at {}", s.threads,
                                     s.host.empty() ? "" : " on " + s.host, s.source)};
  }
  if (decode_override > 0)
    f.decode_per_core = {decode_override, false, "given with --decode-rate"};
  const int cores = part.has_slurm ? part.slurm.cores_per_gpu : 0;
  f.cores_per_gpu = cores > 0 ? Figure{static_cast<double>(cores), false,
                                       "the site's cores per GPU (catalogue [slurm] cores_per_gpu)"}
                              : Figure{a.epoch.loader_cores_per_gpu, false,
                                       fmt::format("assumed {:.0f} cores per GPU",
                                                   a.epoch.loader_cores_per_gpu)};
  return f;
}

EpochEstimate estimate_epoch(const EpochInputs& in, const StepEstimate& step, const Layout& l,
                             const EpochFigures& f, double startup_s) {
  EpochEstimate e;
  e.figures = f;
  e.samples = in.samples;
  e.startup_s = startup_s;
  const double per_step = step.samples_per_step;
  if (!(per_step > 0) || !(in.samples > 0)) return e;
  e.steps = std::ceil(in.samples / per_step - 1e-9);
  e.last_fraction = in.samples / per_step - (e.steps - 1.0);
  // The partial last batch: its exchange and optimizer update are whole, and its smaller
  // GEMMs run less efficiently, so it is priced as a whole step.
  e.train_steps_s = e.steps * step.step_s;
  e.last_batch_s = (1.0 - e.last_fraction) * step.step_s;

  // Loading one step: the step's bytes over the job's read bandwidth; decoding the images
  // of one GPU's micro-batches on the cores beside it.
  const double bytes = per_step * in.bytes_per_sample;
  e.read_per_step_s = f.storage_bytes_per_s.value > 0 ? bytes / f.storage_bytes_per_s.value : 0.0;
  if (in.decoded && f.decode_per_core.value > 0 && f.cores_per_gpu.value > 0) {
    const double per_gpu = static_cast<double>(l.micro_batch) * l.grad_accum;
    e.decode_per_step_s = per_gpu / (f.decode_per_core.value * f.cores_per_gpu.value);
  }
  e.load_per_step_s = std::max(e.read_per_step_s, e.decode_per_step_s);
  e.first_batch_s = e.load_per_step_s;
  e.load_exposed_s = e.first_batch_s + e.steps * std::max(0.0, e.load_per_step_s - step.step_s);
  e.train_part_s = e.train_steps_s + e.load_exposed_s;

  // Validation: forward only, a third of a step's compute per batch (backward is twice the
  // forward), or the batch's loading where that is longer.
  if (in.validation_samples > 0) {
    e.validation_batches = std::ceil(in.validation_samples / per_step - 1e-9);
    const double forward = (step.compute_s + step.tp_comm_s) / 3.0 + step.bubble_s / 3.0;
    e.validation_s = e.validation_batches * std::max(forward, e.load_per_step_s);
  }
  e.epoch_s = e.startup_s + e.train_part_s + e.validation_s;
  return e;
}

}  // namespace aiscale::plan
