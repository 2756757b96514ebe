#include "aiscale/plan/workload.h"

#include <algorithm>

#include <fmt/format.h>

#include "aiscale/core/error.h"
#include "aiscale/plan/resnet.h"

namespace aiscale::plan {
namespace {

// The planner's facts about the engine's larger presets (nn/models/gpt_config.cpp holds
// their shapes): the global batch their sources train with, the sequence length planned
// (0: the preset's context) and where the shape comes from.
struct PlannerPreset {
  const char* name;
  int64_t global_batch;   // sequences per step
  int64_t seq_len;        // tokens per sequence; 0: the preset's block_size
  const char* origin;
};

// The Llama 3 shapes carry a 131,072-token context (their rotary scaling's reach), but
// Llama 3 was pre-trained on 8,192-token sequences (Llama 3 paper, Dubey et al. 2024,
// section 3.4) and lengthened to 128K only at the end: the planner plans them at 8,192.
// The global batch: 512 such sequences, 4.2M tokens, Llama 2's 4M-token batch (Touvron et
// al. 2023, section 2.2) and Llama 3's first stage.
const PlannerPreset kPlannerPresets[] = {
    {"gpt-857m", 512, 0,
     "shape chosen by aiscale (the sources give none): of GPT-2/3-style shapes (head size 64 or "
     "128, width a multiple of 128, width/layers 32-128) 33 layers × 1408 with 22 heads of 64 is "
     "the closest to 857M"},
    {"gpt2-2.7b", 512, 0, "GPT-2 family, 60 layers × 1920 (30 heads of 64), GPT-2 vocab and context"},
    {"gpt2-6.6b", 512, 0, "GPT-2 family, 84 layers × 2560 (40 heads of 64), GPT-2 vocab and context"},
    {"gpt3-175b", 1536, 0,
     "GPT-3 paper 175B: 96 layers, width 12288, 96 heads, context 2048, batch 1536 × 2048"},
    {"llama3-1b-shape", 512, 8192,
     "Llama 3.2 1B shape (Meta's config.json): 16 layers × 2048, 32 heads, 8 key/value heads, "
     "SwiGLU 8192, tied head, vocab 128256; planned at Llama 3's pre-training context 8192, "
     "batch 512 × 8192 (4.2M tokens)"},
    {"llama3-3b-shape", 512, 8192,
     "Llama 3.2 3B shape (Meta's config.json): 28 layers × 3072, 24 heads, 8 key/value heads, "
     "SwiGLU 8192, tied head, vocab 128256; planned at Llama 3's pre-training context 8192, "
     "batch 512 × 8192 (4.2M tokens)"},
    {"llama3-8b-shape", 512, 8192,
     "Llama 3.1 8B shape (Meta's config.json): 32 layers × 4096, 32 heads, 8 key/value heads, "
     "SwiGLU 14336, untied head, vocab 128256; planned at Llama 3's pre-training context 8192, "
     "batch 512 × 8192 (4.2M tokens)"},
};

const int kResnetDepths[] = {18, 34, 50, 101, 152};

}  // namespace

Attention parse_attention(std::string_view t) {
  if (t == "flash" || t == "fused") return Attention::flash;
  if (t == "materialized" || t == "materialised" || t == "unfused") return Attention::materialized;
  fail("unknown attention '{}': use flash (fused kernels that keep no score matrix: aiscale's "
       "CUDA backend, PyTorch SDPA) or materialized (the (B, heads, T, T) scores are stored: "
       "aiscale's CPU backend)", t);
}

std::string_view to_string(Attention a) {
  return a == Attention::flash ? "flash" : "materialized";
}

int64_t Workload::params() const { return is_transformer() ? gpt.num_params() : cnn.params; }

std::string Workload::describe() const {
  if (is_transformer() && gpt.llama())
    return fmt::format("{} layers, {} heads ({} key/value), width {}, SwiGLU MLP {}, context {}, "
                       "vocab {}, {} LM head", gpt.n_layer, gpt.n_head, gpt.kv_heads(), gpt.n_embd,
                       gpt.ffn(), seq_len, gpt.vocab_size, gpt.tied() ? "tied" : "untied");
  if (is_transformer())
    return fmt::format("{} layers, {} heads, width {}, context {}, vocab {}", gpt.n_layer,
                       gpt.n_head, gpt.n_embd, seq_len, gpt.vocab_size);
  return fmt::format("ResNet-{}, {}×{} images, {} classes", cnn.depth, cnn.image_size,
                     cnn.image_size, cnn.classes);
}

std::vector<std::string> workload_names() {
  std::vector<std::string> out = nn::gpt_preset_names();
  for (int d : kResnetDepths) out.push_back(fmt::format("resnet{}", d));
  out.emplace_back("custom");
  return out;
}

Workload make_workload(std::string_view name, const ModelOverrides& o) {
  Workload w;
  w.name = std::string(name);
  for (int d : kResnetDepths) {
    if (name != fmt::format("resnet{}", d)) continue;
    if (o.n_layer || o.n_head || o.n_embd || o.seq_len || o.vocab_size || o.family ||
        o.n_kv_head || o.ffn_hidden || o.tie_embeddings)
      fail("model '{}' is a CNN: --n-layer, --n-head, --n-embd, --seq-len, --vocab-size, --family, "
           "--n-kv-head, --ffn-hidden and --tie-embeddings apply to transformer models only", name);
    w.kind = WorkloadKind::cnn;
    w.optimizer = Optimizer::sgd_momentum;
    w.cnn.arch = w.name;
    w.cnn.depth = d;
    w.cnn.image_size = o.image_size.value_or(224);
    CnnCounts c = resnet_counts(d, w.cnn.image_size, w.cnn.classes);
    w.cnn.params = c.params;
    w.cnn.macs_per_sample = c.macs;
    w.cnn.activation_elements = c.activation_elements;
    // Goyal et al. 2017 ("Accurate, Large Minibatch SGD") trained ResNet-50 on ImageNet
    // to full accuracy with batches of up to 8192 images: the default fixed global batch.
    w.default_global_batch = 8192;
    w.origin = "torchvision ResNet v1.5 layer shapes (counted layer by layer)";
    w.data = {static_cast<double>(kImageNetTrainImages), static_cast<double>(kImageNetValImages),
              kImageNetJpegBytes, true,
              "ImageNet-1k (ILSVRC 2012): 1,281,167 training and 50,000 validation JPEGs of 108 KB "
              "on average"};
    return w;
  }
  if (o.image_size) fail("--image-size applies to ResNet models only, not '{}'", name);

  bool found = false;
  int64_t seq_len = 0;  // the planned sequence length; 0: the model's context
  if (name == "custom") {
    if (!o.n_layer || !o.n_head || !o.n_embd)
      fail("model 'custom' needs its shape: give --n-layer, --n-head and --n-embd (and "
           "optionally --seq-len, --vocab-size; --family llama with --n-kv-head, --ffn-hidden, "
           "--tie-embeddings)");
    w.gpt = nn::GptConfig{};
    w.gpt.family = o.family.value_or(nn::GptFamily::gpt2);
    if (w.gpt.llama()) {
      // The rotary base and epsilon do not change the plan; Llama 3's, so that a custom
      // shape reads as one.
      w.gpt.rope_theta = 500000.0;
      w.gpt.norm_eps = 1e-5;
    }
    w.default_global_batch = 512;
    w.origin = w.gpt.llama() ? "custom size, Llama family" : "custom size";
    found = true;
  }
  if (!found) {
    auto names = nn::gpt_preset_names();
    if (std::find(names.begin(), names.end(), std::string(name)) == names.end()) {
      std::string known;
      for (const auto& n : workload_names())
        if (n != "custom") known += (known.empty() ? "" : ", ") + n;
      fail("unknown model '{}': known models are {}; or 'custom' with --n-layer, --n-head and "
           "--n-embd", name, known);
    }
    w.gpt = nn::gpt_preset(name);
    if (o.family)
      fail("--family applies to --model custom; '{}' is a preset of the {} family (drop "
           "--family, or use --model custom with its shape)", name, nn::to_string(w.gpt.family));
    // GPT-2 paper: batches of 512 sequences of 1024 tokens.
    w.default_global_batch = 512;
    w.origin = w.gpt.llama() ? "Llama-family preset (nn/models/gpt_config)"
                             : "GPT-2 family preset (nn/models/gpt_config)";
    for (const auto& p : kPlannerPresets)
      if (name == p.name) {
        w.default_global_batch = p.global_batch;
        seq_len = p.seq_len;
        w.origin = p.origin;
      }
  }
  if (!w.gpt.llama() && (o.n_kv_head || o.ffn_hidden || o.tie_embeddings))
    fail("--n-kv-head, --ffn-hidden and --tie-embeddings describe the Llama family; '{}' is a "
         "GPT-2-family model (one key/value head per query head, a 4 × n_embd GELU MLP, the LM "
         "head tied): drop them, or use a llama preset or --model custom --family llama", name);
  if (o.n_layer) w.gpt.n_layer = *o.n_layer;
  if (o.n_head) w.gpt.n_head = *o.n_head;
  if (o.n_embd) w.gpt.n_embd = *o.n_embd;
  if (o.vocab_size) w.gpt.vocab_size = *o.vocab_size;
  if (o.n_kv_head) w.gpt.n_kv_head = *o.n_kv_head;
  if (o.ffn_hidden) w.gpt.ffn_hidden = *o.ffn_hidden;
  if (o.tie_embeddings) w.gpt.tie_embeddings = *o.tie_embeddings;
  if (o.seq_len) seq_len = *o.seq_len;
  // GPT-2 learns a position embedding of block_size rows (counted in its parameters): the
  // planned sequence is its context. A Llama's rotary positions hold no parameters and
  // reach any length: its context is the planned sequence too.
  if (seq_len > 0) w.gpt.block_size = seq_len;
  w.seq_len = w.gpt.block_size;
  w.gpt.validate();
  // Pre-tokenized text as `aiscale data tokenize` writes it: one 16-bit token id per token
  // while the vocabulary fits (GPT-2's 50,257), 32-bit ids above 65,536 (Llama 3's
  // 128,256); one pass over --tokens, no validation unless asked (--validation-samples).
  const bool wide = w.gpt.vocab_size > 65536;
  w.data = {0, 0, (wide ? 4.0 : 2.0) * static_cast<double>(w.seq_len), false,
            wide ? "pre-tokenized uint32 token ids (a vocabulary over 65,536), one pass over --tokens"
                 : "pre-tokenized uint16 token ids, one pass over --tokens"};
  return w;
}

}  // namespace aiscale::plan
