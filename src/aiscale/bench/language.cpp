#include "aiscale/bench/language.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "aiscale/core/dtype.h"
#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/core/stats.h"
#include "aiscale/core/log.h"
#include "aiscale/nn/models/gpt.h"
#include "aiscale/parallel/bootstrap.h"
#include "aiscale/parallel/process_groups.h"
#include "aiscale/profile/device_info.h"
#include "aiscale/profile/gpu_power.h"
#include "aiscale/profile/op_profiler.h"
#include "aiscale/train/parallel_layout.h"
#include "aiscale/train/profile_report.h"
#include "aiscale/train/progress.h"
#include "aiscale/train/sources.h"
#include "aiscale/train/step_log.h"
#include "aiscale/train/managed_models.h"
#include "aiscale/train/model_options.h"
#include "aiscale/train/trainer.h"

namespace aiscale::bench {

namespace {
// Every rank's power window (a collective: each rank calls it), as the "gpu_power" record:
// per rank the mean board power against the enforced limit and the SM clock, and for the
// job the energy per step and the tokens per joule over the timed steps.
nlohmann::json gpu_power_json(const profile::GpuPowerMeter& meter,
                              const profile::GpuPowerWindow& w,
                              parallel::Communicator& comm, double tokens_per_device) {
  constexpr int K = 8;
  const int world = comm.world();
  std::vector<double> all(size_t(world) * K, 0.0);
  double* mine = all.data() + size_t(comm.rank()) * K;
  if (meter.available()) {
    const double v[K] = {1.0, w.energy_j, w.seconds, w.power_limit_w, w.mean_sm_clock_mhz,
                         w.min_sm_clock_mhz, w.max_sm_clock_mhz, w.mean_gpu_utilization_pct};
    std::copy(v, v + K, mine);
  }
  if (world > 1) comm.allreduce_sum(all.data(), int64_t(all.size()));
  nlohmann::json j;
  j["source"] = "NVML";
  nlohmann::json ranks = nlohmann::json::array();
  double energy = 0;
  int measured = 0;
  bool at_limit = false;
  for (int r = 0; r < world; ++r) {
    const double* x = all.data() + size_t(r) * K;
    if (x[0] == 0.0) continue;
    ++measured;
    energy += x[1];
    const double power = x[2] > 0 ? x[1] / x[2] : 0.0;
    if (x[3] > 0 && power >= 0.95 * x[3]) at_limit = true;
    ranks.push_back({{"rank", r}, {"energy_j", x[1]}, {"seconds", x[2]}, {"mean_power_w", power},
                     {"power_limit_w", x[3]}, {"mean_sm_clock_mhz", x[4]},
                     {"min_sm_clock_mhz", x[5]}, {"max_sm_clock_mhz", x[6]},
                     {"mean_gpu_utilization_pct", x[7]}});
  }
  if (measured == 0) {
    j["unavailable"] = meter.available() ? "no rank measured its GPU" : meter.unavailable_reason();
    return j;
  }
  j["ranks"] = ranks;
  j["ranks_measured"] = measured;
  // At the limit: a rank's mean board power within 5% of its enforced power limit.
  j["at_power_limit"] = at_limit;
  if (measured == world && energy > 0) j["tokens_per_joule"] = tokens_per_device * world / energy;
  return j;
}
}  // namespace

nlohmann::json run_language_bench(const LanguageBenchOptions& o, parallel::Communicator& comm) {
  o.run.model.validate();
  if (o.run.seq_len > o.run.model.block_size)
    fail("--seq-len {} exceeds the model's context {}: lower --seq-len", o.run.seq_len, o.run.model.block_size);
  if (o.steps < 1) fail("--steps must be at least 1");
  if (o.profile_steps != 0) train::check_profile_steps(o.profile_steps, o.steps, o.warmup, "--steps");
  train::TrainConfig tc = o.run;
  tc.steps = o.warmup + o.steps;
  tc.warmup_steps = 0;
  tc.schedule = "constant";
  tc.lr = 1e-4;
  tc.seed = o.seed;
  int threads = train::set_cpu_threads(o.run.threads);
  // Tensor parallelism (--tensor-parallel) and pipeline stages (--pipeline-parallel): the
  // ranks of a tensor group or a pipeline split one model and read the same batches; with
  // more ranks than tp x pp, data-parallel copies of them (placed as by aiscale train:
  // train::grid_options).
  const train::ParallelLayout layout = train::parallel_layout(tc, comm.world());
  std::unique_ptr<parallel::ProcessGroups> groups;
  if (layout.tp > 1 || layout.pp > 1 || (o.run.device != "cuda" && o.run.zero_stage >= 2))
    groups = std::make_unique<parallel::ProcessGroups>(comm,
                                                       parallel::ProcessGrid(train::grid_options(layout)));
  const int data_rank = groups ? groups->coord().dp : comm.rank();

  nn::GptRunOptions ro;
  ro.batch = o.run.batch_size;
  ro.seq = o.run.seq_len;
  train::set_precision(ro, o.run);
  ro.recompute = o.run.recompute;
  ro.recompute_layers = o.run.recompute_layers;
  ro.seed = o.seed;
  ro.comm = comm.world() > 1 ? &comm : nullptr;
  ro.groups = groups.get();
  ro.sequence_parallel = o.run.sequence_parallel;
  ro.microbatches = static_cast<int>(o.run.microbatches);
  ro.pipeline_schedule = o.run.pipeline_schedule;
  ro.zero_stage = train::model_zero_stage(o.run);
  ro.overlap = o.run.overlap;
  ro.offload_optimizer = o.run.offload_optimizer;
  ro.bucket_mib = o.run.bucket_mib;
  ro.grad_comm = parse_dtype(o.run.grad_comm);
  ro.grad_transport = train::grad_transport_of(o.run);
  ro.attention = o.run.attention;
  auto model = nn::make_gpt(o.run.device, o.run.model, ro);
  train::SyntheticSource source(o.run.batch_size, o.run.seq_len, o.run.model.vocab_size, o.seed + 1000 * data_rank);
  train::Trainer trainer(tc, *model, source, nullptr, comm, nullptr);
  std::unique_ptr<profile::OpProfiler> profiler;
  if (o.profile_steps > 0) {  // the first timed steps
    profiler = std::make_unique<profile::OpProfiler>(comm.rank(), o.warmup, o.profile_steps);
    trainer.profiler = profiler.get();
  }

  // The GPU's energy, power limit and SM clock over the timed steps (NVML), per rank.
  std::unique_ptr<profile::GpuPowerMeter> meter;
  if (o.run.device == "cuda") meter = std::make_unique<profile::GpuPowerMeter>(parallel::cuda_current_gpu_pci_bus_id());
  std::vector<double> times, bubbles;
  train::StepLog step_log(o.steps_dir.empty() ? std::string() : o.steps_dir + "/steps.jsonl", comm);
  train::Progress progress("bench step", tc.steps, 10.0);
  for (int64_t i = 0; i < tc.steps; ++i) {
    if (i == o.warmup) {
      if (meter) meter->start();
      if (o.run.device == "cuda") parallel::cuda_profiler_range(true);  // a profiler records the timed steps
    }
    train::StepStats s = trainer.step(i);
    step_log.add(trainer.step_record(s, /*warmup=*/i < o.warmup));
    if (i >= o.warmup) {
      times.push_back(s.step_time_s);
      bubbles.push_back(s.pipeline_wait_s / s.step_time_s);
    }
    if (comm.rank() == 0)
      progress.update(i + 1, fmt::format("{:.3f} s/step{}", s.step_time_s, i < o.warmup ? " (warm-up)" : ""));
  }
  if (o.run.device == "cuda") parallel::cuda_profiler_range(false);
  if (comm.rank() == 0) progress.finish();
  if (profiler) {
    trainer.end_profile();
    train::write_profile(*profiler, comm, o.profile_dir, o.profile_stem);
  }
  const profile::GpuPowerWindow power = meter ? meter->stop() : profile::GpuPowerWindow{};
  // The per-rank events of steps.jsonl: memory, and on GPUs power and SM clock.
  step_log.add_rank_event(
      "memory", {{"peak_memory_bytes", double(o.run.device == "cuda" ? model->memory_bytes() : profile::peak_rss_bytes())},
                 {"model_memory_bytes", double(model->memory_bytes())}});
  if (meter)  // every GPU rank adds it (a collective), measured or not
    step_log.add_rank_event("gpu_power", profile::gpu_power_event_fields(power, meter->available()));
  step_log.finish();
  // Step time of the slowest rank decides throughput.
  double med = median(times), p90 = percentile(times, 0.9);
  double buf[1] = {med};
  comm.allreduce_sum(buf, 1);  // mean of medians across ranks (ranks are in lock-step)
  med = buf[0] / comm.world();

  // A device's share of the tokens: the ranks of a tensor group or a pipeline train on the
  // same batch.
  const double tokens_per_step_device =
      static_cast<double>(o.run.batch_size * o.run.seq_len * o.run.grad_accum) / (layout.tp * layout.pp);
  const double flops_per_token = nn::gpt_train_flops_per_token(o.run.model, o.run.seq_len);
  const double tps_device = tokens_per_step_device / med;
  const double achieved_tflops = tps_device * flops_per_token / 1e12;
  nlohmann::json j;
  j["benchmark"] = "language";
  j["model"] = o.run.model_preset;
  j["family"] = nn::to_string(o.run.model.family);
  j["n_params"] = o.run.model.num_params();
  j["n_layer"] = o.run.model.n_layer;
  j["n_head"] = o.run.model.n_head;
  j["n_embd"] = o.run.model.n_embd;
  j["vocab_size"] = o.run.model.vocab_size;
  j["seq"] = o.run.seq_len;
  j["batch"] = o.run.batch_size;
  j["grad_accum"] = o.run.grad_accum;
  j["world_size"] = comm.world();
  j["communicator"] = comm.backend();
  if (o.run.offload_optimizer) {  // also one GPU: ZeRO-3's layers streamed, AdamW on the host
    j["zero_stage"] = o.run.zero_stage;
    j["offload_optimizer"] = true;
  }
  if (comm.world() > 1) {
    j["zero_stage"] = o.run.zero_stage;
    j["grad_comm"] = o.run.grad_comm;
    j["grad_transport"] = model->gradient_transport();
    j["gradient_sync"] = model->data_parallel()
                             ? (o.run.overlap ? "buckets overlapped with backward" : "after backward")
                             : "trainer all-reduce after backward";
    if (layout.tp > 1 || layout.pp > 1) {
      j["tensor_parallel"] = layout.tp;
      j["pipeline_parallel"] = layout.pp;
      j["data_parallel"] = layout.dp;
      if (layout.dp == 1)
        j["gradient_sync"] = layout.pp == 1 ? "none: one model split over the tensor ranks"
                                            : "the embeddings' gradients summed over the stages";
      else
        j["gradient_sync"] =
            o.run.zero_stage == 1
                ? "fp32 reduce-scatter over each data-parallel group after backward (ZeRO-1)"
            : o.run.zero_stage >= 2
                ? "fp32 reduce-scatter of each layer over each data-parallel group during "
                  "backward (ZeRO-" + std::to_string(o.run.zero_stage) + ")"
                : "fp32 all-reduce over each data-parallel group after backward";
    }
    if (layout.tp > 1) j["sequence_parallel"] = o.run.sequence_parallel;
    if (layout.pp > 1) {
      j["pipeline_schedule"] = o.run.pipeline_schedule;
      j["microbatches"] = o.run.microbatches;
      // The share of a step a stage spends waiting for the others: each rank's median over
      // the timed steps, averaged over the ranks (the stages wait differently).
      double b[1] = {median(bubbles)};
      comm.allreduce_sum(b, 1);
      j["pipeline_bubble_median"] = b[0] / comm.world();
    }
  }
  j["precision"] = o.run.precision;
  // "full" (every layer's forward run again in backward; the planner's calibration adds
  // that work back), else whether the LayerNorm and GELU outputs were recomputed.
  if (o.run.recompute_layers) j["recompute"] = "full";
  else j["recompute"] = o.run.recompute;
  j["device_kind"] = o.run.device == "cuda" ? "gpu" : "cpu";
  j["device"] = o.run.device == "cuda" ? model->device_name() : cpu_model_name();
  j["attention"] = model->attention_kernels();
  j["threads"] = threads;
  j["steps_timed"] = o.steps;
  j["tokens_per_s"] = tps_device * comm.world();
  j["tokens_per_s_per_device"] = tps_device;
  j["flops_per_token"] = flops_per_token;
  j["flop_formula"] = o.run.model.llama() && !o.run.model.tied()
                          ? "6*N + 12*L*C*T per token (N = all parameters but the untied input "
                            "embedding, a lookup)"
                          : "6*N + 12*L*C*T per token (N = all parameters incl. embeddings)";
  j["achieved_tflops_per_device"] = achieved_tflops;
  j["achieved_gflops_per_device"] = achieved_tflops * 1e3;
  double peak = o.run.device == "cuda" ? profile::gpu_dense_bf16_peak_tflops(model->device_name()) : 0.0;
  if (peak > 0) {
    j["peak_tflops_dense_bf16"] = peak;
    j["mfu"] = achieved_tflops / peak;
  }
  if (meter) j["gpu_power"] = gpu_power_json(*meter, power, comm, tokens_per_step_device * o.steps);
  if (o.baseline_tokens_per_s > 0) {
    j["baseline_tokens_per_s"] = o.baseline_tokens_per_s;
    j["scaling_efficiency"] = tps_device / o.baseline_tokens_per_s;
  }
  j["step_time_median_s"] = med;
  j["step_time_p90_s"] = p90;
  // The distribution of this rank's timed steps (rank 0's in the record; the ranks step
  // in lock-step): every step, for a CDF, and its spread.
  {
    const auto [lo, hi] = std::minmax_element(times.begin(), times.end());
    const double mean = std::accumulate(times.begin(), times.end(), 0.0) / double(times.size());
    double var = 0;
    for (double t : times) var += (t - mean) * (t - mean);
    j["step_time_min_s"] = *lo;
    j["step_time_max_s"] = *hi;
    j["step_time_mean_s"] = mean;
    j["step_time_stddev_s"] = times.size() > 1 ? std::sqrt(var / double(times.size() - 1)) : 0.0;
    j["step_times_s"] = times;
  }
  j["peak_memory_bytes"] = o.run.device == "cuda" ? model->memory_bytes() : profile::peak_rss_bytes();
  j["model_memory_bytes"] = model->memory_bytes();
  j["optimizer_state_bytes"] = trainer.data_parallel().optimizer_state_bytes();
  j["host"] = host_name();
  j["date"] = utc_iso8601();
  j["aiscale_version"] = AISCALE_VERSION;
  return j;
}

}  // namespace aiscale::bench
