// The GPT model's compute as blocks: the embedding, the transformer layer and the head
// (final norm, LM head, cross-entropy), each with its forward and explicit
// backward over one op backend, and each able to hold a tensor-parallel slice of its
// weights (gpt_shard.h) through the layers of parallel/tensor. With one tensor rank the
// blocks issue exactly the op sequence of the plain model (the same bits).
//
// Both families of gpt_config.h: gpt2 (LayerNorm, GELU MLP, biases) and llama (RMSNorm,
// rotary positions on Q and K, grouped-query attention, SwiGLU over the fused gate/up
// projection, no biases). The norms' statistics buffers (mean, rstd) serve both: RMSNorm
// keeps rstd only.
//
// The blocks own the activations (allocated once, at construction); the parameters and
// gradients are passed in as views, so the caller decides where they live (a flat buffer,
// or a ZeRO-3 gather buffer).
#pragma once
#include <cstdint>
#include <vector>

#include "aiscale/core/tensor.h"
#include "aiscale/nn/models/gpt_shard.h"
#include "aiscale/ops/ops.h"
#include "aiscale/parallel/tensor/layers.h"

namespace aiscale::nn {

// Views of one layer's parameters (or gradients).
struct LayerParams {
  float *ln1_w, *ln1_b, *qkv_w, *qkv_b, *attproj_w, *attproj_b;
  float *ln2_w, *ln2_b, *fc_w, *fc_b, *fcproj_w, *fcproj_b;
};
// The views of layer l's values at `layer_base` (the layer's start); the biases are null
// in the llama family.
LayerParams layer_views(const GptShardLayout& layout, float* layer_base);

struct GptDims {
  int64_t B = 0, T = 0, C = 0, V = 0, L = 0;
  int64_t NH = 0;  // attention heads on this rank
  int64_t NKV = 0; // key/value heads on this rank (NH for gpt2)
  int64_t Cl = 0;  // their channels: C / tensor ranks
  int64_t QKVl = 0;  // columns of this rank's QKV activations: Cl + 2 NKV HS
  int64_t Fl = 0;    // MLP hidden channels on this rank (ffn / tensor ranks)
  int64_t FCl = 0;   // columns of the MLP's first matmul: Fl (gpt2), 2 Fl (gate, up)
  int64_t N = 0;   // tokens of a micro-batch, B * T
  int64_t R = 0;   // of them, the rows this rank holds outside the tensor-parallel layers
  parallel::tensor::VocabSlice vocab;
};

class GptBlocks {
 public:
  // The layers [first_layer, end_layer) (a pipeline stage's; all by default), with the
  // head when `head`. B is the micro-batch this set of activations holds. recompute: the
  // LayerNorm and GELU outputs are rebuilt in backward; recompute_layers (full
  // recomputation): only each layer's output (the next one's input) is kept, and
  // layer_backward runs the layer's forward again first, into one set of buffers shared by
  // the layers.
  GptBlocks(const ops::Backend& ops, const parallel::tensor::TensorGroup& group,
            const GptConfig& c, int64_t B, int64_t T, bool recompute, bool recompute_layers,
            int64_t first_layer = 0, int64_t end_layer = -1, bool head = true);

  const GptDims& dims() const { return d_; }
  size_t bytes() const { return arena_.bytes(); }

  // tokens (B, T) -> the embedded (R, C) residual stream.
  void embedding_forward(const int32_t* tokens, const float* wte, const float* wpe);
  void layer_forward(int64_t l, const LayerParams& w);
  // Returns the mean cross-entropy over the micro-batch (every rank the same), or NaN
  // without targets (then only the logits). `head`: the LM head's (vocab slice, C) weight,
  // the token embedding when tied; lnf_b null in the llama family.
  float head_forward(const float* lnf_w, const float* lnf_b, const float* head,
                     const int32_t* targets);

  // Backward in the reverse order; parameter gradients accumulate (+=).
  void head_backward(float grad_multiplier, const float* lnf_w, const float* head, float* dlnf_w,
                     float* dlnf_b, float* dhead, const int32_t* targets);
  void layer_backward(int64_t l, const LayerParams& w, const LayerParams& g);
  void embedding_backward(const int32_t* tokens, float* dwte, float* dwpe);

  // This rank's logits of the last forward, (N, vocab.size); null after backward.
  const float* logits() const { return logits_valid_ ? logits_ : nullptr; }

  // A pipeline stage's boundaries, (R, C) each: the input of its first layer (where a
  // stage receives it), the output of its last, and in backward the gradient of its
  // output (to receive into, before layer_backward of the last layer) and of its input
  // (after layer_backward of the first).
  float* stage_input() { return encoded_; }
  const float* stage_output() const { return layer_input(end_); }
  float* stage_output_grad();
  const float* stage_input_grad() const { return d_res_out_; }

 private:
  struct LayerActs {
    float *ln1, *ln1_mean, *ln1_rstd, *ln1_full;  // ln1_full (N, C): sequence parallel only
    float *qkv, *atty, *att, *attproj, *residual2;
    float *ln2, *ln2_mean, *ln2_rstd, *ln2_full;
    float *fch, *fch_gelu, *fcproj, *residual3;
  };
  const float* layer_input(int64_t l) const {
    return l == first_ ? encoded_ : acts_[l - first_ - 1].residual3;
  }
  void allocate(bool head);

  // Norms of either family: LayerNorm (mean, rstd) or RMSNorm (rstd).
  void norm_forward(float* out, float* mean, float* rstd, const float* x, const float* w,
                    const float* b);
  void norm_backward(float* dx, float* dw, float* db, const float* dout, const float* x,
                     const float* w, const float* mean, const float* rstd);

  const ops::Backend& ops_;
  parallel::tensor::TensorGroup group_;
  bool llama_ = false;
  float norm_eps_ = 1e-5f;
  std::vector<float> rope_cos_, rope_sin_;  // (T, HS/2): positions [0, T)
  bool recompute_ = false, recompute_layers_ = false;
  int64_t first_ = 0, end_ = 0;  // the layers held
  GptDims d_;
  Arena arena_;
  float* encoded_ = nullptr;  // (R, C)
  std::vector<LayerActs> acts_;
  float *lnf_ = nullptr, *lnf_mean_ = nullptr, *lnf_rstd_ = nullptr, *lnf_full_ = nullptr;
  float* logits_ = nullptr;   // (N, Vl); holds dlogits after backward
  float* xent_stats_ = nullptr;
  std::vector<float> losses_, dlosses_;
  bool logits_valid_ = false;
  // Activation gradients: one set reused by every layer. d_res_out is the gradient of the
  // output of the block being processed, d_res_in of its input.
  struct {
    float *lnf, *res_a, *res_b, *residual2, *proj, *fch_gelu, *fch, *ln, *atty, *qkv, *att;
    float* full;  // (N, C) sequence-parallel scratch
  } g_{};
  float *d_res_out_ = nullptr, *d_res_in_ = nullptr;
};

}  // namespace aiscale::nn
