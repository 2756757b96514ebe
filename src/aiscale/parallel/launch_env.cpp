#include "aiscale/parallel/launch_env.h"

#include <cstdlib>
#include <optional>

#include <fmt/format.h>

#include "aiscale/core/env.h"
#include "aiscale/core/error.h"

namespace aiscale::parallel {
namespace {

// A non-negative integer variable, nullopt when unset; Error when set to anything else.
std::optional<int> int_var(const EnvLookup& getenv, const char* name) {
  const char* v = getenv(name);
  if (!v || !*v) return std::nullopt;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < 0 || x > (1L << 30))
    fail("environment variable {}='{}' is not a rank count or index: check the launcher's "
         "environment (unset it when not launching several ranks)", name, v);
  return static_cast<int>(x);
}

}  // namespace

LaunchEnv launch_env_from(const EnvLookup& getenv) {
  LaunchEnv e;
  struct Scheme {
    const char* source;
    const char* rank;
    const char* world;
    const char* local_rank;
    const char* local_world;
  };
  // PMIx alone gives no world size in a variable: srun --mpi=pmix sets SLURM_NTASKS beside it.
  const Scheme schemes[] = {
      {"env", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
      {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
       "OMPI_COMM_WORLD_LOCAL_SIZE"},
      {"mpich", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
      {"pmix", "PMIX_RANK", "SLURM_NTASKS", "SLURM_LOCALID", nullptr},
      {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr},
  };
  for (const Scheme& s : schemes) {
    auto rank = int_var(getenv, s.rank);
    auto world = int_var(getenv, s.world);
    if (!rank || !world) continue;
    if (*world < 1 || *rank >= *world)
      fail("{}={} and {}={} do not describe a rank of a job: the rank must lie in 0..size-1",
           s.rank, *rank, s.world, *world);
    e.source = s.source;
    e.rank = *rank;
    e.world = *world;
    if (auto lr = int_var(getenv, s.local_rank)) e.local_rank = *lr;
    if (s.local_world)
      if (auto lw = int_var(getenv, s.local_world)) e.local_world = *lw;
    if (e.local_rank >= 0 && e.local_world > 0 && e.local_rank >= e.local_world)
      fail("{}={} and {}={} do not describe a rank of a node: the local rank must lie in "
           "0..local size-1", s.local_rank, e.local_rank, s.local_world, e.local_world);
    if (const char* addr = getenv("MASTER_ADDR"); addr && *addr) e.master_addr = addr;
    if (auto port = int_var(getenv, "MASTER_PORT")) {
      if (*port < 1 || *port > 65535)
        fail("MASTER_PORT={} is not a TCP port: use a free port in 1..65535 on rank 0's host "
             "(e.g. 29500)", *port);
      e.master_port = *port;
    }
    // torchrun sets these in every worker's environment (torch 1.9 and later).
    if (const char* v = getenv("TORCHELASTIC_USE_AGENT_STORE"); v && *v)
      e.agent_store = std::string(v) == "True" || std::string(v) == "true" || std::string(v) == "1";
    if (const char* v = getenv("TORCHELASTIC_RUN_ID"); v && *v) e.run_id = v;
    if (auto n = int_var(getenv, "TORCHELASTIC_RESTART_COUNT")) e.restart_count = *n;
    (void)env::variable("AISCALE_STORE_PORT");  // registered in core/env.cpp
    if (auto port = int_var(getenv, "AISCALE_STORE_PORT")) {
      if (*port < 1 || *port > 65535)
        fail("AISCALE_STORE_PORT={} is not a TCP port: use a free port in 1..65535 on rank 0's "
             "host, the same on every rank (or unset it: MASTER_PORT, or MASTER_PORT+1 under "
             "torchrun)", *port);
      e.store_port_override = *port;
    }
    return e;
  }
  return e;
}

LaunchEnv launch_env() {
  return launch_env_from([](const char* n) { return std::getenv(n); });
}

bool mpi_launched(const EnvLookup& getenv) {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (const char* v = getenv(var); v && *v) return true;
  return false;
}

void require_mpi_launcher(const LaunchEnv& env, const EnvLookup& getenv) {
  if (env.source != "env" || env.world <= 1 || mpi_launched(getenv)) return;
  fail("parallel.communicator = \"mpi\", but this process was started as rank {} of {} through "
       "RANK/WORLD_SIZE (torchrun-style) without an MPI launcher: set parallel.communicator = "
       "\"auto\" or \"tcp\" (CPU ranks then talk TCP, meeting through the store at MASTER_ADDR), "
       "or start the ranks with `aiscale launch -n {}`, mpirun or srun --mpi=pmix",
       env.rank, env.world, env.world);
}

namespace {

// "host:port" (an IPv6 host in brackets: "[::1]:29500").
bool split_host_port(const std::string& text, std::string& host, int& port) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) return false;
  host = text.substr(0, colon);
  if (host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string digits = text.substr(colon + 1);
  char* end = nullptr;
  long p = std::strtol(digits.c_str(), &end, 10);
  if (*end != '\0' || p < 1 || p > 65535 || host.empty()) return false;
  port = static_cast<int>(p);
  return true;
}

}  // namespace

int aiscale_store_port(const LaunchEnv& env) {
  if (env.store_port_override > 0) return env.store_port_override;
  if (!env.agent_store) return env.master_port;
  if (env.master_port >= 65535)
    fail("MASTER_PORT={}: torchrun's agent serves its store there, so aiscale's store would take "
         "the next port, past 65535: choose a lower --master-port, or set AISCALE_STORE_PORT to a "
         "free port on rank 0's host (the same on every rank)", env.master_port);
  return env.master_port + 1;
}

Rendezvous tcp_rendezvous_from(const LaunchEnv& env) {
  if (env.master_addr.empty() || env.master_port < 0)
    fail("rank {} of {} was started with RANK/WORLD_SIZE but without {}: set MASTER_ADDR to rank "
         "0's host and MASTER_PORT to a free port on it (torchrun and the Kubernetes operators "
         "set both), or set parallel.rendezvous = \"tcp://host:port\"", env.rank, env.world,
         env.master_addr.empty() ? "MASTER_ADDR" : "MASTER_PORT");
  Rendezvous r;
  r.kind = Rendezvous::Kind::tcp;
  r.host = env.master_addr;
  r.port = aiscale_store_port(env);
  if (env.store_port_override > 0)
    r.port_origin = fmt::format("AISCALE_STORE_PORT={}: set it to another free port (the same on "
                                "every rank)", r.port);
  else if (env.agent_store)
    r.port_origin = fmt::format("MASTER_PORT+1 (torchrun's agent serves its own store on "
                                "MASTER_PORT={}): choose another --master-port, or set "
                                "AISCALE_STORE_PORT to a free port (the same on every rank)",
                                env.master_port);
  else
    r.port_origin = fmt::format("MASTER_PORT={}: choose another MASTER_PORT, or set "
                                "AISCALE_STORE_PORT to a free port (the same on every rank)",
                                env.master_port);
  return r;
}

std::string store_key_prefix(const LaunchEnv& env) {
  if (env.run_id.empty()) return "aiscale/";
  return "aiscale/" + env.run_id + "/" + std::to_string(env.restart_count) + "/";
}

Rendezvous parse_rendezvous(const std::string& text) {
  Rendezvous r;
  if (text == "auto") return r;
  if (text == "mpi") {
    r.kind = Rendezvous::Kind::mpi;
    return r;
  }
  if (text.rfind("file:", 0) == 0) {
    r.kind = Rendezvous::Kind::file;
    r.path = text.substr(5);
    if (r.path.empty() || r.path.back() == '/')
      fail("parallel.rendezvous = \"{}\" names no file: write file:/shared/folder/name, a file "
           "path every rank can read (a filesystem all nodes share)", text);
    return r;
  }
  if (text.rfind("tcp://", 0) == 0) {
    r.kind = Rendezvous::Kind::tcp;
    if (!split_host_port(text.substr(6), r.host, r.port))
      fail("parallel.rendezvous = \"{}\" names no host and port: write tcp://host:port, rank "
           "0's host name or address and a free port on it (e.g. tcp://node01:29500)", text);
    return r;
  }
  fail("parallel.rendezvous = \"{}\" is not understood: use \"auto\", \"mpi\", "
       "\"file:/shared/path\" or \"tcp://host:port\"", text);
}

std::string rendezvous_file_for_job(const std::string& path, const EnvLookup& getenv) {
  std::string out = path;
  const char* job = getenv("SLURM_JOB_ID");
  if (job && *job) {
    out += ".";
    out += job;
    const char* step = getenv("SLURM_STEP_ID");
    if (step && *step) {
      out += ".";
      out += step;
    }
  }
  // torchrun restarts its workers in place: a new attempt must not read the old one's file.
  const char* restart = getenv("TORCHELASTIC_RESTART_COUNT");
  if (restart && *restart && std::string(restart) != "0") {
    out += ".restart";
    out += restart;
  }
  return out;
}

int gpu_for_local_rank(int local_rank, int visible_gpus) {
  if (visible_gpus < 1)
    fail("this rank sees no GPU (CUDA_VISIBLE_DEVICES='{}'): give each rank a GPU (Slurm: "
         "--gpus-per-task=1 or --gres=gpu:N; mpirun: run on GPU nodes)",
         std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : "");
  return local_rank < 0 ? 0 : local_rank % visible_gpus;
}

}  // namespace aiscale::parallel
