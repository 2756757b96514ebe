#include "aiscale/report/machine_profile_table.h"

#include <filesystem>

#include <fmt/format.h>

#include "aiscale/plan/machine_profile.h"

namespace aiscale::report {

using nlohmann::json;

json machine_profile_summary(const std::string& dir, std::vector<std::string>& files_read) {
  const std::filesystem::path file = std::filesystem::path(dir) / kMachineProfileFile;
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) return nullptr;
  const plan::MachineProfile p = plan::load_machine_profile(file.string());
  files_read.push_back(file.string());
  json figures = json::array();
  auto add = [&](const std::string& figure, double value, const char* unit) {
    if (value > 0) figures.push_back({{"figure", figure}, {"value", value}, {"unit", unit}});
  };
  for (const auto& [prec, v] : p.gemm_peak_tflops)
    add(fmt::format("dense GEMM {}, best of sizes up to {}", prec, p.gemm_peak_size), v, "TFLOP/s");
  for (const auto& [prec, v] : p.gemm_model_tflops)
    add(fmt::format("GEMMs of {} ({} x {} tokens), {}", p.shapes_model, p.shapes_batch,
                    p.shapes_seq, prec), v, "TFLOP/s");
  add("host memory, copy", p.host_copy_gbs, "GB/s");
  add(fmt::format("host memory, triad ({} threads)", p.threads), p.host_triad_gbs, "GB/s");
  add("device memory, copy", p.device_copy_gbs, "GB/s");
  add("device memory, triad", p.device_triad_gbs, "GB/s");
  add("host to device, pinned", p.h2d_pinned_gbs, "GB/s");
  add("device to host, pinned", p.d2h_pinned_gbs, "GB/s");
  add("host to device, pageable", p.h2d_pageable_gbs, "GB/s");
  add("device to host, pageable", p.d2h_pageable_gbs, "GB/s");
  if (!p.peers.empty())
    add(fmt::format("peer to peer, slowest of {} pairs ({})", p.peers.size(),
                    p.p2p_enabled ? "peer access" : "not all with peer access"),
        p.p2p_min_gbs(), "GB/s");
  if (p.allreduce_ranks > 1)
    add(fmt::format("all-reduce bus bandwidth ({}, {} ranks, {:.0f} MiB)", p.allreduce_backend,
                    p.allreduce_ranks, p.allreduce_bytes / 1048576.0),
        p.allreduce_busbw_gbs, "GB/s");
  return {{"file", file.string()}, {"host", p.host}, {"date", p.date}, {"device", p.device()},
          {"command", p.command}, {"figures", figures}};
}

Table machine_profile_table(const std::vector<json>& studies) {
  Table t{"machine-profile", "Machine profile",
          "What `aiscale bench machine` measured on the machine beside the study "
          "(machine-profile.toml): the figures the planner takes in place of the datasheet's.",
          {"study", "figure", "value", "unit", "device", "host", "date"},
          {}};
  for (const json& d : studies) {
    if (!d.contains("machine_profile") || !d["machine_profile"].is_object()) continue;
    const json& m = d["machine_profile"];
    for (const json& f : m["figures"])
      t.rows.push_back({d["study"]["display_name"].get<std::string>(), f["figure"].get<std::string>(),
                        format_figure(f["value"]), f["unit"].get<std::string>(),
                        m["device"].get<std::string>(), m["host"].get<std::string>(),
                        m["date"].get<std::string>()});
  }
  return t;
}

}  // namespace aiscale::report
