// Data-parallel ResNet training over 2 MPI ranks (aiscale launch): with synchronised batch
// norm, 2 ranks x 8 images take the same steps as 1 rank x 16 (the gradient all-reduce and
// the global batch statistics are exact up to rounding); without it, the run still learns.
#include <gtest/gtest.h>

#include <fstream>

#include "../support/run_support.h"

namespace aiscale {
namespace {

using namespace testsupport;

std::string config(const fs::path& dir, const std::string& name, int64_t batch, bool sync) {
  const fs::path path = dir / (name + ".toml");
  std::ofstream(path) << "[model]\nkind = \"resnet\"\npreset = \"resnet-small\"\nimage_size = 8\n"
                      << "[data]\nkind = \"synthetic\"\nsynthetic_images = 256\n"
                      << "synthetic_channels = 1\nsynthetic_classes = 4\n"
                      << "[train]\nbatch_size = " << batch << "\nsteps = 12\nlr = 0.8\n"
                      << "lr_scaling = \"none\"\nthreads = 1\nlog_every = 1\n"
                      << "[parallel]\nsync_batchnorm = " << (sync ? "true" : "false") << "\n"
                      << "[run]\ndir = \"" << dir.string() << "\"\nname = \"" << name << "\"\n";
  return path.string();
}

TEST(VisionDataParallel, TwoRanksWithSyncBatchNormMatchOneRankOfTheGlobalBatch) {
  const fs::path dir = temp_dir("vision-ddp");
  const RunOutput one = run_aiscale("train -q -c " + config(dir, "one", 16, true),
                                    "OMP_WAIT_POLICY=passive");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const RunOutput two = run_aiscale(
      "launch -n 2 --threads-per-rank 1 -- train -q -c " + config(dir, "two", 8, true),
      "OMP_WAIT_POLICY=passive");
  ASSERT_EQ(two.exit_code, 0) << two.output;
  const auto a = read_metrics(dir / "one"), b = read_metrics(dir / "two");
  ASSERT_GE(a.size(), 12u);
  ASSERT_GE(b.size(), 12u);
  for (size_t i = 0; i < 12; ++i) {
    EXPECT_NEAR(b[i]["loss"].get<double>(), a[i]["loss"].get<double>(),
                2e-3 * a[i]["loss"].get<double>())
        << "step " << i + 1;
  }
  const auto summary = nlohmann::json::parse(std::ifstream(dir / "two" / "summary.json"));
  EXPECT_EQ(summary["world_size"], 2);
  EXPECT_EQ(summary["global_batch"], 16);

  // Per-rank batch statistics: a different computation, still training.
  const RunOutput local = run_aiscale(
      "launch -n 2 --threads-per-rank 1 -- train -q -c " + config(dir, "local", 8, false),
      "OMP_WAIT_POLICY=passive");
  ASSERT_EQ(local.exit_code, 0) << local.output;
  const auto c = read_metrics(dir / "local");
  ASSERT_GE(c.size(), 12u);
  EXPECT_LT(c[11]["loss"].get<double>(), c[0]["loss"].get<double>());
}

}  // namespace
}  // namespace aiscale
