// The systems catalogue: machines, their partitions and accelerators, read from TOML
// files (data/systems/*.toml by default). Later files add systems or override single
// keys of earlier ones (partitions and accelerators merge by id).
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "aiscale/plan/access.h"
#include "aiscale/plan/accelerator.h"

namespace aiscale::plan {

enum class Topology { none, fat_tree, dragonfly, dragonfly_plus };
Topology parse_topology(std::string_view text);  // "fat-tree", "dragonfly", "dragonfly+"
std::string_view to_string(Topology t);

// Links inside a node, per GPU and per direction.
struct IntraNode {
  std::string link;            // "NVLink 3", "PCIe 4.0 x16", "Infinity Fabric"
  double gbytes_per_s = 0;     // 0: unknown
  bool assumed = false;        // not stated by the site for this system
  std::string note;
};

// The node's connection to the other nodes.
struct Network {
  std::string kind;            // "InfiniBand HDR"
  int links = 0;               // adapters (ports) per node
  double gbps_per_link = 0;    // Gbit/s per link
  Topology topology = Topology::none;
  int group_nodes = 0;         // Dragonfly(+) group size when known; 0: unknown
  int shared_by_nodes = 1;     // one link serving several nodes
  // Dragonfly(+): the bandwidth of a group's global (inter-group) links over its nodes'
  // injection bandwidth, one direction; 0: not in the catalogue (TopologyAssumptions).
  double global_taper = 0;
  std::string global_source;   // where the taper comes from
  bool known() const { return links > 0 && gbps_per_link > 0; }
  // Injection bandwidth of one node, bytes/s.
  double node_bytes_per_s() const {
    return links * gbps_per_link * 1e9 / 8.0 / (shared_by_nodes > 0 ? shared_by_nodes : 1);
  }
};

// A CPU model (data/systems/cpus.toml): what a CPU partition's node peak and memory
// bandwidth are computed from.
struct CpuModel {
  std::string id;                   // "EPYC-7763"
  std::string vendor, name;
  int cores = 0;                    // per socket
  double ghz = 0;                   // base clock
  double fp32_flops_per_cycle = 0;  // per core (FMA = 2 FLOPs × lanes × pipes)
  double fp64_flops_per_cycle = 0;
  double memory_bandwidth_gbs = 0;  // per socket, DRAM datasheet (channels × rate × 8 B)
  // Substrings of the CPU name that `aiscale bench` reports ("device", from /proc/cpuinfo)
  // for this model: how calibration finds the CPU of a measured result.
  std::vector<std::string> device_names;
  std::string source;
};

// How a partition is used through Slurm ([system.partition.slurm] in the catalogue): what
// `aiscale slurm script` writes for it. Each site's documented convention, see docs/guide/slurm.md.
struct SlurmPreset {
  std::string partition;        // Slurm partition name; "" where the QOS selects the nodes
  std::string qos;              // QOS to request by default; "" none
  std::string gpu_request = "gpus-per-node";  // "gpus-per-node" | "gres" | "none"
  std::string gres_name = "gpu";              // --gres=<gres_name>:<GPUs per node>
  int cores_per_gpu = 0;        // --cpus-per-task of a rank that drives one GPU; 0: unknown
  std::string cpu_bind;         // srun --cpu-bind ("cores", "mask_cpu:..."); "": Slurm's default
  std::string gpu_bind;         // srun --gpu-bind ("closest"); "": none
  bool exclusive = true;        // whole nodes (--exclusive)
  std::string max_time;         // the partition's wall-time limit ("2-00:00:00"); "": unknown
  std::string srun_mpi = "pmix";  // srun --mpi plugin
  std::string launcher = "srun";  // "srun" (one task per rank) or "mpirun" (inside the job)
  bool account_required = false;  // sbatch refuses jobs without --account
  std::vector<std::string> prelude;  // shell lines before the launch (module loads, ...)
  std::vector<std::string> env;      // NAME=value exported before the launch
  std::string container_exec;   // how a container runs a command ("apptainer exec --nv")
  std::string source;           // where the site documents these conventions
};

// The shared filesystem a partition reads its training data from.
struct Storage {
  std::string kind;            // "Lustre (LUMI-P)"
  double gbytes_per_s = 0;     // aggregate read bandwidth, GB/s; 0: not in the catalogue
  std::string source;
};

struct Partition {
  std::string id;              // "booster"
  std::string name;            // "Leonardo Booster"
  std::string kind;            // "gpu", "cpu", "ipu"
  int nodes = 0;               // 0: not in the catalogue
  int gpus_per_node = 0;       // 0: not in the catalogue (planned as one GPU)
  std::string accelerator_id;
  Accelerator accelerator;     // resolved from accelerator_id (gpu partitions)
  std::string cpu;
  double ram_gib = 0;
  std::string local_ssd, interface, launched, notes;
  IntraNode intra;
  Network network;
  Storage storage;
  // CPU partitions: the CPU model (an id in cpus.toml), sockets per node and, where the
  // site runs them slower than the datasheet, the clock in GHz. When the model resolves,
  // `accelerator` describes one whole node (Accelerator::cpu_node) and gpus_per_node is 1:
  // the planner runs one rank per node with a thread per core.
  std::string cpu_model;
  int sockets = 0;
  double cpu_ghz = 0;          // 0: the model's base clock
  bool has_slurm = false;      // [system.partition.slurm] present
  SlurmPreset slurm;

