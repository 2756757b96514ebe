#include "aiscale/train/param_server_session.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/core/log.h"
#include "aiscale/core/stats.h"
#include "aiscale/core/timer.h"
#include "aiscale/nn/models/gpt.h"
#include "aiscale/parallel/param_server/server.h"
#include "aiscale/parallel/param_server/worker.h"
#include "aiscale/train/checkpoint.h"
#include "aiscale/train/environment.h"
#include "aiscale/train/hf_checkpoint.h"
#include "aiscale/train/model_options.h"
#include "aiscale/train/profile_report.h"
#include "aiscale/train/progress.h"
#include "aiscale/train/rank_agreement.h"
#include "aiscale/train/run_dir.h"
#include "aiscale/train/schedule.h"
#include "aiscale/train/sources.h"
#include "aiscale/train/trainer.h"

namespace aiscale::train {
namespace fs = std::filesystem;
namespace ps = parallel::param_server;
namespace {

// One worker step as recorded: sent to rank 0 as kFields doubles.
struct WorkerStep {
  static constexpr int kFields = 9;
  double step = 0, worker = 0, loss = 0, grad_norm = 0, staleness = 0, applied = 1, version = 0,
         step_time_s = 0, wall_s = 0;
  void append_to(std::vector<double>& out) const {
    out.insert(out.end(), {step, worker, loss, grad_norm, staleness, applied, version, step_time_s, wall_s});
  }
  static WorkerStep from(const double* d) {
    return {d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8]};
  }
};

// What a worker learned in its loop.
struct WorkerOutcome {
  std::vector<WorkerStep> steps;
  DataPosition position;  // of its data after the last step
  double val_sum = 0;     // its validation loss with the final weights (0: no val data)
};

WorkerOutcome run_worker(const TrainConfig& c, const ps::Roles& roles, ps::Channel& channel, int rank,
                         nn::GptModel& model, BatchSource& train, BatchSource* val, bool progress_line,
                         const FaultPlan& fault) {
  const int64_t n = model.num_params();
  ps::ParameterClient client(channel, roles, n);
  std::vector<float> params(static_cast<size_t>(n));
  std::vector<int32_t> inputs(static_cast<size_t>(c.batch_size * c.seq_len)), targets(inputs.size());
  WorkerOutcome out;
  Progress progress("step", c.steps, 10.0);
  Timer wall;
  client.pull(params.data());
  model.set_params(params.data());
  for (int64_t i = 0; i < c.steps; ++i) {
    Timer step_timer;
    model.zero_grad();
    double loss = 0;
    for (int64_t micro = 0; micro < c.grad_accum; ++micro) {
      train.next_batch(inputs.data(), targets.data());
      loss += model.forward(inputs.data(), targets.data());
      if (fault.slow_rank == rank)
        std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(fault.slow_ms));
      model.backward(1.0f / static_cast<float>(c.grad_accum));
    }
    loss /= double(c.grad_accum);
    // Global-norm clipping needs the whole gradient, which only the worker holds: the
    // servers scale their shards by the factor sent along.
    const double norm = std::sqrt(model.grad_sum_squares());
    const double clip = c.grad_clip > 0 && norm > c.grad_clip ? c.grad_clip / norm : 1.0;
    const bool finite = std::isfinite(norm) && std::isfinite(loss);
    if (finite) client.push(model.grad_buffer(), clip, loss);
    else log::warn("worker step {}: non-finite loss {} or gradient norm {}; not pushed", i + 1, loss, norm);
    const ps::PullResult p = client.pull(params.data());
    model.set_params(params.data());
    WorkerStep s;
    s.step = double(i + 1);
    s.worker = double(rank);
    s.loss = loss;
    s.grad_norm = norm;
    s.staleness = finite ? double(p.last_staleness) : 0.0;
    s.applied = finite ? (p.last_applied ? 1.0 : 0.0) : -1.0;  // -1: not pushed (NaN/Inf)
    s.version = double(p.version);
    s.step_time_s = step_timer.seconds();
    s.wall_s = wall.seconds();
    out.steps.push_back(s);
    if (progress_line)
      progress.update(i + 1, fmt::format("loss {:.4f} | staleness {} | {} tok/s", loss, p.last_staleness,
                                         format_count(double(c.tokens_per_step()) / s.step_time_s)));
  }
  if (progress_line) progress.finish();
  out.position = train.position();
  client.done(c.steps);
  client.receive_final_weights(params.data());
  model.set_params(params.data());
  if (val) {
    val->rewind();
    for (int64_t b = 0; b < c.eval_batches; ++b) {
      val->next_batch(inputs.data(), targets.data());
      out.val_sum += model.forward(inputs.data(), targets.data());
    }
    out.val_sum /= double(c.eval_batches);
  }
  return out;
}

