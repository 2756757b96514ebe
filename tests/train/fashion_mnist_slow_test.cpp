// The small ResNet trained on Fashion-MNIST (Debian's dataset-fashion-mnist, read from its
// IDX files) on the CPU, 2 ranks x 1 thread: at least 90 % test top-1. Labelled slow (a few
// minutes); vision_train_test.cpp covers the same path on synthetic images in seconds.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>

#include "../support/run_support.h"

namespace aiscale {
namespace {

using namespace testsupport;

TEST(FashionMnist, SmallResNetReaches90PercentTestAccuracy) {
  const std::string data = "/usr/share/datasets/fashion-mnist";
  if (!fs::exists(data + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "no " << data << ": install Debian's dataset-fashion-mnist (scripts/setup.sh)";
  const fs::path dir = temp_dir("fashion-mnist");
  // The repository's config with one block per stage and a stride-2 stem (a quarter of
  // stage 1's work), three epochs, images as stored (no augmentation).
  const std::string args =
      "launch -n 2 --threads-per-rank 1 -- train -q -c " + std::string(AISCALE_SOURCE_DIR) +
      "/configs/fashion-mnist-resnet.toml --set model.blocks_per_stage=1 --set model.stem_stride=2 "
      "--set train.epochs=3 --set data.augment=none --set run.checkpoint_every=0 "
      "--set run.dir=" + dir.string() + " --set run.name=fmnist";
  const auto start = std::chrono::steady_clock::now();
  const RunOutput r = run_aiscale(args, "OMP_WAIT_POLICY=passive");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto summary = nlohmann::json::parse(std::ifstream(dir / "fmnist" / "summary.json"));
  std::printf("Fashion-MNIST: test top-1 %.2f%%, top-5 %.2f%% on %lld images in %.0f s\n",
              100 * summary["val_top1"].get<double>(), 100 * summary["val_top5"].get<double>(),
              static_cast<long long>(summary["val_images"].get<int64_t>()), seconds);
  EXPECT_GE(summary["val_top1"].get<double>(), 0.90);
  EXPECT_GE(summary["val_images"].get<int64_t>(), 9984);  // the test set less the ragged end
}

}  // namespace
}  // namespace aiscale
