// How a model's flat parameter buffer maps to a Hugging Face checkpoint's tensors, as a
// table the model gives: each of its tensors is one or more HF tensors stacked by rows
// (a fused QKV matrix is q_proj, k_proj and v_proj one below the other), each HF tensor
// optionally stored transposed (GPT-2's Conv1D keeps (in, out)). Import and export are
// generic over that table; a model adds its own (gpt2_hf_map here).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "aiscale/nn/models/gpt_config.h"
#include "aiscale/train/hf_weights.h"
#include "aiscale/train/safetensors.h"

namespace aiscale::train {

// One HF tensor holding `rows` rows of the model's tensor.
struct HfPiece {
  std::string name;
  int64_t rows = 0;
};

// One tensor of the model: `shape` (row-major; rows first) at `offset` in the flat
// buffer, made of `pieces` stacked by rows (their rows add up to shape[0]). With
// `transposed`, each piece is stored in HF as (cols, rows) of a 2D tensor.
struct HfTensorMap {
  std::string param;  // the model's name for it (messages)
  int64_t offset = 0;
  std::vector<int64_t> shape;
  bool transposed = false;
  std::vector<HfPiece> pieces;
};

struct HfModelMap {
  std::string architecture;  // "GPT2LMHeadModel": the config.json "architectures" entry
  int64_t size = 0;          // values in the flat buffer
  std::vector<HfTensorMap> tensors;
  // Prefixes a checkpoint's names may carry before the table's names ("transformer." in
  // GPT2LMHeadModel's own saves); export writes the table's names.
  std::vector<std::string> prefixes;
  // HF names that are the same tensor as another (an LM head tied to the embedding):
  // allowed, checked for shape, never read or written.
  std::map<std::string, std::string> tied;
  // HF names that are no parameters (buffers such as GPT-2's attention mask): skipped.
  std::function<bool(const std::string&)> ignored;
};

// The HF shape of a piece (as a checkpoint stores it).
std::vector<int64_t> hf_piece_shape(const HfTensorMap& t, const HfPiece& p);

// Reads every tensor of `map` from `weights` into a flat buffer of map.size values. The
// names, shapes and dtypes are checked first, all of them: one error lists every missing
// tensor, every unexpected one, every shape and every dtype that differs, with `fix`
// appended. Nothing is read before that check passes.
std::vector<float> hf_import(const HfModelMap& map, const HfWeights& weights, const std::string& fix);

// One HF tensor of the table in export order: its HF name and shape, and the rows x cols
// of the flat buffer it holds from `begin` (stored transposed when `transposed`).
struct HfPieceRange {
  std::string name;
  std::vector<int64_t> shape;
  int64_t begin = 0, rows = 0, cols = 0;
  bool transposed = false;
};
std::vector<HfPieceRange> hf_pieces(const HfModelMap& map);
// Ranges [begin, end) that tile the flat buffer, each of at most `max_values` values (or
// one row of a tensor whose row is longer), never splitting a row: small tensors share a
// range, large ones are cut into whole rows. A streamed checkpoint moves one at a time.
std::vector<std::pair<int64_t, int64_t>> hf_chunks(const HfModelMap& map, int64_t max_values);

// hf_import in two halves, for reading a range at a time: the check (every tensor's name,
// shape and dtype, as hf_import does it, failing with `fix`), and the values of
// [begin, begin + count) of the flat buffer (a range of hf_chunks: it splits no row).
struct HfImport {
  std::vector<std::string> file_names;  // per hf_pieces entry: its name in the checkpoint
};
HfImport hf_import_check(const HfModelMap& map, const HfWeights& weights, const std::string& fix);
void hf_import_range(const HfModelMap& map, const HfWeights& weights, const HfImport& plan,
                     int64_t begin, int64_t count, float* out);

// The HF tensors of `flat` (map.size values) in the table's order, written as `dtype`.
std::vector<SafeTensor> hf_export(const HfModelMap& map, const float* flat,
                                  const std::string& dtype = "F32");

// The table of a model of either family (below).
HfModelMap hf_model_map(const nn::GptConfig& c);

// GPT-2 (GPT2LMHeadModel): GptLayout's tensors under their HF names, Conv1D weights
// transposed, "transformer." allowed before every name, lm_head.weight tied to wte.weight,
// the attention mask buffers (h.N.attn.bias, h.N.attn.masked_bias) skipped.
HfModelMap gpt2_hf_map(const nn::GptConfig& c);

// Llama (LlamaForCausalLM): "model." before GptLayout's names; the fused attention input
// projection is q_proj, k_proj and v_proj stacked by rows (n_embd, then kv_heads x
// head_size each), the fused MLP input gate_proj and up_proj (ffn rows each); nn.Linear
// keeps (out, in) as aiscale does, so nothing is transposed, and the rows of q_proj and
// k_proj are taken in Hugging Face's order (the rotary pairs of its rotate_half
// convention, channel i with i + head_size/2). An untied lm_head.weight is a tensor of
// its own; a tied one may be present or absent. The rotary inverse-frequency buffers of
// older saves (model.layers.N.self_attn.rotary_emb.inv_freq) are skipped.
HfModelMap llama_hf_map(const nn::GptConfig& c);

}  // namespace aiscale::train
