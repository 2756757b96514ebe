// IDX reading: Fashion-MNIST from Debian's package, gzip'd and plain files, bad input.
#include <zlib.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "aiscale/data/images/idx.h"
#include "../support/error_of.h"
#include "../support/run_support.h"

namespace aiscale::data {
namespace {

using testsupport::error_of;
namespace fs = std::filesystem;

std::string idx_bytes(const std::vector<uint32_t>& dims, const std::vector<uint8_t>& values,
                      uint8_t type = 0x08) {
  std::string s = {0, 0, static_cast<char>(type), static_cast<char>(dims.size())};
  for (uint32_t d : dims)
    for (int shift = 24; shift >= 0; shift -= 8) s.push_back(static_cast<char>((d >> shift) & 0xff));
  s.append(values.begin(), values.end());
  return s;
}

void write_plain(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

void write_gzip(const fs::path& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  gzclose(f);
}

TEST(ImageIdx, ReadsPlainAndGzipFiles) {
  const fs::path dir = testsupport::temp_dir("idx-read");
  std::vector<uint8_t> pixels(3 * 2 * 4);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i * 7);
  write_gzip(dir / "images.gz", idx_bytes({3, 2, 4}, pixels));
  write_plain(dir / "labels", idx_bytes({3}, {2, 0, 1}));
  const ImageArray set = read_idx_image_set((dir / "images.gz").string(), (dir / "labels").string());
  EXPECT_EQ(set.count, 3);
  EXPECT_EQ(set.height, 2);
  EXPECT_EQ(set.width, 4);
  EXPECT_EQ(set.channels, 1);
  EXPECT_EQ(set.pixels, pixels);
  EXPECT_EQ(set.labels, (std::vector<int32_t>{2, 0, 1}));
  fs::remove_all(dir);
}

TEST(ImageIdx, BadFilesNameTheFileAndTheFix) {
  const fs::path dir = testsupport::temp_dir("idx-bad");
  EXPECT_NE(error_of([&] { read_idx((dir / "missing.gz").string()); }).find("does not exist"),
            std::string::npos);
  write_plain(dir / "text", "hello, not idx");
  EXPECT_NE(error_of([&] { read_idx((dir / "text").string()); }).find("is not an IDX file"),
            std::string::npos);
  write_plain(dir / "floats", idx_bytes({1}, {0, 0, 0, 0}, 0x0D));
  EXPECT_NE(error_of([&] { read_idx((dir / "floats").string()); }).find("type 0x0d"), std::string::npos);
  write_gzip(dir / "short.gz", idx_bytes({5, 2, 2}, std::vector<uint8_t>(7)));
  EXPECT_NE(error_of([&] { read_idx((dir / "short.gz").string()); }).find("truncated"),
            std::string::npos);
  // Dimensions whose product wraps past 2^64 to 0: refused as corrupt, not read as empty.
  write_plain(dir / "wraps", idx_bytes({1u << 20, 1u << 20, 1u << 24}, {1, 2, 3}));
  const std::string wraps = error_of([&] { read_idx((dir / "wraps").string()); });
  EXPECT_NE(wraps.find("implausible size"), std::string::npos) << wraps;
  EXPECT_NE(wraps.find("wraps"), std::string::npos) << wraps;
  // Counts that disagree, and the two files swapped.
  write_plain(dir / "images", idx_bytes({4, 1, 1}, {1, 2, 3, 4}));
  write_plain(dir / "labels", idx_bytes({3}, {0, 1, 2}));
  const std::string disagree =
      error_of([&] { read_idx_image_set((dir / "images").string(), (dir / "labels").string()); });
  EXPECT_NE(disagree.find("4 images"), std::string::npos) << disagree;
  EXPECT_NE(disagree.find("3 labels"), std::string::npos) << disagree;
  EXPECT_NE(error_of([&] { read_idx_image_set((dir / "labels").string(), (dir / "images").string()); })
                .find("is it a labels file"),
            std::string::npos);
  fs::remove_all(dir);
}

TEST(ImageIdx, ReadsFashionMnistFromTheDebianPackage) {
  const fs::path dir = kFashionMnistDir;
  if (!fs::exists(dir / "t10k-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist is not installed (scripts/setup.sh installs it)";
  const ImageArray test = read_idx_image_set((dir / "t10k-images-idx3-ubyte.gz").string(),
                                             (dir / "t10k-labels-idx1-ubyte.gz").string());
  EXPECT_EQ(test.count, 10000);
  EXPECT_EQ(test.height, 28);
  EXPECT_EQ(test.width, 28);
  std::vector<int64_t> per_class(10, 0);
  for (int32_t label : test.labels) {
    ASSERT_GE(label, 0);
    ASSERT_LT(label, 10);
    ++per_class[label];
  }
  for (int64_t n : per_class) EXPECT_EQ(n, 1000);  // the test split is balanced
  EXPECT_EQ(fashion_mnist_class_names().size(), 10u);
}

}  // namespace
}  // namespace aiscale::data
