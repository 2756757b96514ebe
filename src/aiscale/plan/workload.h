// What is being trained, as the planner needs it: a decoder-only transformer (the GPT-2
// family, the Llama family, larger presets, custom sizes of either) or a CNN image
// classifier (ResNet).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "aiscale/nn/models/gpt_config.h"

namespace aiscale::plan {

enum class WorkloadKind { transformer, cnn };
enum class Optimizer { adamw, sgd_momentum };

// How attention is computed, which decides what it keeps for backward (transformers):
//   flash         a fused kernel (FlashAttention; aiscale's CUDA backend, PyTorch SDPA)
//                 keeps only the output and one fp32 log-sum-exp per head and row, and
//                 recomputes the scores in its backward pass;
//   materialized  the (B, heads, T, T) score/probability matrices are stored (the
//                 unfused formulation Korthikanti et al. count; aiscale's CPU backend).
enum class Attention { flash, materialized };
Attention parse_attention(std::string_view text);  // "flash", "materialized"
std::string_view to_string(Attention a);

struct CnnModel {
  std::string arch;               // "resnet50"
  int depth = 50;
  int image_size = 224;
  int classes = 1000;
  int64_t params = 0;
  double macs_per_sample = 0;      // multiply-adds, one forward pass of one image
  double activation_elements = 0;  // per image, kept for backward (estimate)
};

// The data a workload reads each epoch, as the per-epoch figures need it (epoch.h).
struct DatasetShape {
  // Training samples (sequences or images) per epoch; 0: transformers make one pass over
  // --tokens (tokens / sequence length), CNNs use --images.
  double samples_per_epoch = 0;
  double validation_samples = 0;   // per epoch, forward only
  double bytes_per_sample = 0;     // as stored on the shared filesystem
  bool decoded = false;            // images: JPEG decoding and augmentation on the host's cores
  std::string source;              // where these come from
};

struct Workload {
  std::string name;               // preset name or "custom"
  WorkloadKind kind = WorkloadKind::transformer;
  Optimizer optimizer = Optimizer::adamw;
  nn::GptConfig gpt;              // transformer only
  int64_t seq_len = 0;            // tokens per training sequence (transformer)
  CnnModel cnn;                   // CNN only
  Attention attention = Attention::flash;  // transformer only; the planner sets it per partition
  // Sequences (transformer) or images (CNN) per optimizer step when the user gives no
  // --global-batch. 0 means weak scaling: a fixed batch per GPU.
  int64_t default_global_batch = 0;
  std::string origin;             // where the shape comes from
  DatasetShape data;              // what an epoch reads

  bool is_transformer() const { return kind == WorkloadKind::transformer; }
  int64_t params() const;
  // "48 layers, 25 heads, width 1600, context 1024, vocab 50257"; the Llama family adds its
  // key/value heads, MLP width and head: "32 layers, 32 heads (8 key/value), width 4096,
  // SwiGLU MLP 14336, context 8192, vocab 128256, untied LM head"
  std::string describe() const;
};

// Size changes on top of a preset (or the whole shape for "custom"). family: "custom"
// only (a preset has its own); n_kv_head, ffn_hidden and tie_embeddings: the Llama family
// only (the train config's model.* keys of the same names).
struct ModelOverrides {
  std::optional<int64_t> n_layer, n_head, n_embd, seq_len, vocab_size;
  std::optional<nn::GptFamily> family;
  std::optional<int64_t> n_kv_head, ffn_hidden;
  std::optional<bool> tie_embeddings;
  std::optional<int> image_size;
};

// Presets: every GPT-layout preset of the engine (nn/models/gpt_config.h: the GPT-2
// family, gpt2-2.7b, gpt2-6.6b, gpt-857m, gpt3-175b, the Llama 3 shapes llama3-1b-shape,
// -3b-shape, -8b-shape and the small gpt-/llama- models), resnet18/34/50/101/152, and
// "custom" (needs n_layer, n_head, n_embd; --family llama for the Llama family). Throws
// Error listing the names.
Workload make_workload(std::string_view name, const ModelOverrides& overrides = {});
std::vector<std::string> workload_names();

// ImageNet-1k training images (the ILSVRC 2012 training split).
inline constexpr int64_t kImageNetTrainImages = 1281167;
// Its validation split, and the training split's mean stored JPEG size: 138 GB of
// ILSVRC2012_img_train.tar over 1,281,167 images ≈ 108 KB.
inline constexpr int64_t kImageNetValImages = 50000;
inline constexpr double kImageNetJpegBytes = 108e3;

}  // namespace aiscale::plan
