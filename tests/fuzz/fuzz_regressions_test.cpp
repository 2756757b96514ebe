// Bugs the fuzz targets found, each pinned by a direct test (the inputs that found them
// are also kept in tests/fuzz/corpus/<target>/regress-* and replayed by
// corpus_replay_test.cpp).
#include <gtest/gtest.h>

#include "aiscale/sweep/study.h"
#include "aiscale/train/config.h"
#include "aiscale/train/safetensors.h"
#include "../support/error_of.h"

namespace aiscale {
namespace {

// safetensors_serialize wrote the header "null" for a file without tensors, which its own
// parser (rightly) refuses: a checkpoint or export with no tensors could not be read back.
TEST(FuzzRegressions, SafetensorsWithoutTensorsReadsBack) {
  EXPECT_TRUE(train::safetensors_parse(train::safetensors_serialize({}), "empty.safetensors").empty());
  EXPECT_TRUE(train::safetensors_parse(train::safetensors_serialize({}, {{"format", "pt"}}),
                                       "metadata-only.safetensors")
                  .empty());
}

// A tensor with no elements (shape [0, 1], as Llama's zero-size bias entries are) was
// decoded with memcpy into an empty vector's null data(): undefined behaviour the sanitizer
// stops on. It reads back as an empty tensor of its shape, in every dtype.
TEST(FuzzRegressions, SafetensorsEmptyTensorReadsBack) {
  for (const char* dtype : {"F32", "BF16", "F16"}) {
    train::SafeTensor t{"wte.weight", {0, 1}, {}, dtype};
    const auto read = train::safetensors_parse(train::safetensors_serialize({t}), "empty-tensor.safetensors");
    ASSERT_EQ(read.count("wte.weight"), 1u) << dtype;
    EXPECT_TRUE(read.at("wte.weight").data.empty()) << dtype;
    EXPECT_EQ(read.at("wte.weight").shape, (std::vector<int64_t>{0, 1})) << dtype;
  }
}

// An integer key of a study given as a float beyond 64 bits (`repeats = 2.2e48`) was
// converted by toml++ before its type was checked: undefined behaviour the sanitizer stops
// on. It is refused as not an integer, naming the file, line and key.
TEST(FuzzRegressions, StudyIntegerKeysGivenAsHugeFloatsAreRefused) {
  const std::string text = "name = \"s\"\nkind = \"strong\"\ncounts = [1, 2]\nrepeats = 2.2e48\n";
  const std::string e = testsupport::error_of([&] { sweep::parse_study(text, "study.toml", "."); });
  EXPECT_NE(e.find("study.toml:4: repeats must be an integer"), std::string::npos) << e;
}

// A --set value is taken as a bare string without TOML's UTF-8 check: a run name with an
// invalid byte was accepted and written to the run's config.toml as another character (so
// the resolved config no longer named the run), and a NUL would cut a path short.
TEST(FuzzRegressions, ConfigStringsMustBeUtf8TextWithoutControlCharacters) {
  const std::string base = "[model]\npreset = \"gpt-tiny\"\n[train]\nseq_len = 32\n";
  const std::string invalid = testsupport::error_of([&] {
    train::parse_train_config(base, "x.toml", {std::string("run.name=e\xf3\x0d")});
  });
  EXPECT_NE(invalid.find("'run.name'"), std::string::npos) << invalid;
  EXPECT_NE(invalid.find("not valid UTF-8"), std::string::npos) << invalid;
  const std::string control = testsupport::error_of([&] {
    train::parse_train_config(base + "[run]\nname = \"a\\u0000b\"\n", "x.toml", {});
  });
  EXPECT_NE(control.find("control character U+0000"), std::string::npos) << control;
  // Text beyond ASCII is fine and survives being written back.
  const train::TrainConfig c = train::parse_train_config(base, "x.toml", {"run.name=caf\xc3\xa9-\xe6\x97\xa5"});
  EXPECT_EQ(train::parse_train_config(train::to_toml(c), "y.toml", {}).run_name, c.run_name);
}

}  // namespace
}  // namespace aiscale
