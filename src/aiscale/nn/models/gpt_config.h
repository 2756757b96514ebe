// GPT-2 architecture description and its parameter layout, shared by the CPU model,
// the CUDA model, checkpoints (Hugging Face names) and the planner.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "aiscale/core/tensor.h"

namespace aiscale::nn {

struct GptConfig {
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_embd = 768;      // C
  int64_t block_size = 1024; // maximum context T
  int64_t vocab_size = 50257;

  int64_t head_size() const { return n_embd / n_head; }
  // Throws Error naming the field when the shape is impossible (C % NH != 0, ...).
  void validate() const;
  // Exact parameter count (tied embedding counted once).
  int64_t num_params() const;
};

// Named presets: gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1558m, and small CPU sizes
// (gpt-tiny, gpt-mini). Throws Error listing the known names.
GptConfig gpt_preset(std::string_view name);
std::vector<std::string> gpt_preset_names();

// One parameter tensor, named as in Hugging Face's GPT2LMHeadModel ("h.3.attn.c_attn.weight",
// without the "transformer." prefix). Our matrices are stored (out, in): HF's Conv1D stores
// (in, out), so `transposed_in_hf` says a 2D weight must be transposed on export/import.
struct GptParamInfo {
  std::string name;
  Shape shape;
  bool is_matrix;          // 2D weight: gets weight decay by default
  bool transposed_in_hf;   // stored (out, in) here, (in, out) in HF
  int64_t offset = 0;      // start in the flat parameter buffer
  int64_t layer = -1;      // transformer block, -1 for the embeddings and ln_f
  bool is_embedding() const { return name == "wte.weight" || name == "wpe.weight"; }
};

// All parameters in the order they are laid out in the flat parameter buffer:
// GptLayout(c).tensors() (gpt_layout.h says the order).
std::vector<GptParamInfo> gpt_param_infos(const GptConfig& c);

// Model FLOPs per token for one training step (forward + backward), the formula used by
// the PyTorch peer and PaLM: 6*N + 12*L*C*T, with N the parameter count (including the
// embeddings) and T the sequence length actually trained.
double gpt_train_flops_per_token(const GptConfig& c, int64_t seq_len);

}  // namespace aiscale::nn
