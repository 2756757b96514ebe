// Reader for tests/fixtures/llama_small.fixture (written by make_llama_fixture.py), into
// the GPT fixture's struct (gpt_fixture.h) with a llama-family config.
#pragma once
#include <cstdint>
#include <fstream>
#include <stdexcept>
#include <string>

#include "gpt_fixture.h"

namespace aiscale::fixtures {

inline GptFixture load_llama_fixture(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("missing fixture " + path +
                                    ": regenerate with /usr/bin/python3 tests/fixtures/make_llama_fixture.py");
  auto read = [&](void* dst, size_t bytes) {
    in.read(static_cast<char*>(dst), static_cast<std::streamsize>(bytes));
    if (!in) throw std::runtime_error("fixture " + path + " is truncated: regenerate it");
  };
  uint32_t magic = 0, version = 0;
  read(&magic, 4);
  read(&version, 4);
  if (magic != 0x4C464941u) throw std::runtime_error("fixture " + path + " has a wrong magic number");
  if (version != 1)
    throw std::runtime_error("fixture " + path + " is version " + std::to_string(version) +
                             ", this test reads version 1: regenerate it with make_llama_fixture.py");
  int32_t h[12];
  read(h, sizeof h);
  double r[5];
  read(r, sizeof r);
  GptFixture f;
  nn::GptConfig& c = f.config;
  c.family = nn::GptFamily::llama;
  c.n_layer = h[0];
  c.n_head = h[1];
  c.n_kv_head = h[2];
  c.n_embd = h[3];
  c.ffn_hidden = h[4];
  c.block_size = h[5];
  c.vocab_size = h[6];
  c.tie_embeddings = h[7] != 0;
  c.rope_scaling.original_context = h[8];
  f.B = h[9];
  f.T = h[10];
  f.steps = h[11];
  c.rope_theta = r[0];
  c.rope_scaling.factor = r[1];
  c.rope_scaling.low_freq_factor = r[2];
  c.rope_scaling.high_freq_factor = r[3];
  c.norm_eps = r[4];
  float hp[5];
  read(hp, sizeof hp);
  f.lr = hp[0], f.beta1 = hp[1], f.beta2 = hp[2], f.eps = hp[3], f.weight_decay = hp[4];
  const size_t N = static_cast<size_t>(c.num_params()), BT = static_cast<size_t>(f.B * f.T);
  f.inputs.resize(BT);
  f.targets.resize(BT);
  f.params.resize(N);
  f.logits.resize(BT * static_cast<size_t>(c.vocab_size));
  f.grads.resize(N);
  f.step_losses.resize(static_cast<size_t>(f.steps));
  read(f.inputs.data(), BT * 4);
  read(f.targets.data(), BT * 4);
  read(f.params.data(), N * 4);
  read(f.logits.data(), f.logits.size() * 4);
  read(&f.loss, 4);
  read(f.grads.data(), N * 4);
  read(f.step_losses.data(), f.step_losses.size() * 4);
  char extra = 0;
  if (in.read(&extra, 1))
    throw std::runtime_error("fixture " + path + " is longer than its config says: regenerate it");
  return f;
}

inline std::string llama_fixture_path() {
  return std::string(AISCALE_SOURCE_DIR) + "/tests/fixtures/llama_small.fixture";
}

}  // namespace aiscale::fixtures
