// Rank, world and node-local rank from the launchers' environments; rendezvous parsing.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "aiscale/core/error.h"
#include "aiscale/parallel/launch_env.h"

#include "../support/error_of.h"

using namespace aiscale;
using namespace aiscale::parallel;
using namespace aiscale::testsupport;

namespace {

struct FakeEnv {
  std::map<std::string, std::string> vars;
  EnvLookup lookup() const {
    return [this](const char* name) -> const char* {
      auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
  }
};

}  // namespace

TEST(LaunchEnv, NotLaunchedIsOneRank) {
  FakeEnv env;
  LaunchEnv e = launch_env_from(env.lookup());
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world, 1);
  EXPECT_EQ(e.local_rank, -1);
  EXPECT_EQ(e.source, "");
  EXPECT_FALSE(e.mpi_launcher());
}

TEST(LaunchEnv, OpenMpiWinsOverTheSlurmBatchStep) {
  // mpirun inside an allocation: the batch step's SLURM_* describe one task, not the job.
  FakeEnv env{{{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "8"},
               {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
               {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"SLURM_LOCALID", "0"}}};
  LaunchEnv e = launch_env_from(env.lookup());
  EXPECT_EQ(e.source, "openmpi");
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world, 4);
  EXPECT_TRUE(e.mpi_launcher());
}

TEST(LaunchEnv, SrunWithoutMpi) {
  FakeEnv env{{{"SLURM_PROCID", "6"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "2"}}};
  LaunchEnv e = launch_env_from(env.lookup());
  EXPECT_EQ(e.source, "slurm");
  EXPECT_EQ(e.rank, 6);
  EXPECT_EQ(e.world, 8);
  EXPECT_EQ(e.local_rank, 2);
  EXPECT_FALSE(e.mpi_launcher());
}

