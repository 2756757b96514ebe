#include "aiscale/plan/workload.h"

#include <algorithm>

#include <fmt/format.h>

#include "aiscale/core/error.h"
#include "aiscale/plan/resnet.h"

namespace aiscale::plan {
namespace {

// The planner's facts about the engine's larger presets (nn/models/gpt_config.cpp holds
// their shapes): the global batch their sources train with, and where the shape comes from.
struct PlannerPreset {
  const char* name;
  int64_t global_batch;   // sequences per step
  const char* origin;
};

const PlannerPreset kPlannerPresets[] = {
    {"gpt-857m", 512,
     "shape chosen by aiscale (the sources give none): of GPT-2/3-style shapes (head size 64 or "
     "128, width a multiple of 128, width/layers 32-128) 33 layers × 1408 with 22 heads of 64 is "
     "the closest to 857M"},
    {"gpt2-2.7b", 512, "GPT-2 family, 60 layers × 1920 (30 heads of 64), GPT-2 vocab and context"},
    {"gpt2-6.6b", 512, "GPT-2 family, 84 layers × 2560 (40 heads of 64), GPT-2 vocab and context"},
    {"gpt3-175b", 1536,
     "GPT-3 paper 175B: 96 layers, width 12288, 96 heads, context 2048, batch 1536 × 2048"},
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
    if (o.n_layer || o.n_head || o.n_embd || o.seq_len || o.vocab_size)
      fail("model '{}' is a CNN: --n-layer, --n-head, --n-embd, --seq-len and --vocab-size apply to GPT "
           "models only", name);
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
  if (name == "custom") {
    if (!o.n_layer || !o.n_head || !o.n_embd)
      fail("model 'custom' needs its shape: give --n-layer, --n-head and --n-embd (and "
           "optionally --seq-len, --vocab-size)");
    w.gpt = nn::GptConfig{};
    w.default_global_batch = 512;
    w.origin = "custom size";
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
    // GPT-2 paper: batches of 512 sequences of 1024 tokens.
    w.default_global_batch = 512;
    w.origin = "GPT-2 family preset (nn/models/gpt_config)";
    for (const auto& p : kPlannerPresets)
      if (name == p.name) {
        w.default_global_batch = p.global_batch;
        w.origin = p.origin;
      }
  }
  if (o.n_layer) w.gpt.n_layer = *o.n_layer;
  if (o.n_head) w.gpt.n_head = *o.n_head;
  if (o.n_embd) w.gpt.n_embd = *o.n_embd;
  if (o.vocab_size) w.gpt.vocab_size = *o.vocab_size;
  if (o.seq_len) w.gpt.block_size = *o.seq_len;
  w.seq_len = w.gpt.block_size;
  w.gpt.validate();
  // Pre-tokenized text: one 16-bit token id per token (a GPT-2 vocabulary of 50,257 fits),
  // one pass over --tokens, no validation unless asked (--validation-samples).
  w.data = {0, 0, 2.0 * static_cast<double>(w.seq_len), false,
            "pre-tokenized uint16 token ids, one pass over --tokens"};
  return w;
}

}  // namespace aiscale::plan
