// Every fuzz target over its corpus (tests/fuzz/corpus/<target>/), in the ordinary build
// and under the sanitizers: the seeds must be accepted (so that fuzzing starts from inputs
// that reach deep), and the inputs kept from fixed bugs (regress-*) must end in no crash,
// only in aiscale's own error or in acceptance.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <gtest/gtest.h>

#include "targets.h"

namespace {

namespace fs = std::filesystem;

std::vector<fs::path> corpus_files(const std::string& target) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(fs::path(AISCALE_TEST_DATA_DIR) / "fuzz/corpus" / target))
    if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

std::string bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class FuzzCorpus : public testing::TestWithParam<aiscale::fuzz::Target> {};

TEST_P(FuzzCorpus, SeedsAreAcceptedAndRegressionsEndCleanly) {
  const aiscale::fuzz::Target t = GetParam();
  const std::vector<fs::path> files = corpus_files(t.name);
  size_t seeds = 0;
  for (const fs::path& f : files) {
    SCOPED_TRACE(f.string());
    const std::string bytes = bytes_of(f);
    t.run(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    if (f.filename().string().rfind("regress-", 0) == 0) continue;
    ++seeds;
    EXPECT_EQ(aiscale::fuzz::last_user_error(), "") << "a seed should be a valid input";
  }
  EXPECT_GE(seeds, 2u) << "each target wants at least two seed files";
}

INSTANTIATE_TEST_SUITE_P(Targets, FuzzCorpus, testing::ValuesIn(aiscale::fuzz::kTargets),
                         [](const testing::TestParamInfo<aiscale::fuzz::Target>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
