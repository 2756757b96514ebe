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
  std::string e = error_of([] { parse_rendezvous("tcp://host:29500"); });
  EXPECT_NE(e.find("file:/shared/path"), std::string::npos) << e;
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