TEST(LaunchEnv, SrunWithPmixAndMpich) {
  FakeEnv pmix{{{"PMIX_RANK", "3"}, {"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "3"}}};
  LaunchEnv e = launch_env_from(pmix.lookup());
  EXPECT_EQ(e.source, "pmix");
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world, 4);
  EXPECT_EQ(e.local_rank, 3);
  EXPECT_TRUE(e.mpi_launcher());
  FakeEnv mpich{{{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "1"}}};
  e = launch_env_from(mpich.lookup());
  EXPECT_EQ(e.source, "mpich");
  EXPECT_EQ(e.local_rank, 1);
}

TEST(LaunchEnv, BadValuesAreNamed) {
  FakeEnv env{{{"SLURM_PROCID", "two"}, {"SLURM_NTASKS", "4"}}};
  std::string e = error_of([&] { launch_env_from(env.lookup()); });
  EXPECT_NE(e.find("SLURM_PROCID='two'"), std::string::npos) << e;
  FakeEnv outside{{{"SLURM_PROCID", "4"}, {"SLURM_NTASKS", "4"}}};
  e = error_of([&] { launch_env_from(outside.lookup()); });
  EXPECT_NE(e.find("0..size-1"), std::string::npos) << e;
}

TEST(Rendezvous, Parse) {
  EXPECT_EQ(parse_rendezvous("auto").kind, Rendezvous::Kind::automatic);
  EXPECT_EQ(parse_rendezvous("mpi").kind, Rendezvous::Kind::mpi);
  Rendezvous r = parse_rendezvous("file:/shared/rdv/job");
  EXPECT_EQ(r.kind, Rendezvous::Kind::file);
  EXPECT_EQ(r.path, "/shared/rdv/job");
  r = parse_rendezvous("tcp://node01:29500");
  EXPECT_EQ(r.kind, Rendezvous::Kind::tcp);
  EXPECT_EQ(r.host, "node01");
  EXPECT_EQ(r.port, 29500);
  r = parse_rendezvous("tcp://[fe80::1]:29501");
  EXPECT_EQ(r.host, "fe80::1");
  EXPECT_EQ(r.port, 29501);
  std::string e = error_of([] { parse_rendezvous("gloo://host:29500"); });
  EXPECT_NE(e.find("file:/shared/path"), std::string::npos) << e;
  EXPECT_NE(e.find("tcp://host:port"), std::string::npos) << e;
  for (const char* bad : {"tcp://node01", "tcp://node01:", "tcp://:29500", "tcp://node01:70000"}) {
    e = error_of([&] { parse_rendezvous(bad); });
    EXPECT_NE(e.find("names no host and port"), std::string::npos) << bad << ": " << e;
  }
  e = error_of([] { parse_rendezvous("file:"); });
  EXPECT_NE(e.find("names no file"), std::string::npos) << e;
  e = error_of([] { parse_rendezvous("file:/shared/"); });
  EXPECT_NE(e.find("names no file"), std::string::npos) << e;
}

TEST(Rendezvous, FileNameCarriesTheSlurmJobStep) {
  FakeEnv none;
  EXPECT_EQ(rendezvous_file_for_job("/s/rdv", none.lookup()), "/s/rdv");
  FakeEnv job{{{"SLURM_JOB_ID", "4242"}, {"SLURM_STEP_ID", "3"}}};
  EXPECT_EQ(rendezvous_file_for_job("/s/rdv", job.lookup()), "/s/rdv.4242.3");
  FakeEnv batch{{{"SLURM_JOB_ID", "4242"}}};
  EXPECT_EQ(rendezvous_file_for_job("/s/rdv", batch.lookup()), "/s/rdv.4242");
}

TEST(GpuSelection, LocalRankModuloVisibleGpus) {
  EXPECT_EQ(gpu_for_local_rank(0, 4), 0);
  EXPECT_EQ(gpu_for_local_rank(3, 4), 3);
  EXPECT_EQ(gpu_for_local_rank(5, 4), 1);   // more ranks than GPUs: shared, round robin
  EXPECT_EQ(gpu_for_local_rank(3, 1), 0);   // --gpus-per-task=1: each rank sees its own GPU as 0
  EXPECT_EQ(gpu_for_local_rank(-1, 8), 0);  // unknown local rank
  std::string e = error_of([] { gpu_for_local_rank(0, 0); });
  EXPECT_NE(e.find("sees no GPU"), std::string::npos) << e;
}

// torchrun and the Kubernetes operators: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT.
TEST(LaunchEnv, TorchrunStyleEnvironment) {
  FakeEnv env{{{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"},
               {"MASTER_ADDR", "node01"}, {"MASTER_PORT", "29500"}}};
  LaunchEnv e = launch_env_from(env.lookup());
  EXPECT_EQ(e.source, "env");
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world, 4);
  EXPECT_EQ(e.master_addr, "node01");
  EXPECT_EQ(e.master_port, 29500);
  EXPECT_FALSE(e.mpi_launcher());
  Rendezvous r = tcp_rendezvous_from(e);
  EXPECT_EQ(r.kind, Rendezvous::Kind::tcp);
  EXPECT_EQ(r.host, "node01");
  EXPECT_EQ(r.port, 29500);
  // RANK alone (some shells and tools set it) is not a launch.
  FakeEnv rank_only{{{"RANK", "3"}}};
  EXPECT_EQ(launch_env_from(rank_only.lookup()).source, "");
}

// The innermost launcher wins: torchrun started by srun (one task per node) or by mpirun
// leaves their variables, which describe torchrun's own process, not this worker.
TEST(LaunchEnv, TorchrunInsideSlurmOrMpirunWins) {
  FakeEnv env{{{"RANK", "6"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "2"},
               {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"},
               {"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}}};
  LaunchEnv e = launch_env_from(env.lookup());
  EXPECT_EQ(e.source, "env");
  EXPECT_EQ(e.rank, 6);
  EXPECT_EQ(e.world, 8);
  EXPECT_EQ(e.local_rank, 2);
  // Without RANK/WORLD_SIZE the order is as before: OpenMPI over Slurm.
  env.vars.erase("RANK");
  e = launch_env_from(env.lookup());
  EXPECT_EQ(e.source, "openmpi");
  EXPECT_EQ(e.rank, 1);
}

TEST(LaunchEnv, TorchrunStyleMistakesAreNamed) {
  FakeEnv no_master{{{"RANK", "1"}, {"WORLD_SIZE", "2"}}};
  LaunchEnv e = launch_env_from(no_master.lookup());
  std::string err = error_of([&] { tcp_rendezvous_from(e); });
  EXPECT_NE(err.find("without MASTER_ADDR"), std::string::npos) << err;
  EXPECT_NE(err.find("tcp://host:port"), std::string::npos) << err;
  no_master.vars["MASTER_ADDR"] = "node01";
  err = error_of([&] { tcp_rendezvous_from(launch_env_from(no_master.lookup())); });
  EXPECT_NE(err.find("without MASTER_PORT"), std::string::npos) << err;
  FakeEnv bad_port{{{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}}};
  err = error_of([&] { launch_env_from(bad_port.lookup()); });
  EXPECT_NE(err.find("MASTER_PORT=70000 is not a TCP port"), std::string::npos) << err;
  FakeEnv outside{{{"RANK", "2"}, {"WORLD_SIZE", "2"}}};
  err = error_of([&] { launch_env_from(outside.lookup()); });
  EXPECT_NE(err.find("RANK=2 and WORLD_SIZE=2"), std::string::npos) << err;
  FakeEnv local{{{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}}};
  err = error_of([&] { launch_env_from(local.lookup()); });
  EXPECT_NE(err.find("LOCAL_RANK=2 and LOCAL_WORLD_SIZE=2"), std::string::npos) << err;
}

// parallel.communicator = "mpi" on ranks launched torchrun-style without an MPI launcher
// names the launch and the fix ("auto" or "tcp").
TEST(LaunchEnv, MpiWithoutAnMpiLauncherIsRefused) {
  FakeEnv env{{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "n"}, {"MASTER_PORT", "1"}}};
  const LaunchEnv e = launch_env_from(env.lookup());
  std::string err = error_of([&] { require_mpi_launcher(e, env.lookup()); });
  EXPECT_NE(err.find("rank 0 of 2 through RANK/WORLD_SIZE"), std::string::npos) << err;
  EXPECT_NE(err.find("parallel.communicator = \"auto\" or \"tcp\""), std::string::npos) << err;
  EXPECT_NE(err.find("aiscale launch -n 2"), std::string::npos) << err;
  // mpirun underneath: MPI is there, nothing to refuse.
  env.vars["OMPI_COMM_WORLD_SIZE"] = "2";
  EXPECT_EQ(error_of([&] { require_mpi_launcher(e, env.lookup()); }), "");
  FakeEnv slurm{{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}};
  EXPECT_EQ(error_of([&] { require_mpi_launcher(launch_env_from(slurm.lookup()), slurm.lookup()); }), "");
}

// torchrun's agent serves a c10d store on MASTER_PORT when it says so
// (TORCHELASTIC_USE_AGENT_STORE=True: static rendezvous; c10d in recent PyTorch): aiscale's
// store then takes MASTER_PORT+1; AISCALE_STORE_PORT overrides both; keys carry the run id
// and the restart.
TEST(LaunchEnv, StorePortBesideTorchrunsOwnStore) {
  FakeEnv env{{{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "node01"}, {"MASTER_PORT", "29500"},
               {"TORCHELASTIC_USE_AGENT_STORE", "False"}, {"TORCHELASTIC_RUN_ID", "job7"},
               {"TORCHELASTIC_RESTART_COUNT", "0"}}};
  LaunchEnv e = launch_env_from(env.lookup());
  EXPECT_FALSE(e.agent_store);
  EXPECT_EQ(aiscale_store_port(e), 29500);
  EXPECT_EQ(tcp_rendezvous_from(e).port, 29500);
  EXPECT_EQ(store_key_prefix(e), "aiscale/job7/0/");
  env.vars["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  env.vars["TORCHELASTIC_RESTART_COUNT"] = "2";
  e = launch_env_from(env.lookup());
  EXPECT_TRUE(e.agent_store);
  Rendezvous r = tcp_rendezvous_from(e);
  EXPECT_EQ(r.host, "node01");
  EXPECT_EQ(r.port, 29501);
  EXPECT_NE(r.port_origin.find("MASTER_PORT+1"), std::string::npos) << r.port_origin;
  EXPECT_NE(r.port_origin.find("AISCALE_STORE_PORT"), std::string::npos) << r.port_origin;
  EXPECT_EQ(store_key_prefix(e), "aiscale/job7/2/");
  env.vars["AISCALE_STORE_PORT"] = "31000";
  e = launch_env_from(env.lookup());
  EXPECT_EQ(tcp_rendezvous_from(e).port, 31000);
  EXPECT_NE(tcp_rendezvous_from(e).port_origin.find("AISCALE_STORE_PORT=31000"), std::string::npos);
  env.vars["AISCALE_STORE_PORT"] = "0";
  std::string err = error_of([&] { launch_env_from(env.lookup()); });
  EXPECT_NE(err.find("AISCALE_STORE_PORT=0 is not a TCP port"), std::string::npos) << err;
  env.vars.erase("AISCALE_STORE_PORT");
  env.vars["MASTER_PORT"] = "65535";
  err = error_of([&] { aiscale_store_port(launch_env_from(env.lookup())); });
  EXPECT_NE(err.find("past 65535"), std::string::npos) << err;
  // Outside torchrun: no run id.
  FakeEnv plain{{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "n"}, {"MASTER_PORT", "29500"}}};
  EXPECT_EQ(store_key_prefix(launch_env_from(plain.lookup())), "aiscale/");
  // A restarted attempt's rendezvous file is its own.
  FakeEnv restarted{{{"TORCHELASTIC_RESTART_COUNT", "3"}}};
  EXPECT_EQ(rendezvous_file_for_job("/shared/rdv", restarted.lookup()), "/shared/rdv.restart3");
  FakeEnv first{{{"TORCHELASTIC_RESTART_COUNT", "0"}}};
  EXPECT_EQ(rendezvous_file_for_job("/shared/rdv", first.lookup()), "/shared/rdv");
}