void run_server(const TrainConfig& c, const ps::Roles& roles, ps::Channel& channel, int rank,
                ps::StalenessStats* stats) {
  const int64_t n = c.model.num_params();
  const ps::ShardRange range = ps::shard_range(n, roles.servers, roles.server_index(rank));
  // The same initial weights as the model of a synchronous run with this seed (or of
  // train.init_from, which the session has checked on every rank).
  const std::vector<float> init = c.init_from.empty()
                                      ? nn::gpt_init_params(c.model, c.seed)
                                      : read_hf_model(c.init_from, c.model, "train.init_from");
  const std::vector<uint8_t> decay = nn::gpt_decay_mask(c.model, c.decay_embeddings);
  ps::ServerOptions o;
  o.steps = c.steps;
  o.max_staleness = c.max_staleness;
  o.adamw.beta1 = static_cast<float>(c.beta1);
  o.adamw.beta2 = static_cast<float>(c.beta2);
  o.adamw.eps = static_cast<float>(c.eps);
  o.adamw.weight_decay = static_cast<float>(c.weight_decay);
  o.lr_of_step = [&c](int64_t step) { return learning_rate(c, step); };
  ps::ParameterServer server(channel, roles, range,
                             std::vector<float>(init.begin() + range.begin, init.begin() + range.end),
                             std::vector<uint8_t>(decay.begin() + range.begin, decay.begin() + range.end), o);
  server.serve();
  server.send_final_state(0);
  server.send_stats(0);
  server.send_final_weights();
  *stats = server.stats();
}

double mean_of(const std::vector<WorkerStep>& steps, int64_t step) {
  double sum = 0;
  int k = 0;
  for (const auto& s : steps)
    if (int64_t(s.step) == step) sum += s.loss, ++k;
  return k > 0 ? sum / k : 0.0;
}

}  // namespace

