// The validation layer: non-finite numbers, ranges read as a person writes them, counts
// bounded before they reach OpenMP or an allocator, inputs that must be regular files.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include "aiscale/core/validate.h"
#include "../support/error_of.h"

using namespace aiscale;
using aiscale::testsupport::error_of;

TEST(Validate, NonFiniteIsRefusedBeforeAnyRange) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  std::string e = error_of([&] { validate::in_range(nan, 0.0, 10.0, "config key 'train.lr'"); });
  EXPECT_NE(e.find("train.lr"), std::string::npos) << e;
  EXPECT_NE(e.find("not a finite number"), std::string::npos) << e;
  e = error_of([&] { validate::in_range(inf, 1.0, std::numeric_limits<double>::max(), "--timeout"); });
  EXPECT_NE(e.find("--timeout"), std::string::npos) << e;
  EXPECT_EQ(validate::in_range(2.5, 0.0, 10.0, "x"), 2.5);
}

TEST(Validate, RangesReadAsAPersonWritesThem) {
  EXPECT_EQ(validate::bound_text(std::numeric_limits<double>::max()), "any");
  EXPECT_EQ(validate::bound_text(std::numeric_limits<int64_t>::max()), "any");
  EXPECT_EQ(validate::bound_text(int64_t{1} << 40), "2^40");
  EXPECT_EQ(validate::bound_text(0.001), "0.001");
  EXPECT_EQ(validate::bound_text(int64_t{1024}), "1024");
  std::string e = error_of([] { validate::in_range(-1.0, 0.0, std::numeric_limits<double>::max(), "--x"); });
  EXPECT_NE(e.find("at least 0"), std::string::npos) << e;
  EXPECT_EQ(e.find("179769"), std::string::npos) << e;  // never the largest double in full
  EXPECT_LT(e.size(), 200u) << e;
}

TEST(Validate, CountsAreBoundedBeforeLibrariesSeeThem) {
  std::string e = error_of([] { validate::thread_count(100000, "config key 'train.threads'"); });
  EXPECT_NE(e.find("train.threads"), std::string::npos) << e;
  EXPECT_NE(e.find("at most 1024"), std::string::npos) << e;
  EXPECT_EQ(validate::thread_count(8, "t"), 8);
  e = error_of([] { validate::buffer_bytes(uint64_t{1} << 62, 16, "the model"); });
  EXPECT_NE(e.find("the model"), std::string::npos) << e;
  e = error_of([] { validate::checked_product(int64_t{1} << 40, int64_t{1} << 40, "B x T"); });
  EXPECT_NE(e.find("overflows"), std::string::npos) << e;
}

TEST(Validate, TextMustBeAWholeNumber) {
  EXPECT_EQ(validate::parse_int("12", 0, 100, "v"), 12);
  EXPECT_NE(error_of([] { validate::parse_int("12abc", 0, 100, "OMP_NUM_THREADS"); }), "");
  EXPECT_NE(error_of([] { validate::parse_int("", 0, 100, "v"); }), "");
  EXPECT_NE(error_of([] { validate::parse_int("99999999999999999999999", 0, 100, "v"); }), "");
  EXPECT_NE(error_of([] { validate::parse_real("nan", 0, 1, "v"); }), "");
  EXPECT_NE(error_of([] { validate::parse_real("1e999", 0, 1e300, "v"); }), "");
  EXPECT_DOUBLE_EQ(validate::parse_real("0.25", 0, 1, "v"), 0.25);
}

TEST(Validate, InputsMustBeRegularFiles) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("aiscale-validate-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string fifo = (dir / "pipe").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string e = error_of([&] { validate::regular_file(fifo, "token shard"); });
  EXPECT_NE(e.find("not a regular file"), std::string::npos) << e;
  EXPECT_NE(e.find("token shard"), std::string::npos) << e;
  e = error_of([&] { validate::regular_file(dir.string(), "config file"); });
  EXPECT_NE(e.find("is a directory"), std::string::npos) << e;
  e = error_of([&] { validate::regular_file("/dev/null", "config file"); });
  EXPECT_NE(e.find("not a regular file"), std::string::npos) << e;
  e = error_of([&] { validate::regular_file((dir / "missing").string(), "config file"); });
  EXPECT_NE(e.find("No such file"), std::string::npos) << e;
  fs::remove_all(dir);
}
