// Every fuzz target by name: the libFuzzer programs (fuzz_main.cpp) and the corpus replay
// in the unit tests (corpus_replay_test.cpp) run the same functions.
#pragma once
#include <array>
#include <ostream>

#include "targets/analysis.h"
#include "targets/catalog.h"
#include "targets/checkpoint.h"
#include "targets/gpt2_vocab.h"
#include "targets/hf_model.h"
#include "targets/hf_tokenizer_json.h"
#include "targets/safetensors.h"
#include "targets/study.h"
#include "targets/token_shard.h"
#include "targets/train_config.h"

namespace aiscale::fuzz {

struct Target {
  const char* name;  // also the corpus folder, tests/fuzz/corpus/<name>
  int (*run)(const uint8_t* data, size_t size);
};
// For test names and messages.
inline void PrintTo(const Target& t, std::ostream* os) { *os << t.name; }

inline constexpr std::array<Target, 10> kTargets{{
    {"train_config", fuzz_train_config},
    {"study", fuzz_study},
    {"token_shard", fuzz_token_shard},
    {"safetensors", fuzz_safetensors},
    {"checkpoint", fuzz_checkpoint},
    {"hf_model", fuzz_hf_model},
    {"gpt2_vocab", fuzz_gpt2_vocab},
    {"hf_tokenizer_json", fuzz_hf_tokenizer_json},
    {"analysis", fuzz_analysis},
    {"catalog", fuzz_catalog},
}};

}  // namespace aiscale::fuzz
