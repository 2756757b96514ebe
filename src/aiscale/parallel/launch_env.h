// Who am I in the job: rank, world size and node-local rank as the launcher announced
// them in the environment (torchrun-style RANK/WORLD_SIZE, OpenMPI, MPICH/Hydra, PMIx,
// Slurm), and the parsing of parallel.rendezvous. Pure functions of the environment,
// unit-tested without MPI.
#pragma once
#include <functional>
#include <string>

namespace aiscale::parallel {

struct LaunchEnv {
  int rank = 0;
  int world = 1;
  int local_rank = -1;   // rank among this node's ranks; -1 when the launcher did not say
  int local_world = -1;  // ranks on this node; -1 when unknown
  std::string source;    // "env", "openmpi", "mpich", "pmix", "slurm" or "" (not launched)
  // The rendezvous server of the torchrun convention (MASTER_ADDR, MASTER_PORT): rank 0's
  // host and a free port on it; "" and -1 when unset.
  std::string master_addr;
  int master_port = -1;
  // torchrun's elastic agent (torch.distributed.run): whether it serves a c10d TCP store of
  // its own on MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True: static rendezvous, and c10d
  // rendezvous in recent PyTorch), the job's run id and how often it restarted the workers.
  bool agent_store = false;
  std::string run_id;      // TORCHELASTIC_RUN_ID; "" outside torchrun
  int restart_count = 0;   // TORCHELASTIC_RESTART_COUNT
  int store_port_override = -1;  // AISCALE_STORE_PORT; -1 when unset
  bool mpi_launcher() const { return source == "openmpi" || source == "mpich" || source == "pmix"; }
};

using EnvLookup = std::function<const char*(const char*)>;

// Reads, in this order (the first launcher found wins: the innermost launcher comes
// first, since a process inherits the variables of the launchers that started its
// launcher: torchrun or mpirun inside a Slurm allocation leave SLURM_* in place):
//   env (torchrun, Kubernetes operators): RANK/WORLD_SIZE/LOCAL_RANK/LOCAL_WORLD_SIZE,
//     with MASTER_ADDR/MASTER_PORT; RANK and WORLD_SIZE must both be set
//   OpenMPI: OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE
//   MPICH/Hydra: PMI_RANK/PMI_SIZE, MPI_LOCALRANKID/MPI_LOCALNRANKS
//   PMIx (srun --mpi=pmix): PMIX_RANK with SLURM_NTASKS/SLURM_LOCALID for the rest
//   Slurm: SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID (srun without MPI)
// Throws Error for values that are not numbers or a rank outside 0..world-1.
LaunchEnv launch_env_from(const EnvLookup& getenv);
LaunchEnv launch_env();  // from the process environment

// Whether an MPI launcher (mpirun, mpiexec, srun --mpi=...) started this process, whatever
// launch_env chose: its rank variables are set.
bool mpi_launched(const EnvLookup& getenv);
// Fails, naming the fix, when the ranks were launched torchrun-style (RANK/WORLD_SIZE)
// without an MPI launcher but MPI was asked for (parallel.communicator = "mpi"): such
// ranks talk TCP ("auto" or "tcp").
void require_mpi_launcher(const LaunchEnv& env, const EnvLookup& getenv);

// parallel.rendezvous: "auto", "mpi", "file:/path" or "tcp://host:port".
struct Rendezvous {
  enum class Kind { automatic, mpi, file, tcp } kind = Kind::automatic;
  std::string path;  // for file
  std::string host;  // for tcp: rank 0's host (its store server listens on `port`)
  int port = 0;
  // Where the port comes from and how to choose another, for the message of a port that
  // rank 0 cannot bind ("" for parallel.rendezvous = "tcp://host:port").
  std::string port_origin;
};
// Throws Error naming the value and the allowed forms.
Rendezvous parse_rendezvous(const std::string& text);

// The port of aiscale's own TCP store in a torchrun-style launch: AISCALE_STORE_PORT when
// set, else MASTER_PORT + 1 when torchrun's agent already serves its store on MASTER_PORT
// (agent_store), else MASTER_PORT. Throws Error naming the variables when the port would
// lie past 65535.
int aiscale_store_port(const LaunchEnv& env);

// The TCP store address of a torchrun-style launch: MASTER_ADDR and aiscale_store_port.
// Throws Error naming the missing variable and the fix when either is unset.
Rendezvous tcp_rendezvous_from(const LaunchEnv& env);

// The prefix of every key aiscale sets in a job's store: "aiscale/" and, under torchrun,
// "<TORCHELASTIC_RUN_ID>/<TORCHELASTIC_RESTART_COUNT>/", so that the workers of a restart
// never read what an earlier attempt of the job left in a store that outlived it.
std::string store_key_prefix(const LaunchEnv& env);

// The rendezvous file of this job step: the configured path, with ".<SLURM_JOB_ID>.<SLURM_STEP_ID>"
// appended when Slurm gives them (and ".restart<N>" under torchrun after a restart), so that
// jobs sharing one configured path (and a file left by a killed job) do not meet each other.
std::string rendezvous_file_for_job(const std::string& path, const EnvLookup& getenv);

// The GPU of a rank: its node-local rank modulo the GPUs it can see (with Slurm's
// --gpus-per-task=1 or CUDA_VISIBLE_DEVICES set per rank it sees one: device 0).
// Throws Error when no GPU is visible.
int gpu_for_local_rank(int local_rank, int visible_gpus);

}  // namespace aiscale::parallel