  bool is_gpu() const { return kind == "gpu"; }
  bool is_cpu() const { return kind == "cpu"; }
  // GPU partitions with an accelerator, and CPU partitions whose CPU model, sockets and
  // RAM are in the catalogue, can be planned; others are listed only.
  bool plannable() const { return (is_gpu() || is_cpu()) && !accelerator.id.empty(); }
  // Largest GPU count the catalogue allows (1 where the node layout is unknown).
  long max_gpus() const;
};

struct System {
  std::string id, name, site, status = "production", notes;
  std::vector<std::string> aliases;  // other names `--system` accepts ("mn5")
  bool eurohpc = false;
  double sustained_pflops = 0;
  std::vector<Partition> partitions;
  std::vector<std::string> files;  // where its keys came from, in order
};

// A partition with its system, as the planner ranks them.
struct Target {
  const System* system = nullptr;
  const Partition* partition = nullptr;
  std::string label() const;  // "leonardo/booster"
};

struct Catalog {
  std::vector<AccessCall> access;  // [[access]]: EuroHPC access calls (access.toml)
  std::vector<Accelerator> accelerators;
  std::vector<CpuModel> cpus;
  std::vector<System> systems;
  std::vector<std::string> files;  // every file read, in order

  const Accelerator* find_accelerator(std::string_view id) const;
  const System* find_system(std::string_view id) const;
  const CpuModel* find_cpu(std::string_view id) const;
  // Memory bandwidth of an accelerator in TB/s: its own datasheet figure, or that of the
  // entry its bandwidth_as names; 0 where neither is known. `source`, if given, says which.
  double memory_bandwidth_tbs(const Accelerator& acc, std::string* source = nullptr) const;
  // "leonardo" (all its GPU partitions), "leonardo/booster" or "leonardo/dcgp" (any
  // plannable partition, CPU ones too), or a partition id that is unique across systems.
  // Throws Error listing the known names.
  std::vector<Target> resolve(std::string_view name) const;
  // Every plannable GPU partition.
  std::vector<Target> gpu_targets() const;
};

// Where the built-in catalogue lives: $AISCALE_SYSTEMS_DIR, else the installed copy
// (<prefix>/share/aiscale/data/systems), else the source tree's data/systems (core/paths.h).
std::string default_catalog_dir();

// Reads every *.toml in `dir` (sorted by name), then each of `extra` (a file, or a
// directory of *.toml), later ones overriding earlier ones. Throws Error naming the
// file and key for a malformed entry.
Catalog load_catalog(const std::string& dir, const std::vector<std::string>& extra = {});

}  // namespace aiscale::plan
