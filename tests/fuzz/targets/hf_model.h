// A Hugging Face model folder as `--init-from` reads it (train/hf_checkpoint.h): config.json,
// then model.safetensors.index.json and the two shards it may name
// (model-00001-of-00002.safetensors, model-00002-of-00002.safetensors), or, with an empty
// index part, one model.safetensors; the input holds the four parts separated by "--8<--"
// lines. The model expected is the one config.json describes (either family). Weights
// that are read must fill the model's buffer and, written back (hf_model_files, in shards),
// read again to the same bits.
#pragma once
#include <cstring>

#include "../fuzz_support.h"
#include "aiscale/train/checkpoint.h"
#include "aiscale/train/hf_checkpoint.h"

namespace aiscale::fuzz {

inline int fuzz_hf_model(const uint8_t* data, size_t size) {
  const std::vector<std::string> parts = split_parts(as_text(data, size), 4);
  const std::filesystem::path dir = scratch_dir() / "hf_model", again = scratch_dir() / "hf_model_again";
  for (const auto& d : {dir, again}) {
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
  }
  write_bytes(dir / "config.json", parts[0]);
  if (parts[1].empty()) {
    write_bytes(dir / "model.safetensors", parts[2]);
  } else {
    write_bytes(dir / "model.safetensors.index.json", parts[1]);
    write_bytes(dir / "model-00001-of-00002.safetensors", parts[2]);
    write_bytes(dir / "model-00002-of-00002.safetensors", parts[3]);
  }
  return expect_user_errors([&] {
    const nn::GptConfig model = train::read_checkpoint_model(dir.string());
    const std::vector<float> params = train::read_hf_model(dir.string(), model, "fuzz");
    if (static_cast<int64_t>(params.size()) != model.num_params())
      invariant_broken("imported weights do not fill the model");
    for (const auto& [name, bytes] : train::hf_model_files(model, params, 64))
      write_bytes(again / name, bytes);
    std::vector<float> back;
    try {
      back = train::read_hf_model(again.string(), model, "fuzz-written");
    } catch (const Error& e) {
      invariant_broken(std::string("imported weights are refused once written back: ") + e.what());
    }
    if (back.size() != params.size() || std::memcmp(back.data(), params.data(), params.size() * 4) != 0)
      invariant_broken("imported weights change when written back and read again");
  });
}

}  // namespace aiscale::fuzz
