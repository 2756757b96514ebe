#include "aiscale/plan/memory.h"

#include <algorithm>
#include <cmath>

#include "aiscale/core/error.h"
#include "aiscale/nn/models/gpt_shard.h"
#include "aiscale/plan/engine_support.h"
#include "aiscale/plan/flops.h"

namespace aiscale::plan {

StateBytes state_bytes(Optimizer opt, Precision p) {
  if (opt == Optimizer::sgd_momentum) return {4, 4, 4};
  if (is_mixed(p)) return {2, 4, 12};
  return {4, 4, 8};
}

bool is_aiscale(Accounting acc) { return acc != Accounting::generic; }

Accounting accounting_for(bool runs, bool cpu_partition) {
  if (!runs) return Accounting::generic;
  return cpu_partition ? Accounting::aiscale_cpu : Accounting::aiscale_gpu;
}

TensorSplit tensor_split(Accounting acc) {
  if (!is_aiscale(acc)) return {};
  const EngineSupport& e = engine_support_for(acc == Accounting::aiscale_cpu);
  return {e.vocab_parallel, e.sequence_parallel};
}

double layer_params_per_gpu(const Workload& w, int tp) {
  const auto& g = w.gpt;
  const double c = static_cast<double>(g.n_embd);
  const double f = static_cast<double>(g.ffn());
  // The matrices split over tp (Megatron): the fused QKV by heads (Q's C rows and, with
  // grouped-query attention, K's and V's kv_rows each), the MLP's first matrix by rows (GPT-2
  // c_fc: F; Llama gate_up: gate F and up F), the output projection and the MLP's last
  // matrix by columns. GPT-2: 12C²; Llama: C·(C + 2·kv_rows) + C² + 3·F·C.
  const double matrices = c * static_cast<double>(g.qkv_rows()) + c * c +
                          c * static_cast<double>(g.fc_rows()) + f * c;
  if (!g.has_bias())  // Llama: no biases; the two RMSNorm weights (2C) replicated
    return matrices / tp + 2.0 * c;
  // GPT-2: the QKV and c_fc biases (3C + 4C) split; the two output projection biases and
  // the two LayerNorms (2C + 4C) replicated.
  return (matrices + static_cast<double>(g.qkv_rows() + g.fc_rows())) / tp + 6.0 * c;
}

double position_params(const Workload& w) {
  return w.gpt.learned_positions() ? static_cast<double>(w.gpt.block_size) * w.gpt.n_embd : 0.0;
}

double final_norm_params(const Workload& w) {
  return (w.gpt.has_bias() ? 2.0 : 1.0) * static_cast<double>(w.gpt.n_embd);
}

double untied_head_params_per_gpu(const Workload& w, int tp, bool vocab_parallel) {
  if (w.gpt.tied()) return 0.0;
  return static_cast<double>(w.gpt.vocab_size) * w.gpt.n_embd / (vocab_parallel ? tp : 1);
}

// The LM head's logit columns on one of aiscale's GPU ranks: the vocabulary padded to 128,
// or a tensor rank's padded slice of it (nn/models/gpt_shard.h).
double gpu_logit_columns(const Workload& w, int tp, bool vocab_parallel) {
  const int64_t v = w.gpt.vocab_size;
  if (vocab_parallel && tp > 1) return double(nn::vocab_slice_rows(v, tp, nn::gpu_vocab_align(v, tp)));
  return std::ceil(double(v) / 128.0) * 128.0;
}

double params_per_gpu(const Workload& w, int tp, int pp, bool last_stage, bool vocab_parallel) {
  if (!w.is_transformer()) return static_cast<double>(w.params());
  const auto& g = w.gpt;
  const double c = static_cast<double>(g.n_embd);
  const double layer = layer_params_per_gpu(w, tp);
  const double layers_here = static_cast<double>((g.n_layer + pp - 1) / pp);
  const double wte = static_cast<double>(g.vocab_size) * c / (vocab_parallel ? tp : 1);
  const double wpe = position_params(w);  // none with rotary positions
  const double ln_f = final_norm_params(w);
  const double head = untied_head_params_per_gpu(w, tp, vocab_parallel);
  if (pp == 1) return g.n_layer * layer + wte + wpe + ln_f + head;
  // The last stage's output layer: a copy of the tied embedding, or the untied LM head
  // (its own matrix, as large), which the first stage then does not hold.
  if (last_stage) return layers_here * layer + wte + ln_f;
  return layers_here * layer + wte + wpe;
}

double zero_paper_bytes(double psi, int stage, int nd, double k) {
  if (nd < 1) fail("ZeRO needs at least one data-parallel device (got {})", nd);
  switch (stage) {
    case 0: return (2 + 2 + k) * psi;
    case 1: return 4 * psi + k * psi / nd;
    case 2: return 2 * psi + (2 + k) * psi / nd;
    case 3: return (2 + 2 + k) * psi / nd;
  }
  fail("ZeRO stage {} does not exist: use 0, 1, 2 or 3", stage);
}

double transformer_layer_activation_bytes(double s, double b, double h, double a, int t,
                                          Recompute r, Attention att, double element_bytes,
                                          bool sequence_parallel) {
  const double sbh = s * b * h;
  const double scale = element_bytes / 2.0;  // Korthikanti's counts assume 16-bit elements
  // 34·s·b·h per layer: split over t with sequence parallelism, else 10 of it whole.
  const double per_sbh = sequence_parallel ? 34.0 / t : 10.0 + 24.0 / t;
  if (r == Recompute::full) return 2.0 * sbh / (sequence_parallel ? t : 1) * scale;
  if (att == Attention::flash) return per_sbh * sbh * scale + 4.0 * a * s * b / t;
  if (r == Recompute::selective) return per_sbh * sbh * scale;
  return sbh * (per_sbh + 5.0 * a * s / (h * t)) * scale;
}

double llama_layer_activation_bytes(double s, double b, double h, double a, double kv, double f,
                                    int t, Recompute r, Attention att, double element_bytes,
                                    bool sequence_parallel) {
  // What backward needs, tensor by tensor, in 16-bit elements (sb = s·b tokens):
  //   input_layernorm's input x (RMSNorm backward needs x; its per-token 1/rms is fp32 and
  //     one value a token, left out as Korthikanti leave out LayerNorm's statistics)  2·sb·h
  //   its output, the QKV projection's input                                        2·sb·h
  //   Q after the rotation (the rotation's own backward needs only cos/sin)          2·sb·h
  //   K after the rotation, and V: kv_heads heads each (grouped-query attention)     4·sb·kv
  //   the attention output, o_proj's input                                           2·sb·h
  //   post_attention_layernorm's input (the residual stream after attention)         2·sb·h
  //   its output, gate_up's input                                                    2·sb·h
  //   gate and up (SwiGLU's backward: d_gate needs gate and up, d_up needs silu(gate),
  //     recomputed from gate)                                                        4·sb·f
  //   h = silu(gate)·up, down_proj's input                                           2·sb·f
  // = (12·h + 4·kv + 6·f)·sb. The scores: materialized attention keeps the softmax output,
  // which both the softmax's and AV's backward read (no dropout: no mask, no second
  // copy), 2·a·s²·b; a flash kernel one fp32 log-sum-exp per head and row, 4·a·s·b.
  // Under tensor parallelism Q, K, V, the attention output, gate, up and h are split by
  // heads or MLP rows; the four norm tensors (8·sb·h) are split by sequence parallelism,
  // else whole on every rank.
  const double sb = s * b;
  const double scale = element_bytes / 2.0;
  const double norms = 8.0 * sb * h, split = (4.0 * h + 4.0 * kv + 6.0 * f) * sb;
  if (r == Recompute::full) return 2.0 * sb * h / (sequence_parallel ? t : 1) * scale;
  const double kept = ((sequence_parallel ? norms / t : norms) + split / t) * scale;
  if (att == Attention::flash) return kept + 4.0 * a * sb / t;
  if (r == Recompute::selective) return kept;
  return kept + 2.0 * a * s * sb / t * scale;
}

namespace {

// Activation bytes of one pipeline stage (first or last) for a transformer.
double transformer_activations(const Workload& w, const Layout& l, Precision p, bool last,
                               Accounting acc) {
  const auto& g = w.gpt;
  const double s = static_cast<double>(w.seq_len), b = l.micro_batch;
  const double h = static_cast<double>(g.n_embd), a = static_cast<double>(g.n_head);
  const double v = static_cast<double>(g.vocab_size);
  const double scale = activation_bytes(p) / 2.0;  // the formulas assume 16-bit activations
  const double layers_here = static_cast<double>((g.n_layer + l.pp - 1) / l.pp);
  // 1F1B: the first stage holds min(pp, accumulation) micro-batches in flight, the last one.
  const double in_flight = last ? 1.0 : std::min<double>(l.pp, l.grad_accum);
  const double elem = activation_bytes(p);
  const bool aiscale = is_aiscale(acc);
  const TensorSplit split = tensor_split(acc);
  // What stays whole on every tensor rank without sequence parallelism (b·s·h elements).
  const double whole_tp = split.sequence_parallel ? l.tp : 1.0;
  // Korthikanti's 34·s·b·h holds two 1-byte dropout masks (attention output, MLP output):
  // aiscale trains without dropout, so it keeps 32·s·b·h (on GPU ranks without sequence
  // parallelism 8·s·b·h of it whole and 24·s·b·h split: the LayerNorms' inputs and outputs
  // and the residual stream on every rank, the QKV, attention output and MLP split).
  // (The Llama block has no dropout: its count holds no masks.)
  const double masks = aiscale && !g.llama() && l.recompute != Recompute::full
                           ? 2.0 * s * b * h / whole_tp * scale
                           : 0.0;
  auto layer = [&](Recompute r) {
    if (g.llama())
      return llama_layer_activation_bytes(s, b, h, a, static_cast<double>(g.kv_rows()),
                                          static_cast<double>(g.ffn()), l.tp, r, w.attention,
                                          elem, split.sequence_parallel);
    return transformer_layer_activation_bytes(s, b, h, a, l.tp, r, w.attention, elem,
                                              split.sequence_parallel);
  };
  double bytes = layers_here * in_flight * (layer(l.recompute) - masks);
  if (l.recompute == Recompute::full)  // one layer rematerialised during its backward
    bytes += layer(Recompute::none);
  const bool first = !last || l.pp == 1;
  const bool has_output = last || l.pp == 1;
  double other = 0;
  if (first && !aiscale && !g.llama())
    other += s * b * h * in_flight / whole_tp;  // embedding dropout mask
  // The final norm's input and output (LayerNorm or RMSNorm), the LM head's input.
  if (has_output) other += 4.0 * s * b * h / whole_tp;
  // The logits: split over the tensor ranks with a vocabulary-parallel LM head, else the
  // whole vocabulary on every rank.
  const double vocab_tp = split.vocab_parallel ? l.tp : 1.0;
  double logits = 0;
  if (has_output)
    logits = acc == Accounting::aiscale_gpu
                 ? elem * s * b * gpu_logit_columns(w, l.tp, split.vocab_parallel)  // padded, in place
             : aiscale ? elem * s * b * std::ceil(v / 128.0) * 128.0 / vocab_tp
                       : 4.0 * s * b * v / vocab_tp * scale;  // fp32 for the loss
  return bytes + other * scale + logits;
}

MemoryBreakdown stage_memory(const Workload& w, const Layout& l, Precision p,
                             const MemoryAssumptions& a, bool last, Accounting acc,
                             bool generic = false) {
  if (!generic && l.pp > 1 && w.is_transformer() && is_aiscale(acc) &&
      engine_support_for(acc == Accounting::aiscale_cpu).pipeline_recomputes_stages) {
    // aiscale's GPU stages (nn/models/gpt_cuda_pp.cuh): the stage's layers with the
    // embeddings and the final norm (as a last stage holds them, plus the position
    // embedding), one micro-batch's activation buffers for the stage's layers and the LM
    // head's on every stage (one micro-batch in flight: each forward is recomputed before
    // its backward), the residual stream between every pair of layers, and the stash of
    // the micro-batches' inputs in flight (1F1B: up to pp).
    Layout one = l;
    one.grad_accum = 1;
    MemoryBreakdown m = stage_memory(w, one, p, a, /*last=*/true, acc, /*generic=*/true);
    const StateBytes sb = state_bytes(w.optimizer, p);
    const double bsh = activation_bytes(p) * double(l.micro_batch) * double(w.seq_len) *
                       double(w.gpt.n_embd);
    // Beyond what a last stage holds: the position embedding, and an untied LM head's
    // token embedding.
    const double wpe = position_params(w) +
                       untied_head_params_per_gpu(w, l.tp, tensor_split(acc).vocab_parallel);
    const double layers_here = double((w.gpt.n_layer + l.pp - 1) / l.pp);
    const double wpe_optimizer = sb.optimizer / (l.zero >= 1 ? double(l.dp) : 1.0);  // ZeRO-1
    const double state = wpe * (sb.weights + sb.gradients + wpe_optimizer);
    const double extra = std::min<double>(l.pp, l.grad_accum) * bsh +
                         (double(w.gpt.n_layer) + 1.0 - layers_here) * bsh;
    m.params_on_gpu += wpe;
    m.weights += wpe * sb.weights;
    m.gradients += wpe * sb.gradients;
    m.optimizer += wpe * wpe_optimizer;
    m.buffers += extra;
    m.total += (state + extra) * (1.0 + a.fragmentation);
    m.workspace += (state + extra) * a.fragmentation;
    m.stage = last ? "last" : "first";
    return m;
  }
  MemoryBreakdown m;
  const StateBytes sb = state_bytes(w.optimizer, p);
  const double psi = params_per_gpu(w, l.tp, l.pp, last, tensor_split(acc).vocab_parallel);
  const double nd = l.dp;
  m.params_on_gpu = psi;
  m.weights = sb.weights * psi / (l.zero >= 3 ? nd : 1.0);
  m.gradients = sb.gradients * psi / (l.zero >= 2 ? nd : 1.0);
  m.optimizer = sb.optimizer * psi / (l.zero >= 1 ? nd : 1.0);
  if (l.offload) std::swap(m.optimizer, m.offloaded);
  if (w.is_transformer()) {
    m.activations = transformer_activations(w, l, p, last, acc);
    const double c = static_cast<double>(w.gpt.n_embd);
    // ZeRO-3 gathers a tensor rank's slice of a layer (dp x tp: each rank's local buffer
    // sharded over its data group); the whole layer, 12C² + 13C, with one tensor rank.
    const double layer = layer_params_per_gpu(w, l.tp);
    if (l.zero == 3) m.buffers = 2.0 * layer * sb.weights;  // two layers gathered ahead of use
    if (l.zero >= 2 && l.dp > 1 && acc == Accounting::aiscale_gpu) {
      // aiscale's GPU ZeRO-2/3 (nn/models/gpt_zero3.cuh): three layers' fp32 gradient buffers (one
      // computing, two reduce-scattering), the embeddings and the final norm gathered
      // with their fp32 gradients (a tensor rank's slice of the vocabulary), and (ZeRO-2,
      // whose layers stay gathered in the weights above) this rank's shard of the working
      // copy that AdamW writes.
      const auto& g = w.gpt;
      const double vocab_rows = gpu_logit_columns(w, l.tp, tensor_split(acc).vocab_parallel);
      const double resident = vocab_rows * c * (g.tied() ? 1.0 : 2.0) + position_params(w) +
                              final_norm_params(w);
      m.buffers += 3.0 * layer * 4.0 + resident * (4.0 + sb.weights);
      if (l.zero == 2) m.buffers += sb.weights * psi / nd;
    }
    if (l.zero == 1 && l.dp > 1 && is_aiscale(acc)) {
      // aiscale's ZeRO-1 all-gathers the new working copy into a flat buffer of its own
      // (optim/zero1.cuh), which shares the logits' memory where it fits there.
      const double logits = activation_bytes(p) * static_cast<double>(l.micro_batch) *
                            static_cast<double>(w.seq_len) *
                            gpu_logit_columns(w, l.tp, tensor_split(acc).vocab_parallel);
      const double flat = psi * sb.weights;
      if (flat > logits) m.buffers += flat;
    }
    if (p == Precision::fp8 && is_aiscale(acc)) {
      // FP8 linear layers (ops/cuda/fp8.cuh Fp8Training): one layer's operands at a time,
      // a byte a value: the input (or its transpose) and the output gradient in both
      // layouts over the widest input or output, and the widest weight.
      const LinearWidths lw = linear_widths(w.gpt);
      const double tp = static_cast<double>(l.tp);
      const double up = lw.up / tp, qkv = lw.qkv / tp;
      const double widest = std::max({c, qkv, up});
      const double rows = static_cast<double>(l.micro_batch) * static_cast<double>(w.seq_len);
      m.buffers += 3.0 * rows * widest + std::max({qkv * c, c * c / tp, up * c});
    }
  } else {
    m.activations = w.cnn.activation_elements * l.micro_batch * activation_bytes(p);
  }
  const double modelled = m.weights + m.gradients + m.optimizer + m.activations + m.buffers;
  m.workspace = a.fixed_bytes + a.fragmentation * modelled;
  m.total = modelled + m.workspace;
  m.stage = l.pp == 1 ? "all" : (last ? "last" : "first");
  return m;
}

}  // namespace

MemoryBreakdown memory_per_gpu(const Workload& w, const Layout& l, Precision p,
                               const MemoryAssumptions& a, Accounting acc) {
  validate_layout(l, w);
  MemoryBreakdown first = stage_memory(w, l, p, a, false, acc);
  if (l.pp == 1) return first;
  MemoryBreakdown last = stage_memory(w, l, p, a, true, acc);
  return last.total > first.total ? last : first;
}

}  // namespace aiscale::plan
