// aiscale tune's data: strict CSV parsing (errors naming line and column), IDX files,
// the synthetic regression and subsampling.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "../support/error_of.h"
#include "../support/run_support.h"
#include "aiscale/core/error.h"
#include "aiscale/tune/dataset.h"

using namespace aiscale;
using namespace aiscale::testsupport;

namespace {

std::string write_text(const fs::path& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir / name, std::ios::binary) << text;
  return (dir / name).string();
}

std::string csv_error(const std::string& text, const std::string& target = "y",
                      tune::TaskKind kind = tune::TaskKind::regression) {
  const fs::path dir = temp_dir("tune-csv");
  const std::string path = write_text(dir, "d.csv", text);
  try {
    tune::read_csv(path, target, kind);
  } catch (const Error& e) {
    fs::remove_all(dir);
    return e.what();
  }
  fs::remove_all(dir);
  return "(no error)";
}

TEST(TuneCsv, ReadsFeaturesAndTargetInAnyColumn) {
  const fs::path dir = temp_dir("tune-csv-ok");
  const std::string path = write_text(dir, "d.csv", "a, y ,b\r\n1,10,2\n3,20,4\n\n");
  const tune::Dataset d = tune::read_csv(path, "y", tune::TaskKind::regression);
  EXPECT_EQ(d.rows, 2);
  EXPECT_EQ(d.features, 2);
  EXPECT_EQ(d.feature_names, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(d.x, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(d.y, (std::vector<float>{10, 20}));
  fs::remove_all(dir);
}

TEST(TuneCsv, ClassLabelsMapToIndicesInIncreasingOrder) {
  const fs::path dir = temp_dir("tune-csv-class");
  const std::string path = write_text(dir, "d.csv", "x,label\n0,7\n1,-1\n2,7\n3,3\n");
  const tune::Dataset d = tune::read_csv(path, "label", tune::TaskKind::classification);
  EXPECT_EQ(d.classes, 3);
  EXPECT_EQ(d.y, (std::vector<float>{2, 0, 2, 1}));
  EXPECT_EQ(d.class_names, (std::vector<std::string>{"-1", "3", "7"}));
  fs::remove_all(dir);
}

TEST(TuneCsv, MissingValueNamesLineAndColumn) {
  const std::string e = csv_error("a,b,y\n1,2,3\n4,,6\n");
  EXPECT_NE(e.find("line 3, column 'b': missing value"), std::string::npos) << e;
  const std::string na = csv_error("a,b,y\n1,NA,3\n");
  EXPECT_NE(na.find("line 2, column 'b': missing value ('NA')"), std::string::npos) << na;
}

TEST(TuneCsv, NonNumericCellNamesLineAndColumn) {
  const std::string e = csv_error("a,b,y\n1,2,3\n4,5,6\nred,1,2\n");
  EXPECT_NE(e.find("line 4, column 'a': 'red' is not a number"), std::string::npos) << e;
  const std::string inf = csv_error("a,y\n1e999,3\n");
  EXPECT_NE(inf.find("line 2, column 'a'"), std::string::npos) << inf;
}

TEST(TuneCsv, MissingTargetColumnListsTheColumns) {
  const std::string e = csv_error("a,b,c\n1,2,3\n", "price");
  EXPECT_NE(e.find("no target column 'price': its columns are a, b, c"), std::string::npos) << e;
}

TEST(TuneCsv, RowWithWrongCellCountEmptyFileAndOneClass) {
  EXPECT_NE(csv_error("a,y\n1,2,3\n").find("line 2: 3 cells where the header has 2 columns"), std::string::npos);
  EXPECT_NE(csv_error("").find("is empty"), std::string::npos);
  EXPECT_NE(csv_error("a,y\n").find("no rows"), std::string::npos);
  EXPECT_NE(csv_error("a,y\n1,1\n2,1\n", "y", tune::TaskKind::classification).find("one class only"),
            std::string::npos);
  EXPECT_NE(csv_error("a,y\n").find("d.csv"), std::string::npos);
}

// Tiny IDX files: 3 images of 4x4 and their labels.
void write_idx(const fs::path& dir, uint32_t image_magic = 0x803) {
  auto be = [](std::ofstream& o, uint32_t v) {
    const char b[4] = {char(v >> 24), char(v >> 16), char(v >> 8), char(v)};
    o.write(b, 4);
  };
  std::ofstream img(dir / "img.idx", std::ios::binary), lab(dir / "lab.idx", std::ios::binary);
  be(img, image_magic);
  be(img, 3);
  be(img, 4);
  be(img, 4);
  for (int i = 0; i < 3 * 16; ++i) img.put(static_cast<char>(i % 16 == 0 ? 255 : 0));
  be(lab, 0x801);
  be(lab, 3);
  for (char l : {2, 0, 1}) lab.put(l);
}

TEST(TuneIdx, ReadsImagesScaledAndPooled) {
  const fs::path dir = temp_dir("tune-idx");
  write_idx(dir);
  const tune::Dataset d = tune::read_idx((dir / "img.idx").string(), (dir / "lab.idx").string());
  EXPECT_EQ(d.rows, 3);
  EXPECT_EQ(d.features, 16);
  EXPECT_EQ(d.classes, 3);
  EXPECT_FLOAT_EQ(d.x[0], 1.0f);
  EXPECT_FLOAT_EQ(d.x[1], 0.0f);
  EXPECT_EQ(d.y, (std::vector<float>{2, 0, 1}));
  const tune::Dataset p = tune::read_idx((dir / "img.idx").string(), (dir / "lab.idx").string(), 2);
  EXPECT_EQ(p.features, 4);
  EXPECT_FLOAT_EQ(p.x[0], 0.25f);  // one white pixel of four
  EXPECT_NE(error_of([&] { tune::read_idx((dir / "img.idx").string(), (dir / "lab.idx").string(), 3); })
                .find("does not divide"), std::string::npos);
  write_idx(dir, 0x801);  // a labels header on the images file: refused, naming the file
  const std::string e = error_of([&] { tune::read_idx((dir / "img.idx").string(), (dir / "lab.idx").string()); });
  EXPECT_NE(e.find((dir / "img.idx").string()), std::string::npos) << e;
  fs::remove_all(dir);
}

TEST(TuneIdx, ReadsDebiansFashionMnistWhenInstalled) {
  const std::string base = "/usr/share/datasets/fashion-mnist/";
  if (!fs::exists(base + "t10k-images-idx3-ubyte.gz")) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  const tune::Dataset d = tune::read_idx(base + "t10k-images-idx3-ubyte.gz", base + "t10k-labels-idx1-ubyte.gz");
  EXPECT_EQ(d.rows, 10000);
  EXPECT_EQ(d.features, 784);
  EXPECT_EQ(d.classes, 10);
}

TEST(TuneSynthetic, SeededAndFollowsTheFormula) {
  const tune::Dataset a = tune::synthetic_regression(1000, 0.0, 7), b = tune::synthetic_regression(1000, 0.0, 7);
  EXPECT_EQ(a.x, b.x);
  EXPECT_EQ(a.features, 6);
  EXPECT_NE(a.x, tune::synthetic_regression(1000, 0.0, 8).x);
  const float* x = a.x.data() + 6 * 5;
  const double expect = 3 * x[0] - 2 * x[1] + x[2] * x[3] + std::sin(std::acos(-1.0) * x[4]) + 0.5 * x[5] * x[5];
  EXPECT_NEAR(a.y[5], expect, 1e-5);
  for (float v : a.x) ASSERT_TRUE(v >= -1.0f && v <= 1.0f);
}

TEST(TuneSynthetic, SubsampleIsSeededAndKeepsRowsWhole) {
  const tune::Dataset d = tune::synthetic_regression(500, 0.1, 1);
  const tune::Dataset s = tune::subsample(d, 50, 3);
  EXPECT_EQ(s.rows, 50);
  EXPECT_EQ(s.x, tune::subsample(d, 50, 3).x);
  EXPECT_EQ(tune::subsample(d, 0, 3).rows, 500);
  // Each kept row is one of the original rows, target included.
  bool found = false;
  for (int64_t r = 0; r < d.rows && !found; ++r)
    found = d.x[r * 6] == s.x[0] && d.y[r] == s.y[0];
  EXPECT_TRUE(found);
}

}  // namespace