int run_parameter_server_training(const TrainRequest& req, const TrainConfig& c,
                                  const std::string& config_path, parallel::Communicator& comm) {
  if (!req.resume_dir.empty())
    fail("--resume with parallel.parameter_servers = {}: a parameter-server run writes its checkpoint "
         "at the end and does not resume in this version; resume the checkpoint as a synchronous run "
         "(--set parallel.parameter_servers=0 on as many ranks as the run had workers), or start again",
         c.parameter_servers);
  if (req.profile_steps)
    fail("--profile records the steps of a synchronous run; it is not available with "
         "parallel.parameter_servers = {}", c.parameter_servers);
  const int rank = comm.rank(), world = comm.world();
  const ps::Roles roles = ps::make_roles(world, static_cast<int>(c.parameter_servers));
  const FaultPlan fault = fault_plan_from_env();
  if (fault.nan_step >= 0 || fault.kill_step >= 0 || fault.term_step >= 0 || fault.blowup_step >= 0)
    fail("AISCALE_FAULT: only slow@RANK:MS applies to parameter-server runs");
  const int threads = set_cpu_threads(c.threads);
  if (c.train_data.empty())
    fail("{}: data.train is not set: tokenize text with `aiscale data tokenize` and point "
         "data.train at the shards (see configs/quickstart.toml)", config_path);
  const bool server = roles.is_server(rank);
  // Workers read distinct parts of the data, as the ranks of a synchronous run do.
  std::unique_ptr<BatchSource> train_src, val_src;
  if (!server) {
    train_src = make_shard_source(c.train_data, c.batch_size, c.seq_len, rank, roles.workers(), c.seed,
                                  /*shuffle=*/true, c.model.vocab_size);
    if (!c.val_data.empty())
      val_src = make_shard_source(c.val_data, c.batch_size, c.seq_len, rank, roles.workers(), c.seed,
                                  /*shuffle=*/false, c.model.vocab_size);
  }
  check_writable_dir(c.run_dir, "run.dir (--set run.dir=DIR)");
  check_ranks_agree(comm, config_fingerprint(c, comm));
  ps::Channel channel(comm, c.timeout_s);

  std::unique_ptr<nn::GptModel> model;
  if (!server) {
    // A whole model per worker, no communicator: the servers combine.
    model = nn::make_gpt(c.device, c.model, gpt_run_options(c));
  }
  std::string name = c.run_name.empty() ? fmt::format("{}-{}", c.model_preset, utc_compact()) : c.run_name;
  char buf[256] = {};
  if (rank == 0) std::snprintf(buf, sizeof buf, "%s", name.c_str());
  comm.broadcast_bytes(buf, sizeof buf, 0);
  name = buf;
  RunDirectory run_dir(c.run_dir, name, /*resume=*/false, rank == 0);
  run_dir.write_config(to_toml(c));
  write_environment(run_dir.path(), comm, c.device, to_toml(c));
  const int64_t n_params = c.model.num_params();
  if (rank == 0)
    log::info("aiscale train: {} ({:.2f}M parameters) on {} rank(s) [mpi]: {} worker(s), {} parameter "
              "server(s), max staleness {}; {} threads per rank; batch {} x {} tokens per worker step; "
              "data: {}", c.model_preset, double(n_params) / 1e6, world, roles.workers(), roles.servers,
              c.max_staleness > 0 ? std::to_string(c.max_staleness) : std::string("unbounded"), threads,
              c.batch_size * c.grad_accum, c.seq_len, train_src->describe());

  comm.barrier();  // every rank is ready: the clocks of the time-to-loss start together
  Timer wall;
  WorkerOutcome mine;
  ps::StalenessStats server_stats;
  if (server) run_server(c, roles, channel, rank, &server_stats);
  else mine = run_worker(c, roles, channel, rank, *model, *train_src, val_src.get(), rank == 0 && !req.quiet, fault);
  const double wall_s = wall.seconds();

  // Validation loss: the mean over the workers of their shards' loss with the final weights.
  double val[1] = {mine.val_sum};
  comm.allreduce_sum(val, 1);
  const double val_loss = c.val_data.empty() ? -1.0 : val[0] / roles.workers();

  // Rank 0 gathers the step records, the staleness statistics and the final state.
  if (!server && rank != 0) {
    std::vector<double> flat;
    for (const auto& s : mine.steps) s.append_to(flat);
    channel.send(flat.data(), int64_t(flat.size()), 0, ps::Tag::worker_records);
    channel.flush();
  }
  if (rank == 0) {
    std::vector<WorkerStep> steps = mine.steps;
    for (int w = 1; w < roles.workers(); ++w) {
      const std::vector<double> flat = channel.recv_doubles(w, ps::Tag::worker_records);
      for (size_t i = 0; i + WorkerStep::kFields <= flat.size(); i += WorkerStep::kFields)
        steps.push_back(WorkerStep::from(flat.data() + i));
    }
    std::sort(steps.begin(), steps.end(), [](const WorkerStep& a, const WorkerStep& b) {
      return a.step != b.step ? a.step < b.step : a.worker < b.worker;
    });
    ps::StalenessStats stats;
    for (int s = 0; s < roles.servers; ++s) stats.merge(ps::receive_stats(channel, roles.server_rank(s)));
    CheckpointState state;
    state.model = c.model;
    state.step = c.steps;
    state.data = mine.position;  // every worker has read as many batches
    state.seed = c.seed;
    set_checkpoint_layout(state, c, roles.workers());
    state.config_toml = to_toml(c);
    state.params.resize(size_t(n_params));
    state.m.resize(size_t(n_params));
    state.v.resize(size_t(n_params));
    ps::ParameterClient(channel, roles, n_params).receive_final_state(state.params.data(), state.m.data(),
                                                                     state.v.data());
    const std::string ckpt_dir = (fs::path(run_dir.path()) / "checkpoints").string();
    write_checkpoint(ckpt_dir, state, c.keep_checkpoints);

    std::vector<double> rates;
    int64_t nonfinite = 0;
    for (const auto& s : steps) {
      if (s.applied < 0) ++nonfinite;
      rates.push_back(double(c.tokens_per_step()) / s.step_time_s);
      if (int64_t(s.step) % c.log_every != 0 && int64_t(s.step) != c.steps) continue;
      nlohmann::json rec = {{"step", int64_t(s.step)}, {"worker", int(s.worker)}, {"loss", s.loss},
                            {"grad_norm", s.grad_norm}, {"staleness", int64_t(s.staleness)},
                            {"applied", s.applied > 0}, {"server_version", int64_t(s.version)},
                            {"step_time_s", s.step_time_s}, {"wall_s", s.wall_s},
                            {"tokens_per_s", double(c.tokens_per_step()) / s.step_time_s}};
      run_dir.append_metrics(rec);
    }
    const double first = mean_of(steps, 1), final = mean_of(steps, c.steps);
    const double tokens = double(c.tokens_per_step(roles.workers())) * double(c.steps);
    nlohmann::json communication = {
        {"mode", "parameter_server"},
        {"parameter_servers", roles.servers},
        {"workers", roles.workers()},
        {"max_staleness", c.max_staleness},
        {"updates", stats.updates},
        {"discarded_gradients", stats.discarded},
        {"staleness_mean", stats.mean()},
        {"staleness_max", stats.max},
        {"gradient_bytes_per_worker_step", 4 * n_params},
        {"weight_bytes_per_worker_step", 4 * n_params}};
    nlohmann::json summary = {
        {"status", "finished"},
        {"steps", c.steps},
        {"first_loss", first},
        {"final_loss", final},
        {"tokens_per_s_median", median(rates) * roles.workers()},
        {"tokens_per_s", tokens / wall_s},
        {"step_time_median_s", median([&] { std::vector<double> t; for (auto& s : steps) t.push_back(s.step_time_s); return t; }())},
        {"wall_s", wall_s},
        {"tokens_trained", tokens},
        {"n_params", n_params},
        {"device", model->device_name()},
        {"world_size", world},
        {"layout", {{"dp", roles.workers()}, {"tp", 1}, {"pp", 1}, {"zero_stage", 0},
                    {"sequence_parallel", false}, {"parameter_servers", roles.servers}}},
        {"nonfinite_steps", nonfinite},
        {"checkpoint", (fs::path(ckpt_dir) / checkpoint_name(c.steps)).string()},
        {"communication", communication},
        {"finished", utc_iso8601()}};
    if (val_loss >= 0) summary["val_loss"] = val_loss;
    run_dir.write_summary(summary);
    std::printf("trained %lld steps on each of %d workers in %s: loss %.4f -> %.4f%s; staleness mean "
                "%.2f, max %lld over %lld updates (%lld discarded)\n",
                static_cast<long long>(c.steps), roles.workers(), format_duration(wall_s).c_str(), first,
                final, val_loss >= 0 ? fmt::format(", validation loss {:.4f}", val_loss).c_str() : "",
                stats.mean(), static_cast<long long>(stats.max), static_cast<long long>(stats.updates),
                static_cast<long long>(stats.discarded));
    std::printf("run directory: %s\n", run_dir.path().c_str());
    std::fflush(stdout);
  }
  channel.flush();  // every message delivered
  comm.barrier();   // the summary is written before any rank reports success
  return 0;
}

}  // namespace aiscale::train
