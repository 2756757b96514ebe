#include "aiscale/parallel/launch_env.h"

#include <cstdlib>
#include <optional>

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
    return e;
  }
  return e;
}

LaunchEnv launch_env() {
  return launch_env_from([](const char* n) { return std::getenv(n); });
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
  fail("parallel.rendezvous = \"{}\" is not understood: use \"auto\", \"mpi\" or "
       "\"file:/shared/path\"", text);
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
