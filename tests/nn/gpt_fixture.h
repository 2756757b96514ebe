// Reader for tests/fixtures/gpt_small.fixture (written by make_gpt_fixture.py).
#pragma once
#include <cstdint>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "aiscale/nn/models/gpt_config.h"

namespace aiscale::fixtures {

struct GptFixture {
  nn::GptConfig config;
  int64_t B = 0, T = 0, steps = 0;
  float lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
  std::vector<int32_t> inputs, targets;
  std::vector<float> params, logits, grads, step_losses;
  float loss = 0;
};

inline GptFixture load_gpt_fixture(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("missing fixture " + path +
                                    ": regenerate with /usr/bin/python3 tests/fixtures/make_gpt_fixture.py");
  auto read = [&](void* dst, size_t bytes) {
    in.read(static_cast<char*>(dst), static_cast<std::streamsize>(bytes));
    if (!in) throw std::runtime_error("fixture " + path + " is truncated: regenerate it");
  };
  uint32_t magic = 0, version = 0;
  read(&magic, 4);
  read(&version, 4);
  if (magic != 0x58464941u) throw std::runtime_error("fixture " + path + " has a wrong magic number");
  if (version != 1)
    throw std::runtime_error("fixture " + path + " is version " + std::to_string(version) +
                             ", this test reads version 1: regenerate it with make_gpt_fixture.py");
  int32_t h[8];
  read(h, sizeof h);
  GptFixture f;
  f.config = {h[0], h[1], h[2], h[3], h[4]};
  f.B = h[5];
  f.T = h[6];
  f.steps = h[7];
  float hp[5];
  read(hp, sizeof hp);
  f.lr = hp[0], f.beta1 = hp[1], f.beta2 = hp[2], f.eps = hp[3], f.weight_decay = hp[4];
  const size_t N = static_cast<size_t>(f.config.num_params()), BT = static_cast<size_t>(f.B * f.T);
  f.inputs.resize(BT);
  f.targets.resize(BT);
  f.params.resize(N);
  f.logits.resize(BT * static_cast<size_t>(f.config.vocab_size));
  f.grads.resize(N);
  f.step_losses.resize(static_cast<size_t>(f.steps));
  read(f.inputs.data(), BT * 4);
  read(f.targets.data(), BT * 4);
  read(f.params.data(), N * 4);
  read(f.logits.data(), f.logits.size() * 4);
  read(&f.loss, 4);
  read(f.grads.data(), N * 4);
  read(f.step_losses.data(), f.step_losses.size() * 4);
  return f;
}

inline std::string fixture_path() {
  return std::string(AISCALE_SOURCE_DIR) + "/tests/fixtures/gpt_small.fixture";
}

}  // namespace aiscale::fixtures
