// `aiscale data pack-images` and `aiscale bench loader` through the binary: outputs, JSON
// records, and one clear error with a non-zero exit for bad input.
#include <filesystem>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../support/run_support.h"
#include "image_test_images.h"

namespace aiscale::data {
namespace {

namespace fs = std::filesystem;
using testsupport::run_aiscale;

std::vector<nlohmann::json> json_lines(const std::string& output) {
  std::vector<nlohmann::json> lines;
  std::istringstream in(output);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty() && line[0] == '{') lines.push_back(nlohmann::json::parse(line));
  return lines;
}

TEST(ImageCli, PackImagesThenBenchLoaderReadsTheStore) {
  const fs::path dir = testsupport::temp_dir("image-cli");
  test_images::write_folder(dir / "images", {{"ant", 6}, {"bee", 6}}, 48, 36);
  const std::string store = (dir / "store").string();
  auto r = run_aiscale("data pack-images --folder " + (dir / "images").string() + " -o " + store +
                       " --max-per-class 5");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("packed 10 images (2 classes, 3 channel(s), 36x48)"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(fs::path(store) / "data.mdb"));
  r = run_aiscale("bench loader --data " + store + " --crop 24 --batch 4 --batches 3 --warmup 1 --threads 1,2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto records = json_lines(r.output);
  ASSERT_EQ(records.size(), 2u) << r.output;
  EXPECT_EQ(records[0]["benchmark"], "loader");
  EXPECT_EQ(records[0]["threads"], 1);
  EXPECT_EQ(records[1]["threads"], 2);
  EXPECT_EQ(records[1]["records"], 10);
  EXPECT_GT(records[1]["images_per_s"].get<double>(), 0.0);
  EXPECT_EQ(records[1]["served"]["height"], 24);
  EXPECT_EQ(records[1]["roi_decode"], true);  // the default
  r = run_aiscale("bench loader --data " + store + " --crop 24 --batch 4 --batches 2 --warmup 0 "
                  "--threads 1 --roi-decode off");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_EQ(json_lines(r.output).size(), 1u) << r.output;
  EXPECT_EQ(json_lines(r.output)[0]["roi_decode"], false);
  r = run_aiscale("bench loader --data " + store + " --roi-decode maybe");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--roi-decode"), std::string::npos) << r.output;
  // Packing again over an existing store is refused and leaves it alone.
  r = run_aiscale("data pack-images --folder " + (dir / "images").string() + " -o " + store);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("already exists"), std::string::npos) << r.output;
  fs::remove_all(dir);
}

TEST(ImageCli, BenchLoaderPacksASyntheticSet) {
  const fs::path dir = testsupport::temp_dir("image-cli-synthetic");
  const auto r = run_aiscale("bench loader --synthetic 16 --size 64x48 --classes 4 --crop 32 --batch 4 "
                             "--batches 2 --warmup 0 --threads 2 --validation --layout nhwc "
                             "--gpu-images-per-s 100 --workdir " + dir.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto records = json_lines(r.output);
  ASSERT_EQ(records.size(), 1u) << r.output;
  EXPECT_EQ(records[0]["data"], "synthetic");
  EXPECT_EQ(records[0]["stored_size"]["width"], 64);
  EXPECT_EQ(records[0]["train"], false);
  EXPECT_TRUE(records[0].contains("ratio_to_gpu"));
  // The temporary store is gone.
  EXPECT_TRUE(fs::is_empty(dir)) << r.output;
  fs::remove_all(dir);
}

TEST(ImageCli, BadInputExitsWithOneClearError) {
  const fs::path dir = testsupport::temp_dir("image-cli-bad");
  auto r = run_aiscale("data pack-images --idx-images " + (dir / "none.gz").string() + " --idx-labels " +
                       (dir / "none2.gz").string() + " -o " + (dir / "out").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("does not exist"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("dataset-fashion-mnist"), std::string::npos) << r.output;
  r = run_aiscale("data pack-images -o " + (dir / "out").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("exactly one input"), std::string::npos) << r.output;
  r = run_aiscale("bench loader --data " + (dir / "nostore").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("does not exist"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "out"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace aiscale::data
