// Checkpoint metadata (train/checkpoint_check.h) as a resume reads it: config.json, then
// state.json, then model.safetensors matched to the model, then optimizer.bin; the input
// holds the four files separated by "--8<--" lines.
#pragma once
#include "../fuzz_support.h"
#include "aiscale/train/checkpoint.h"

namespace aiscale::fuzz {

inline int fuzz_checkpoint(const uint8_t* data, size_t size) {
  const std::vector<std::string> parts = split_parts(as_text(data, size), 4);
  const std::filesystem::path dir = scratch_dir() / "step_00000001";
  std::filesystem::create_directories(dir);
  write_bytes(dir / "config.json", parts[0]);
  write_bytes(dir / "state.json", parts[1]);
  write_bytes(dir / "model.safetensors", parts[2]);
  write_bytes(dir / "optimizer.bin", parts[3]);
  write_bytes(dir / "COMPLETE", "");
  return expect_user_errors([&] {
    const nn::GptConfig model = train::read_checkpoint_model(dir.string());
    const train::CheckpointState s = train::read_checkpoint(dir.string(), true, &model);
    if (static_cast<int64_t>(s.params.size()) != model.num_params())
      invariant_broken("a checkpoint's weights do not match its model");
    if (s.m.size() != s.params.size() || s.v.size() != s.params.size())
      invariant_broken("a checkpoint's optimizer state does not match its weights");
  });
}

}  // namespace aiscale::fuzz
