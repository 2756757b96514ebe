#include "aiscale/plan/catalog.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "aiscale/core/ascii.h"
#include "aiscale/core/env.h"
#include "aiscale/core/error.h"
#include "aiscale/core/fs.h"
#include "aiscale/core/paths.h"
#include "aiscale/plan/catalog_schema.h"
#include "aiscale/plan/time_limit.h"

namespace aiscale::plan {
namespace fs = std::filesystem;

namespace {

std::string lower(std::string_view s) { return ascii_lower(s); }

// ---- merging: later files override single keys ------------------------------------

void merge_into(toml::table& dst, const toml::table& src);

void merge_by_id(toml::array& dst, const toml::array& src) {
  for (auto& n : src) {
    const auto& t = *n.as_table();
    auto id = t["id"].value<std::string>();
    auto it = std::find_if(dst.begin(), dst.end(), [&](toml::node& d) {
      return d.as_table() && (*d.as_table())["id"].value<std::string>() == id;
    });
    if (it != dst.end()) merge_into(*it->as_table(), t);
    else dst.push_back(t);
  }
}

void merge_into(toml::table& dst, const toml::table& src) {
  for (auto&& [key, node] : src) {
    toml::node* existing = dst.get(key.str());
    if (existing && existing->is_table() && node.is_table()) {
      merge_into(*existing->as_table(), *node.as_table());
    } else if (existing && existing->is_array_of_tables() && node.is_array_of_tables()) {
      merge_by_id(*existing->as_array(), *node.as_array());
    } else {
      const std::string_view name = key.str();  // clang 14 cannot capture a structured binding
      node.visit([&](auto&& v) { dst.insert_or_assign(name, v); });
    }
  }
}

// ---- conversion to structs (types already checked) ---------------------------------

template <typename T>
T get(const toml::table& t, std::string_view key, T fallback) {
  return t[key].value<T>().value_or(fallback);
}

std::vector<std::string> get_strings(const toml::table& t, std::string_view key) {
  std::vector<std::string> out;
  if (auto* a = t[key].as_array())
    for (auto& n : *a) out.push_back(n.value<std::string>().value_or(""));
  return out;
}

// The ids of catalogue entries, for messages: "a, b, c".
template <typename Entry>
std::string ids_of(const std::vector<Entry>& entries) {
  std::string ids;
  for (const Entry& e : entries) ids += (ids.empty() ? "" : ", ") + e.id;
  return ids;
}

// The keys an [[accelerator]] and a [[cpu]] share: id, vendor, name (the id where none is
// given), device_names and source.
template <typename Device>
void read_device_identity(const toml::table& t, Device& d) {
  d.id = get<std::string>(t, "id", "");
  d.vendor = get<std::string>(t, "vendor", "");
  d.name = get<std::string>(t, "name", d.id);
  d.device_names = get_strings(t, "device_names");
  d.source = get<std::string>(t, "source", "");
}

Accelerator to_accelerator(const toml::table& t) {
  Accelerator a;
  read_device_identity(t, a);
  a.memory_gib = get<double>(t, "memory_gib", 0.0);
  a.memory_bandwidth_tbs = get<double>(t, "memory_bandwidth_tbs", 0.0);
  a.bandwidth_as = get<std::string>(t, "bandwidth_as", "");
  if (auto* p = t["peak_tflops"].as_table()) {
    a.peak_fp64 = get<double>(*p, "fp64", 0.0);
    a.peak_fp32 = get<double>(*p, "fp32", 0.0);
    a.peak_tf32 = get<double>(*p, "tf32", 0.0);
    a.peak_fp16 = get<double>(*p, "fp16", 0.0);
    a.peak_bf16 = get<double>(*p, "bf16", 0.0);
    a.peak_fp8 = get<double>(*p, "fp8", 0.0);
  }
  a.board_power_w = get<double>(t, "board_power_w", 0.0);
  if (a.board_power_w < 0)
    fail("accelerator '{}': board_power_w = {} is negative: give the board's power in W", a.id,
         a.board_power_w);
  if (a.memory_gib <= 0)
    fail("accelerator '{}' has no memory_gib: add its memory capacity in GiB", a.id);
  return a;
}

AccessCall to_access(const toml::table& t) {
  AccessCall c;
  c.id = get<std::string>(t, "id", "");
  c.name = get<std::string>(t, "name", c.id);
  c.programme = get<std::string>(t, "programme", "");
  c.audience = get<std::string>(t, "audience", "not published");
  c.purpose = get<std::string>(t, "purpose", "training");
  c.new_users = get<bool>(t, "new_users", true);
  c.experienced = get<bool>(t, "experienced", true);
  if (t.contains("max_gpu_hours")) c.max_gpu_hours = get<double>(t, "max_gpu_hours", 0.0);
  c.min_gpu_hours = get<double>(t, "min_gpu_hours", 0.0);
  if (t.contains("max_months")) c.max_months = get<double>(t, "max_months", 0.0);
  c.period = get<std::string>(t, "period", "");
  c.turnaround = get<std::string>(t, "turnaround", "");
  c.url = get<std::string>(t, "url", "");
  c.seen = get<std::string>(t, "seen", "");
  c.notes = get<std::string>(t, "notes", "");
  return c;
}

CpuModel to_cpu(const toml::table& t) {
  CpuModel c;
  read_device_identity(t, c);
  c.cores = static_cast<int>(get<int64_t>(t, "cores", 0));
  c.ghz = get<double>(t, "ghz", 0.0);
  if (auto* f = t["flops_per_cycle"].as_table()) {
    c.fp32_flops_per_cycle = get<double>(*f, "fp32", 0.0);
    c.fp64_flops_per_cycle = get<double>(*f, "fp64", 0.0);
  }
  c.memory_bandwidth_gbs = get<double>(t, "memory_bandwidth_gbs", 0.0);
  if (c.cores <= 0 || c.ghz <= 0 || c.fp32_flops_per_cycle <= 0)
    fail("cpu '{}' needs cores, ghz and flops_per_cycle.fp32 (all positive) to be planned", c.id);
  return c;
}

// One CPU node as the planner's "device": peaks from sockets × cores × clock × FLOPs per
// cycle, the node's RAM as its memory, the sockets' DRAM bandwidth.
Accelerator cpu_node(const CpuModel& c, const Partition& p) {
  Accelerator a;
  const double ghz = p.cpu_ghz > 0 ? p.cpu_ghz : c.ghz;
  a.id = fmt::format("{}× {}", p.sockets, c.id);
  a.vendor = c.vendor;
  a.name = fmt::format("{}× {} ({} cores at {:g} GHz)", p.sockets, c.name, p.sockets * c.cores, ghz);
  a.memory_gib = p.ram_gib;
  a.memory_bandwidth_tbs = p.sockets * c.memory_bandwidth_gbs / 1000.0;
  const double core_ghz = p.sockets * c.cores * ghz;  // 10^9 core-cycles per second
  a.peak_fp32 = core_ghz * c.fp32_flops_per_cycle / 1000.0;
  a.peak_fp64 = core_ghz * c.fp64_flops_per_cycle / 1000.0;
  a.source = c.source;
  a.cpu_node = true;
  return a;
}

SlurmPreset to_slurm(const toml::table& t, const std::string& where) {
  SlurmPreset s;
  s.partition = get<std::string>(t, "partition", "");
  s.qos = get<std::string>(t, "qos", "");
  s.gpu_request = get<std::string>(t, "gpu_request", s.gpu_request);
  s.gres_name = get<std::string>(t, "gres_name", s.gres_name);
  s.cores_per_gpu = static_cast<int>(get<int64_t>(t, "cores_per_gpu", 0));
  s.cpu_bind = get<std::string>(t, "cpu_bind", "");
  s.gpu_bind = get<std::string>(t, "gpu_bind", "");
  s.exclusive = get<bool>(t, "exclusive", true);
  s.max_time = get<std::string>(t, "max_time", "");
  s.srun_mpi = get<std::string>(t, "srun_mpi", s.srun_mpi);
  s.launcher = get<std::string>(t, "launcher", s.launcher);
  s.account_required = get<bool>(t, "account_required", false);
  s.prelude = get_strings(t, "prelude");
  s.env = get_strings(t, "env");
  s.container_exec = get<std::string>(t, "container_exec", "");
  s.source = get<std::string>(t, "source", "");
  if (s.gpu_request != "gpus-per-node" && s.gpu_request != "gres" && s.gpu_request != "none")
    fail("{} slurm: gpu_request = \"{}\" is unknown: use \"gpus-per-node\", \"gres\" or \"none\"",
         where, s.gpu_request);
  if (s.launcher != "srun" && s.launcher != "mpirun")
    fail("{} slurm: launcher = \"{}\" is unknown: use \"srun\" or \"mpirun\"", where, s.launcher);
  if (s.cores_per_gpu < 0) fail("{} slurm: cores_per_gpu = {} must be 0 or more", where, s.cores_per_gpu);
  if (!s.max_time.empty()) parse_slurm_time(s.max_time, where + " slurm max_time");
  for (const auto& e : s.env)
    if (e.find('=') == std::string::npos || e.front() == '=')
      fail("{} slurm: env entry '{}' is not NAME=value", where, e);
  if (s.srun_mpi.empty() || s.srun_mpi.find_first_of(" \t'\"") != std::string::npos)
    fail("{} slurm: srun_mpi = \"{}\" must be one word (pmix, pmi2, cray_shasta, none)", where, s.srun_mpi);
  return s;
}

Partition to_partition(const toml::table& t, const std::string& where) {
  Partition p;
  p.id = get<std::string>(t, "id", "");
  p.name = get<std::string>(t, "name", p.id);
  p.kind = get<std::string>(t, "kind", "gpu");
  p.nodes = static_cast<int>(get<int64_t>(t, "nodes", 0));
  p.gpus_per_node = static_cast<int>(get<int64_t>(t, "gpus_per_node", 0));
  p.accelerator_id = get<std::string>(t, "accelerator", "");
  p.cpu = get<std::string>(t, "cpu", "");
  p.ram_gib = get<double>(t, "ram_gib", 0.0);
  p.local_ssd = get<std::string>(t, "local_ssd", "");
  p.interface = get<std::string>(t, "interface", "");
  p.launched = get<std::string>(t, "launched", "");
  p.notes = get<std::string>(t, "notes", "");
  p.cpu_model = get<std::string>(t, "cpu_model", "");
  p.sockets = static_cast<int>(get<int64_t>(t, "sockets", 0));
  p.cpu_ghz = get<double>(t, "cpu_ghz", 0.0);
  if (auto* i = t["intra_node"].as_table()) {
    p.intra.link = get<std::string>(*i, "link", "");
    p.intra.gbytes_per_s = get<double>(*i, "gbytes_per_s", 0.0);
    p.intra.assumed = get<bool>(*i, "assumed", false);
    p.intra.note = get<std::string>(*i, "note", "");
  }
  if (auto* n = t["network"].as_table()) {
    p.network.kind = get<std::string>(*n, "kind", "");
    p.network.links = static_cast<int>(get<int64_t>(*n, "links", 0));
    p.network.gbps_per_link = get<double>(*n, "gbps_per_link", 0.0);
    p.network.topology = parse_topology(get<std::string>(*n, "topology", ""));
    p.network.group_nodes = static_cast<int>(get<int64_t>(*n, "group_nodes", 0));
    p.network.shared_by_nodes = static_cast<int>(get<int64_t>(*n, "shared_by_nodes", 1));
    p.network.global_taper = get<double>(*n, "global_taper", 0.0);
    p.network.global_source = get<std::string>(*n, "global_source", "");
  }
  if (auto* st = t["storage"].as_table()) {
    p.storage.kind = get<std::string>(*st, "kind", "");
    p.storage.gbytes_per_s = get<double>(*st, "gbytes_per_s", 0.0);
    p.storage.source = get<std::string>(*st, "source", "");
  }
  if (auto* sl = t["slurm"].as_table()) {
    p.has_slurm = true;
    p.slurm = to_slurm(*sl, fmt::format("{} partition '{}'", where, p.id));
  }
  if (p.kind != "gpu" && p.kind != "cpu" && p.kind != "ipu")
    fail("{} partition '{}': kind = \"{}\" is unknown: use \"gpu\", \"cpu\" or \"ipu\"", where,
         p.id, p.kind);
  if (p.nodes < 0 || p.gpus_per_node < 0 || p.network.links < 0 || p.network.shared_by_nodes < 1 ||
      p.sockets < 0 || p.cpu_ghz < 0)
    fail("{} partition '{}': node, GPU and link counts must be positive", where, p.id);
  if (p.network.global_taper < 0 || p.network.global_taper > 1)
    fail("{} partition '{}': network global_taper = {} must lie in (0, 1] (global bandwidth of a "
         "group over its nodes' injection bandwidth)", where, p.id, p.network.global_taper);
  if (p.storage.gbytes_per_s < 0)
    fail("{} partition '{}': storage gbytes_per_s = {} must be positive", where, p.id,
         p.storage.gbytes_per_s);
  return p;
}

std::vector<std::string> toml_files_in(const std::string& path) {
  auto files = files_or_folder(path, {".toml"}, false);
  if (!files)
    fail("systems catalogue '{}' does not exist: give a directory of *.toml files or one "
         "TOML file", path);
  return *files;
}

}  // namespace

Topology parse_topology(std::string_view text) {
  std::string t = lower(text);
  if (t.empty() || t == "none") return Topology::none;
  if (t == "fat-tree" || t == "fat tree" || t == "fattree" || t == "fat_tree") return Topology::fat_tree;
  if (t == "dragonfly") return Topology::dragonfly;
  if (t == "dragonfly+" || t == "dragonfly-plus" || t == "dragonfly_plus") return Topology::dragonfly_plus;
  fail("unknown network topology '{}': use \"fat-tree\", \"dragonfly\" or \"dragonfly+\"", text);
}

std::string_view to_string(Topology t) {
  switch (t) {
    case Topology::none: return "-";
    case Topology::fat_tree: return "fat tree";
    case Topology::dragonfly: return "Dragonfly";
    case Topology::dragonfly_plus: return "Dragonfly+";
  }
  return "?";
}

long Partition::max_gpus() const {
  if (gpus_per_node <= 0) return 1;
  if (nodes <= 0 || !network.known()) return gpus_per_node;
  return static_cast<long>(nodes) * gpus_per_node;
}

std::string Target::label() const { return system->id + "/" + partition->id; }

const Accelerator* Catalog::find_accelerator(std::string_view id) const {
  for (const auto& a : accelerators)
    if (lower(a.id) == lower(id)) return &a;
  return nullptr;
}

const CpuModel* Catalog::find_cpu(std::string_view id) const {
  for (const auto& c : cpus)
    if (lower(c.id) == lower(id)) return &c;
  return nullptr;
}

double Catalog::memory_bandwidth_tbs(const Accelerator& acc, std::string* source) const {
  double hbm = acc.memory_bandwidth_tbs;
  if (source) *source = acc.id + " datasheet";
  if (hbm <= 0 && !acc.bandwidth_as.empty())
    if (const Accelerator* sib = find_accelerator(acc.bandwidth_as)) {
      hbm = sib->memory_bandwidth_tbs;
      if (source) *source = "stand-in: " + sib->id + " datasheet";
    }
  return hbm;
}

const System* Catalog::find_system(std::string_view id) const {
  std::string l = lower(id);
  for (const auto& s : systems) {
    if (lower(s.id) == l || lower(s.name) == l) return &s;
    for (const auto& a : s.aliases)
      if (lower(a) == l) return &s;
  }
  return nullptr;
}

std::vector<Target> Catalog::gpu_targets() const {
  std::vector<Target> out;
  for (const auto& s : systems)
    for (const auto& p : s.partitions)
      if (p.plannable() && p.is_gpu()) out.push_back({&s, &p});
  return out;
}

std::vector<Target> Catalog::resolve(std::string_view name) const {
  std::string n = lower(name);
  std::string sys_part = n, part;
  if (auto slash = n.find('/'); slash != std::string::npos) {
    sys_part = n.substr(0, slash);
    part = n.substr(slash + 1);
  }
  std::string known;
  for (const auto& s : systems) known += (known.empty() ? "" : ", ") + s.id;
  if (const System* s = find_system(sys_part)) {
    std::vector<Target> out;
    std::string parts;
    for (const auto& p : s->partitions) {
      parts += (parts.empty() ? "" : ", ") + s->id + "/" + p.id;
      if (part.empty() ? p.plannable() && p.is_gpu() : lower(p.id) == part) out.push_back({s, &p});
    }
    if (out.empty() && !part.empty())
      fail("system '{}' has no partition '{}': its partitions are {}", s->id, part, parts);
    if (out.empty())
      fail("system '{}' has no GPU partition the planner can use ({}): {}", s->id,
           parts.empty() ? "no partitions in the catalogue" : parts,
           s->status == "planned" ? "it is still planned" : "choose another --system");
    return out;
  }
  if (part.empty()) {  // a partition id alone, if unique
    std::vector<Target> out;
    for (const auto& s : systems)
      for (const auto& p : s.partitions)
        if (lower(p.id) == n && p.plannable()) out.push_back({&s, &p});
    if (out.size() == 1) return out;
    if (out.size() > 1)
      fail("'{}' names a partition of several systems: write it as system/partition, e.g. {}",
           name, out.front().label());
  }
  fail("unknown system '{}': known systems are {} (see `aiscale plan systems`; add your own "
       "with --systems FILE)", name, known);
}

std::string default_catalog_dir() { return resolve_data_path(kSystemsCatalog).path.string(); }

Catalog load_catalog(const std::string& dir, const std::vector<std::string>& extra) {
  Catalog cat;
  std::vector<std::string> files = toml_files_in(dir);
  if (files.empty())
    fail("systems catalogue directory '{}' has no *.toml files: point --catalog or "
         "AISCALE_SYSTEMS_DIR at data/systems", dir);
  for (const auto& e : extra)
    for (auto& f : toml_files_in(e)) files.push_back(f);

  toml::array accelerators, cpus, systems, access;
  std::map<std::string, std::vector<std::string>> system_files;
  for (const auto& file : files) {
    toml::table root;
    try {
      root = toml::parse_file(file);
    } catch (const toml::parse_error& e) {
      fail("{}:{}:{}: invalid TOML: {}", file, e.source().begin.line, e.source().begin.column,
           e.description());
    }
    std::string name = fs::path(file).filename().string();
    validate_catalog_file(root, name);
    if (auto* a = root["accelerator"].as_array()) merge_by_id(accelerators, *a);
    if (auto* c = root["cpu"].as_array()) merge_by_id(cpus, *c);
    if (auto* c = root["access"].as_array()) merge_by_id(access, *c);
    if (auto* s = root["system"].as_array()) {
      merge_by_id(systems, *s);
      for (auto& n : *s) system_files[*(*n.as_table())["id"].value<std::string>()].push_back(name);
    }
    cat.files.push_back(file);
  }

  for (auto& n : accelerators) cat.accelerators.push_back(to_accelerator(*n.as_table()));
  for (auto& n : cpus) cat.cpus.push_back(to_cpu(*n.as_table()));
  for (auto& n : access) cat.access.push_back(to_access(*n.as_table()));
  for (auto& a : cat.accelerators)
    if (!a.bandwidth_as.empty() && !cat.find_accelerator(a.bandwidth_as))
      fail("accelerator '{}': bandwidth_as = \"{}\" is not an accelerator in the catalogue",
           a.id, a.bandwidth_as);

  for (auto& n : systems) {
    const auto& t = *n.as_table();
    System s;
    s.id = get<std::string>(t, "id", "");
    s.name = get<std::string>(t, "name", s.id);
    s.aliases = get_strings(t, "aliases");
    s.site = get<std::string>(t, "site", "");
    s.status = get<std::string>(t, "status", "production");
    s.notes = get<std::string>(t, "notes", "");
    s.eurohpc = get<bool>(t, "eurohpc", false);
    s.sustained_pflops = get<double>(t, "sustained_pflops", 0.0);
    s.files = system_files[s.id];
    std::string where = fmt::format("system '{}' ({})", s.id, fmt::join(s.files, ", "));
    if (auto* parts = t["partition"].as_array())
      for (auto& pn : *parts) {
        Partition p = to_partition(*pn.as_table(), where);
        if (!p.accelerator_id.empty()) {
          const Accelerator* a = cat.find_accelerator(p.accelerator_id);
          if (!a)
            fail("{} partition '{}': accelerator '{}' is not in the catalogue: use one of {} "
                 "or add an [[accelerator]] entry", where, p.id, p.accelerator_id,
                 ids_of(cat.accelerators));
          p.accelerator = *a;
        } else if (p.kind == "gpu") {
          fail("{} partition '{}' is a GPU partition without an accelerator: add accelerator = "
               "\"<id from accelerators.toml>\"", where, p.id);
        }
        if (!p.cpu_model.empty()) {
          const CpuModel* c = cat.find_cpu(p.cpu_model);
          if (!c) {
            const std::string ids = ids_of(cat.cpus);
            fail("{} partition '{}': cpu_model '{}' is not in the catalogue: use one of {} or add "
                 "a [[cpu]] entry", where, p.id, p.cpu_model, ids.empty() ? "(none)" : ids);
          }
          // A CPU partition is planned when its CPU model, sockets and RAM are known.
          if (p.kind == "cpu" && p.sockets > 0 && p.ram_gib > 0) {
            p.accelerator = cpu_node(*c, p);
            p.gpus_per_node = 1;  // one rank per node, a thread per core
          }
        }
        s.partitions.push_back(std::move(p));
      }
    cat.systems.push_back(std::move(s));
  }
  return cat;
}

}  // namespace aiscale::plan
