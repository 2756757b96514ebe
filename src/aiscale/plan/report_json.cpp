// JSON output of `aiscale plan --json`: the same content as the text, for machines.
#include "aiscale/plan/report.h"

namespace aiscale::plan {
namespace {
using nlohmann::json;

json figure(const Figure& f) {
  return {{"value", f.value}, {"measured", f.measured}, {"source", f.source}};
}

json figures(const MachineFigures& m) {
  return {{"peak_flops", m.peak_flops},
          {"utilisation", figure(m.utilisation)},
          {"intra_node_bytes_per_s", figure(m.intra_bytes_per_s)},
          {"node_network_bytes_per_s", figure(m.node_bytes_per_s)},
          {"hbm_bytes_per_s", figure(m.hbm_bytes_per_s)},
          {"copy_engine_slowdown", figure(m.copy_engine_slowdown)},
          {"step_spread", figure(m.step_spread)}};
}

json layout(const Layout& l) {
  return {{"dp", l.dp}, {"tp", l.tp}, {"pp", l.pp}, {"zero", l.zero},
          {"micro_batch", l.micro_batch}, {"grad_accum", l.grad_accum},
          {"recompute", std::string(to_string(l.recompute))},
          {"grad_transport", std::string(to_string(l.transport))}, {"offload", l.offload},
          {"gpus", l.gpus()},
          {"global_batch", l.global_batch()}};
}

json memory(const MemoryBreakdown& m, double capacity) {
  return {{"params_on_gpu", m.params_on_gpu}, {"weights_bytes", m.weights},
          {"gradients_bytes", m.gradients}, {"optimizer_bytes", m.optimizer},
          {"activations_bytes", m.activations}, {"zero3_buffers_bytes", m.buffers},
          {"workspace_bytes", m.workspace}, {"total_bytes", m.total},
          {"offloaded_optimizer_bytes", m.offloaded},
          {"capacity_bytes", capacity}, {"stage", m.stage}};
}

json step(const StepEstimate& s) {
  return {{"nodes", s.nodes}, {"compute_s", s.compute_s}, {"tp_comm_s", s.tp_comm_s},
          {"bubble_s", s.bubble_s}, {"pp_comm_s", s.pp_comm_s}, {"dp_comm_s", s.dp_comm_s},
          {"dp_exposed_s", s.dp_exposed_s}, {"overlap_cost_s", s.overlap_cost_s}, {"optimizer_s", s.optimizer_s}, {"sync_s", s.sync_s},
          {"straggler_s", s.straggler_s}, {"step_s", s.step_s},
          {"samples_per_step", s.samples_per_step}, {"tokens_per_step", s.tokens_per_step},
          {"samples_per_s", s.samples_per_s}, {"tokens_per_s", s.tokens_per_s},
          {"model_flops_per_step", s.model_flops_per_step}, {"mfu", s.mfu},
          {"utilisation", s.utilisation},
          {"topology_factor", s.topology_factor}};
}

json epoch(const Candidate& c) {
  const EpochEstimate& e = c.epoch;
  return {{"samples", e.samples}, {"steps", e.steps}, {"last_batch_fraction", e.last_fraction},
          {"train_steps_s", e.train_steps_s}, {"last_batch_s", e.last_batch_s},
          {"read_per_step_s", e.read_per_step_s}, {"decode_per_step_s", e.decode_per_step_s},
          {"load_per_step_s", e.load_per_step_s}, {"first_batch_s", e.first_batch_s},
          {"load_exposed_s", e.load_exposed_s}, {"validation_batches", e.validation_batches},
          {"validation_s", e.validation_s}, {"startup_s", e.startup_s},
          {"train_part_s", e.train_part_s}, {"epoch_s", e.epoch_s}, {"epochs", c.epochs},
          {"efficiency", {{"base_gpus", c.base_gpus}, {"base_allocated_gpus", c.base_allocated_gpus},
                          {"per_batch", c.eff_batch},
                          {"per_training_part", c.eff_train}, {"per_epoch", c.eff_epoch}}},
          {"figures", {{"storage_bytes_per_s", figure(e.figures.storage_bytes_per_s)},
                       {"decode_images_per_s_per_core", figure(e.figures.decode_per_core)},
                       {"loader_cores_per_gpu", figure(e.figures.cores_per_gpu)}}}};
}

json candidate(const Candidate& c) {
  const Partition& p = *c.target.partition;
  return {{"system", c.target.system->id}, {"partition", p.id}, {"accelerator", p.accelerator.id},
          {"layout", layout(c.layout)}, {"ranks_per_node", c.ranks_per_node()},
          {"allocated_gpus", c.allocated_gpus()}, {"memory", memory(c.memory, p.accelerator.memory_bytes())},
          {"step", step(c.step)}, {"epoch", epoch(c)},
          {"runs_in_aiscale_train", c.runs()}, {"engine_gap", c.engine_gap},
          {"efficiency", c.efficiency}, {"efficiency_gpus_used", c.efficiency_used},
          {"efficiency_baseline", "one GPU of the same kind, the whole batch at its best micro-batch, "
                                  "no communication, no memory limit, against the step × the GPUs "
                                  "allocated (efficiency_gpus_used: × the GPUs used)"},
          {"ideal_step_s", c.ideal_step_s}, {"efficiency_note", c.efficiency_note},
          {"scaling_efficiency", c.scaling}, {"scaling_efficiency_gpus_used", c.scaling_used},
          {"weak_scaling", c.weak}, {"scaling_base_gpus", c.base_gpus},
          {"scaling_base_allocated_gpus", c.base_allocated_gpus}, {"steps", c.steps},
          {"startup_s", c.startup_s},
          {"seconds", c.days * 86400.0}, {"days", c.days}, {"gpu_hours", c.gpu_hours},
          {"energy_kwh", c.energy_kwh > 0 ? json(c.energy_kwh) : json(nullptr)},
          {"cost", c.cost >= 0 ? json(c.cost) : json(nullptr)},
          {"access_route", {{"name", c.route.name}, {"detail", c.route.detail},
                            {"call", c.route.call_id}, {"also", c.route.also}}},
          {"attention", std::string(to_string(c.attention))}, {"cpu_partition", p.is_cpu()},
          {"figures", figures(c.figures)}};
}

json workload(const PlanRequest& r) {
  const Workload& w = r.workload;
  json j = {{"name", w.name}, {"kind", w.is_transformer() ? "transformer" : "cnn"},
            {"params", w.params()}, {"description", w.describe()}, {"origin", w.origin},
            {"precision", std::string(to_string(r.precision))}};
  if (w.is_transformer()) {
    j["n_layer"] = w.gpt.n_layer;
    j["n_head"] = w.gpt.n_head;
    j["n_embd"] = w.gpt.n_embd;
    j["seq_len"] = w.seq_len;
    j["vocab_size"] = w.gpt.vocab_size;
    j["family"] = nn::to_string(w.gpt.family);
    j["n_kv_head"] = w.gpt.kv_heads();
    j["ffn_hidden"] = w.gpt.ffn();
    j["tie_embeddings"] = w.gpt.tied();
    j["tokens"] = r.tokens;
    j["attention"] = r.attention ? std::string(to_string(*r.attention)) : std::string("auto");
  } else {
    j["macs_per_sample"] = w.cnn.macs_per_sample;
    j["images"] = r.images;
    j["epochs"] = r.epochs;
  }
  return j;
}

json calibration(const Calibration& cal) {
  json u = json::array(), b = json::array();
  for (const auto& s : cal.utilisation)
    u.push_back({{"accelerator", s.accelerator_id}, {"device", s.device}, {"model", s.model},
                 {"precision", std::string(to_string(s.precision))}, {"n_params", s.n_params},
                 {"achieved_tflops", s.achieved_tflops}, {"utilisation", s.utilisation},
                 {"source", s.source}});
  for (const auto& s : cal.bandwidth)
    b.push_back({{"accelerator", s.accelerator_id}, {"system", s.system_id}, {"nodes", s.nodes},
                 {"world_size", s.world_size}, {"bytes", s.bytes},
                 {"busbw_bytes_per_s", s.busbw_bytes_per_s}, {"source", s.source}});
  return {{"files", cal.files}, {"utilisation", u}, {"bandwidth", b}, {"notes", cal.notes}};
}

json assumptions(const Assumptions& a) {
  return {{"transformer_utilisation", a.transformer_utilisation},
          {"cnn_utilisation", a.cnn_utilisation},
          {"cnn_utilisation_fp32", a.cnn_utilisation_fp32},
          {"intra_efficiency", a.intra_efficiency},
          {"inter_efficiency", a.inter_efficiency},
          {"alpha_intra_s", a.alpha_intra_s},
          {"alpha_inter_s", a.alpha_inter_s},
          {"bucket_bytes", a.bucket_bytes},
          {"comm_overlap", a.comm_overlap},
          {"collective_overlap_cost_s", a.collective_overlap_cost_s},
          {"copy_engine_slowdown", a.copy_engine_slowdown},
          {"grad_comm_bytes", a.grad_comm_bytes},
          {"dragonfly_global_factor", a.topology.dragonfly_global},
          {"dragonfly_plus_global_factor", a.topology.dragonfly_plus_global},
          {"default_group_nodes", a.topology.default_group_nodes},
          {"workspace_fixed_bytes", a.memory.fixed_bytes},
          {"workspace_fragmentation", a.memory.fragmentation},
          {"gemm_half_elements", a.gemm_half_elements},
          {"startup_fixed_s", a.startup_fixed_s},
          {"dp_step_sync_s", a.dp_step_sync_s},
          {"step_spread_gpu", a.step_spread_gpu},
          {"step_spread_cpu", a.step_spread_cpu},
          {"startup_per_node_s", a.startup_per_node_s},
          {"idle_power_fraction", a.idle_power_fraction},
          {"fp8_gemm_speedup", a.fp8_gemm_speedup},
          {"fp8_cast_bandwidth_share", a.fp8_cast_bandwidth_share},
          {"global_taper", a.topology.global_taper},
          {"storage_gbytes_per_s", a.epoch.storage_gbytes_per_s},
          {"storage_share", a.epoch.storage_share},
          {"decode_images_per_s_per_core", a.epoch.decode_images_per_s_per_core},
          {"loader_cores_per_gpu", a.epoch.loader_cores_per_gpu}};
}

json row(const ScalingRow& r) {
  json j = {{"nodes", r.nodes}, {"gpus", r.gpus}};
  if (r.run) {
    // The nodes the run uses (above): ranks_per_node on each, allocating all their GPUs.
    j["ranks_per_node"] = r.run->ranks_per_node();
    j["allocated_gpus"] = r.run->allocated_gpus();
    j["run"] = candidate(*r.run);
    j["speedup"] = r.speedup;
    j["efficiency"] = r.efficiency;
    j["efficiency_gpus_used"] = r.run->efficiency_used;
  } else {
    j["note"] = r.note;
  }
  return j;
}

}  // namespace

nlohmann::json systems_json(const Catalog& cat) {
  json systems = json::array(), accs = json::array();
  for (const auto& a : cat.accelerators)
    accs.push_back({{"id", a.id}, {"vendor", a.vendor}, {"name", a.name}, {"memory_gib", a.memory_gib},
                    {"memory_bandwidth_tbs", a.memory_bandwidth_tbs}, {"bandwidth_as", a.bandwidth_as},
                    {"peak_tflops", {{"fp64", a.peak_fp64}, {"fp32", a.peak_fp32}, {"tf32", a.peak_tf32},
                                     {"fp16", a.peak_fp16}, {"bf16", a.peak_bf16}, {"fp8", a.peak_fp8}}},
                    {"source", a.source}});
  for (const auto& s : cat.systems) {
    json parts = json::array();
    for (const auto& p : s.partitions)
      parts.push_back({{"id", p.id}, {"name", p.name}, {"kind", p.kind}, {"nodes", p.nodes},
                       {"gpus_per_node", p.gpus_per_node}, {"accelerator", p.accelerator_id},
                       {"cpu", p.cpu}, {"ram_gib", p.ram_gib}, {"local_ssd", p.local_ssd},
                       {"intra_node", {{"link", p.intra.link}, {"gbytes_per_s", p.intra.gbytes_per_s},
                                       {"assumed", p.intra.assumed}}},
                       {"network", {{"kind", p.network.kind}, {"links", p.network.links},
                                    {"gbps_per_link", p.network.gbps_per_link},
                                    {"topology", std::string(to_string(p.network.topology))}}},
                       {"cpu_model", p.cpu_model}, {"sockets", p.sockets},
                       {"node_peak_fp32_tflops", p.accelerator.cpu_node ? p.accelerator.peak_fp32 : 0.0},
                       {"plannable", p.plannable()}, {"notes", p.notes}});
    systems.push_back({{"id", s.id}, {"name", s.name}, {"site", s.site}, {"eurohpc", s.eurohpc},
                       {"status", s.status}, {"sustained_pflops", s.sustained_pflops},
                       {"notes", s.notes}, {"files", s.files}, {"partitions", parts}});
  }
  json cpus = json::array();
  for (const auto& c : cat.cpus)
    cpus.push_back({{"id", c.id}, {"vendor", c.vendor}, {"name", c.name}, {"cores", c.cores},
                    {"ghz", c.ghz}, {"fp32_flops_per_cycle", c.fp32_flops_per_cycle},
                    {"fp64_flops_per_cycle", c.fp64_flops_per_cycle},
                    {"memory_bandwidth_gbs", c.memory_bandwidth_gbs}, {"source", c.source}});
  return {{"systems", systems}, {"accelerators", accs}, {"cpus", cpus}, {"files", cat.files}};
}

nlohmann::json plan_json(const PlanRequest& r, const PlanResult& res, const Calibration& cal,
                         const Assumptions& a) {
  json ranked = json::array(), rejected = json::array();
  for (const auto& c : res.ranked) ranked.push_back(candidate(c));
  for (const auto& rj : res.rejected)
    rejected.push_back({{"system", rj.target.system->id}, {"partition", rj.target.partition->id},
                        {"reason", rj.reason}});
  return {{"workload", workload(r)},
          {"compute", {{"flops", res.compute.flops}, {"flops_per_sample", res.compute.flops_per_sample},
                       {"formula", res.compute.formula}, {"substituted", res.compute.substituted}}},
          {"request", {{"gpus", r.gpus}, {"global_batch", r.global_batch},
                       {"min_efficiency", r.min_efficiency}, {"max_gpus", r.max_gpus},
                       {"grad_transport", r.grad_transport
                                              ? std::string(to_string(*r.grad_transport))
                                              : std::string("auto")},
                       {"rank", std::string(to_string(r.objective))},
                       {"deadline_s", r.deadline_s ? json(*r.deadline_s) : json(nullptr)},
                       {"min_duration_s", r.min_duration_s},
                       {"applicant", std::string(to_string(r.applicant))},
                       {"include_unsupported", r.include_unsupported}}},
          {"ranked", ranked}, {"rejected", rejected}, {"calibration", calibration(cal)},
          {"assumptions", assumptions(a)}};
}

nlohmann::json scaling_json(const PlanRequest& r, const ScalingCurve& c, const Calibration& cal,
                            const Assumptions& a) {
  json strong = json::array(), weak = json::array();
  for (const auto& x : c.strong) strong.push_back(row(x));
  for (const auto& x : c.weak) weak.push_back(row(x));
  return {{"workload", workload(r)}, {"system", c.target.system->id},
          {"partition", c.target.partition->id}, {"global_batch", c.global_batch},
          {"base_layout", layout(c.base)}, {"figures", figures(c.figures)},
          {"strong", strong}, {"weak", weak}, {"calibration", calibration(cal)},
          {"assumptions", assumptions(a)}, {"predicted", true}};
}

}  // namespace aiscale::plan
