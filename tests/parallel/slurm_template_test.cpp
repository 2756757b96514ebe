// configs/slurm/train_gpu.sbatch, run by bash with a stand-in `srun` that prints the
// command it was given: the srun options and the aiscale command line it builds.
#include <gtest/gtest.h>

#include <fstream>

#include "../support/run_helpers.h"

using namespace aiscale::testsupport;

namespace {

RunOutput run_template(const fs::path& dir, const std::string& env, const std::string& args) {
  fs::create_directories(dir / "bin");
  {
    std::ofstream srun(dir / "bin/srun");
    srun << "#!/bin/sh\nfor a in \"$@\"; do echo \"ARG $a\"; done\n";
  }
  fs::permissions(dir / "bin/srun", fs::perms::owner_all);
  const std::string script = std::string(AISCALE_SOURCE_DIR) + "/configs/slurm/train_gpu.sbatch";
  return run_command("env PATH=" + (dir / "bin").string() + ":$PATH HOME=" + dir.string() +
                     " SLURM_CPUS_PER_TASK=4 SLURM_JOB_NUM_NODES=2 SLURM_NTASKS_PER_NODE=4 "
                     "AISCALE=/opt/aiscale/bin/aiscale " + env + " bash " + script + " " + args);
}

}  // namespace

TEST(SlurmTemplate, SrunOneTaskPerGpuWithMpi) {
  auto dir = temp_dir("sbatch-mpi");
  auto r = run_template(dir, "", "my.toml --set train.steps=5");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* arg : {"ARG --kill-on-bad-exit=1", "ARG --mpi=pmix", "ARG --distribution=block:block",
                          "ARG --cpus-per-task=4", "ARG /opt/aiscale/bin/aiscale", "ARG train",
                          "ARG my.toml", "ARG train.device=cuda", "ARG parallel.communicator=nccl",
                          "ARG train.steps=5"})
    EXPECT_NE(r.output.find(std::string(arg) + "\n"), std::string::npos) << arg << "\n" << r.output;
  // The user's overrides come after the defaults, so they win.
  EXPECT_LT(r.output.find("ARG parallel.communicator=nccl"), r.output.find("ARG train.steps=5"));
  EXPECT_EQ(r.output.find("rendezvous"), std::string::npos) << r.output;
}

TEST(SlurmTemplate, WithoutMpiTheRanksMeetThroughAFile) {
  auto dir = temp_dir("sbatch-file");
  auto r = run_template(dir, "AISCALE_SRUN_MPI=none AISCALE_RDV_DIR=" + (dir / "rdv").string(), "my.toml");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ARG --mpi=none\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("ARG parallel.rendezvous=file:" + (dir / "rdv").string() + "/ddp\n"),
            std::string::npos) << r.output;
  EXPECT_TRUE(fs::is_directory(dir / "rdv"));
  r = run_template(dir, "", "");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("usage"), std::string::npos) << r.output;
}
