// The decoder-only transformer's architecture and its parameter layout, shared by the CPU
// model, the CUDA model, checkpoints (Hugging Face names) and the planner. Two families
// share one layout and one set of blocks:
// - gpt2: LayerNorm with bias, learned positions, GELU MLP (4C), biases everywhere, the LM
//   head tied to the token embedding;
// - llama (Llama 2/3 and similar): RMSNorm, rotary positions (optionally with Llama 3's
//   frequency scaling), SwiGLU MLP, grouped-query attention (n_kv_head <= n_head), no
//   biases, the LM head tied or not.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "aiscale/core/tensor.h"

namespace aiscale::nn {

enum class GptFamily { gpt2, llama };

// "gpt2" / "llama" <-> the enum; parse throws Error naming the choices.
GptFamily parse_gpt_family(std::string_view name);
const char* to_string(GptFamily f);

// Llama 3's scaling of the rotary frequencies for long contexts (Hugging Face's
// rope_scaling with rope_type "llama3"): wavelengths longer than original_context /
// low_freq_factor are divided by `factor`, shorter than original_context /
// high_freq_factor kept, the band between interpolated. factor 0: no scaling.
struct RopeScaling {
  double factor = 0.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_context = 8192;
  bool enabled() const { return factor > 0.0; }
};

struct GptConfig {
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_embd = 768;      // C
  int64_t block_size = 1024; // maximum context T
  int64_t vocab_size = 50257;
  GptFamily family = GptFamily::gpt2;
  // The llama family's fields (gpt2 requires the defaults):
  int64_t n_kv_head = 0;     // key/value heads (grouped-query attention); 0: n_head
  int64_t ffn_hidden = 0;    // MLP hidden width F; 0: 4C
  bool tie_embeddings = true;  // the LM head is the token embedding
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  double norm_eps = 1e-5;    // RMSNorm's epsilon (gpt2's LayerNorm uses 1e-5 too)

  bool llama() const { return family == GptFamily::llama; }
  int64_t head_size() const { return n_embd / n_head; }
  int64_t kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  int64_t ffn() const { return ffn_hidden > 0 ? ffn_hidden : 4 * n_embd; }
  // Rows of the fused attention input projection: Q (C), then K and V (kv_heads x
  // head_size each).
  int64_t kv_rows() const { return kv_heads() * head_size(); }
  int64_t qkv_rows() const { return n_embd + 2 * kv_rows(); }
  // Rows of the MLP's first matrix: F (gpt2), or gate and up stacked (2F, llama).
  int64_t fc_rows() const { return llama() ? 2 * ffn() : ffn(); }
  bool has_bias() const { return !llama(); }            // linear and norm biases
  bool learned_positions() const { return !llama(); }   // wpe (else rotary)
  bool tied() const { return !llama() || tie_embeddings; }
  // Throws Error naming the field when the shape is impossible (C % NH != 0, ...).
  void validate() const;
  // Exact parameter count (tied embedding counted once).
  int64_t num_params() const;
};

// Named presets: gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1558m, ..., small CPU sizes
// (gpt-tiny, gpt-mini), and Llama-family shapes (llama-tiny, llama-mini, llama3-1b-shape,
// llama3-3b-shape, llama3-8b-shape: shapes only, no weights). Throws Error listing the
// known names.
GptConfig gpt_preset(std::string_view name);
std::vector<std::string> gpt_preset_names();

// One parameter tensor. gpt2: named as in Hugging Face's GPT2LMHeadModel
// ("h.3.attn.c_attn.weight", without the "transformer." prefix); our matrices are stored
// (out, in), HF's Conv1D stores (in, out), so `transposed_in_hf` says a 2D weight must be
// transposed on export/import. llama: named as in LlamaForCausalLM without the "model."
// prefix ("layers.3.input_layernorm.weight", "lm_head.weight"), except the two fused
// matrices: "layers.L.self_attn.qkv_proj.weight" is HF's q_proj, k_proj and v_proj stacked
// by rows, "layers.L.mlp.gate_up_proj.weight" its gate_proj and up_proj.
struct GptParamInfo {
  std::string name;
  Shape shape;
  bool is_matrix;          // 2D weight: gets weight decay by default
  bool transposed_in_hf;   // stored (out, in) here, (in, out) in HF
  int64_t offset = 0;      // start in the flat parameter buffer
  int64_t layer = -1;      // transformer block, -1 for the embeddings and ln_f
  bool is_embedding() const {
    return name == "wte.weight" || name == "wpe.weight" || name == "embed_tokens.weight";
  }
};

// All parameters in the order they are laid out in the flat parameter buffer:
// GptLayout(c).tensors() (gpt_layout.h says the order).
std::vector<GptParamInfo> gpt_param_infos(const GptConfig& c);

// Model FLOPs per token for one training step (forward + backward), the PaLM formula:
// 6*N + 12*L*C*T with T the sequence length actually trained. gpt2: N is the parameter
// count (including the embeddings, as the PyTorch GPT-2 comparison counts); llama: N is the
// matmul parameters (all but an untied input embedding, which is a lookup).
double gpt_train_flops_per_token(const GptConfig& c, int64_t seq_len);

}  // namespace aiscale::nn
