// The validation layer: non-finite numbers, ranges read as a person writes them, counts
// bounded before they reach OpenMP or an allocator, inputs that must be regular files.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <functional>
#include <filesystem>
#include <limits>

#include "aiscale/core/toml_errors.h"
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

// Digits beyond 64 bits are a number out of range (with the range), not "not an integer".
TEST(Validate, AnIntegerBeyondSixtyFourBitsIsOutOfRange) {
  for (const char* big : {"99999999999999999999", "-99999999999999999999", "+99999999999999999999"}) {
    const std::string e = error_of([&] { validate::parse_int(big, 1, int64_t{1} << 40, "--steps"); });
    EXPECT_NE(e.find(std::string("--steps = '") + big + "' is out of range: it must be a whole number "
                     "between 1 and 2^40"), std::string::npos) << e;
    EXPECT_EQ(validate::classify_int(big, 1, 10), validate::IntText::beyond_64_bits);
  }
  EXPECT_NE(error_of([] { validate::parse_int("99999999999999999999x", 0, 1, "v"); }).find("is not an integer"),
            std::string::npos);
  EXPECT_EQ(validate::classify_int("0", 1, 10), validate::IntText::too_small);
  EXPECT_EQ(validate::classify_int("11", 1, 10), validate::IntText::too_large);
  EXPECT_EQ(validate::classify_int("ten", 1, 10), validate::IntText::not_integer);
  EXPECT_EQ(validate::classify_int("+7", 1, 10), validate::IntText::ok);
  EXPECT_TRUE(validate::looks_integer("-1_000_000"));
  EXPECT_FALSE(validate::looks_integer("1__0"));
  EXPECT_FALSE(validate::looks_integer("1e9"));
  // The top of an int64 range is written out: "any" would not say what is too large.
  const std::string e = error_of([] {
    validate::parse_int("9223372036854775808", 0, std::numeric_limits<int64_t>::max(), "seed");
  });
  EXPECT_NE(e.find("between 0 and 9223372036854775807"), std::string::npos) << e;
}

// A TOML file with such an integer: the file, the line, the key (with its table) and the
// key's range when the caller knows it.
TEST(Validate, TomlIntegerBeyondSixtyFourBitsNamesTheKeyAndItsRange) {
  auto message = [](const std::string& text, const std::function<IntRange(const std::string&)>& range_of) {
    try {
      (void)toml::parse(std::string_view(text), std::string_view("run.toml"));
    } catch (const toml::parse_error& e) {
      return toml_integer_out_of_range(e, text, "run.toml", range_of).value_or("(none)");
    }
    return std::string("(parsed)");
  };
  auto steps = [](const std::string& key) -> IntRange {
    if (key == "train.steps") return std::make_pair(int64_t{1}, int64_t{1} << 40);
    return std::nullopt;
  };
  EXPECT_EQ(message("[model]\nn_layer = 2\n\n[train]\nlr = 1e-3\nsteps = 99999999999999999999\n", steps),
            "run.toml:6: train.steps = 99999999999999999999 is out of range: it must be a whole number "
            "between 1 and 2^40");
  EXPECT_EQ(message("train = { lr = 0.1, steps = -99999999999999999999 }\n", steps),
            "run.toml:1: train.steps = -99999999999999999999 is out of range: it must be a whole number "
            "between 1 and 2^40");
  EXPECT_EQ(message("counts = [1, 99999999999999999999]\n", steps),
            "run.toml:1: counts = 99999999999999999999 is out of range: a TOML integer is between "
            "-9223372036854775808 and 9223372036854775807");
  EXPECT_EQ(message("x = \"unterminated\n", steps), "(none)");  // another error: the caller's message
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
