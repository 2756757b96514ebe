// The planner and the Llama family: FLOPs, parameters and activations of llama-tiny against
// hand counts, tensor-parallel sizes its shape rules out, and Llama 3 8B planned on one and
// two nodes of four H100s.
#include <gtest/gtest.h>

#include "aiscale/core/error.h"
#include "aiscale/nn/models/gpt.h"
#include "aiscale/plan/planner.h"

namespace aiscale::plan {
namespace {

// llama-tiny: 2 layers, width 64, 4 heads of 16, 2 key/value heads (kv_rows 32), SwiGLU
// width 176, vocabulary 256, untied head, context 64.
constexpr double L = 2, C = 64, A = 4, KV = 32, F = 176, V = 256, T = 64;

TEST(PlanLlama, TinyParametersByHand) {
  const Workload w = make_workload("llama-tiny");
  ASSERT_TRUE(w.gpt.llama());
  EXPECT_EQ(w.seq_len, 64);
  // Per layer: input_layernorm C, q/k/v (C + 2·KV)·C, o_proj C², post_attention_layernorm
  // C, gate/up/down 3·F·C = 64 + 8192 + 4096 + 64 + 33792 = 46208.
  const double layer = C + (C + 2 * KV) * C + C * C + C + 3 * F * C;
  EXPECT_EQ(layer, 46208);
  // embed_tokens and lm_head V·C each, the final norm C.
  EXPECT_EQ(w.params(), int64_t(L * layer + 2 * V * C + C));
  EXPECT_EQ(w.params(), 125248);
  EXPECT_DOUBLE_EQ(params_per_gpu(w, 1, 1), 125248);
  EXPECT_DOUBLE_EQ(layer_params_per_gpu(w, 1), layer);
  // Two tensor ranks: every matrix halved (K and V by key/value heads, gate and up by rows,
  // o_proj and down_proj by columns), the norms whole: 46080 / 2 + 128.
  EXPECT_DOUBLE_EQ(layer_params_per_gpu(w, 2), 23168);
  // ... and embed_tokens and lm_head split by vocabulary rows, no position embedding.
  EXPECT_DOUBLE_EQ(params_per_gpu(w, 2, 1), 2 * 23168 + 8192 + 8192 + 64);
  // Two stages: the first holds a layer and embed_tokens, the last a layer, the norm and
  // lm_head (its own matrix, not a copy).
  EXPECT_DOUBLE_EQ(params_per_gpu(w, 1, 2, false), layer + V * C);
  EXPECT_DOUBLE_EQ(params_per_gpu(w, 1, 2, true), layer + V * C + C);
}

TEST(PlanLlama, TinyFlopsByHandAndByOperation) {
  const Workload w = make_workload("llama-tiny");
  // 6·N + 12·L·C·T with N the multiplied parameters: all but embed_tokens (a lookup):
  // 6 × 108,864 + 12 × 2 × 64 × 64 = 653,184 + 98,304.
  const double per_token = 6.0 * (125248 - V * C) + 12.0 * L * C * T;
  EXPECT_DOUBLE_EQ(per_token, 751488);
  const ComputeEstimate e = transformer_training_flops(w, 1e6);
  EXPECT_DOUBLE_EQ(e.flops_per_sample, per_token);
  EXPECT_DOUBLE_EQ(e.flops, per_token * 1e6);
  EXPECT_NE(e.substituted.find("6 × 108,864 × "), std::string::npos) << e.substituted;
  EXPECT_NE(e.substituted.find("lookup"), std::string::npos) << e.substituted;
  // By operation, one token forward: Q, K, V 2·C·(C + 2·KV) = 16,384 (GQA: not 3·2·C²);
  // attention 4·T·C; o_proj 2·C²; gate, up and down 3 × 2·C·F = 67,584; head 2·V·C.
  const TransformerOpFlops ops = transformer_op_flops(w.gpt, w.seq_len);
  EXPECT_DOUBLE_EQ(ops.qkv, 16384);
  EXPECT_DOUBLE_EQ(ops.attention, 16384);
  EXPECT_DOUBLE_EQ(ops.out, 8192);
  EXPECT_DOUBLE_EQ(ops.mlp, 67584);
  EXPECT_DOUBLE_EQ(ops.head, 32768);
  // Forward and backward of every matmul, and 6 per norm weight (2 per layer, 1 final):
  // the engine's formula.
  EXPECT_DOUBLE_EQ(3.0 * (L * ops.layer() + ops.head) + 6.0 * (2 * L * C + C), per_token);
  // GPT-2's by-operation count adds up to its formula as well (biases and LayerNorms 6×).
  const Workload g = make_workload("gpt-tiny");
  const TransformerOpFlops go = transformer_op_flops(g.gpt, g.seq_len);
  const double gc = double(g.gpt.n_embd), gl = double(g.gpt.n_layer);
  EXPECT_DOUBLE_EQ(go.mlp, 2 * 2.0 * gc * 4 * gc);
  EXPECT_DOUBLE_EQ(3.0 * (gl * go.layer() + go.head) +
                       6.0 * (gl * 13 * gc + 2 * gc + double(g.gpt.block_size) * gc),
                   nn::gpt_train_flops_per_token(g.gpt, g.seq_len));
}

// The activations of one llama-tiny layer, tensor by tensor, in bytes (b = 1, bf16).
double tiny_layer_by_hand(bool flash) {
  const double sb = T * 1, e = 2;
  double bytes = 0;
  bytes += sb * C * e;         // input_layernorm's input
  bytes += sb * C * e;         // its output, qkv_proj's input
  bytes += sb * C * e;         // rotated Q
  bytes += sb * KV * e;        // rotated K (2 heads of 16)
  bytes += sb * KV * e;        // V
  bytes += sb * C * e;         // attention output, o_proj's input
  bytes += sb * C * e;         // post_attention_layernorm's input
  bytes += sb * C * e;         // its output, gate_up's input
  bytes += 2 * sb * F * e;     // gate and up
  bytes += sb * F * e;         // silu(gate)·up, down_proj's input
  if (flash) bytes += A * sb * 4;  // fp32 log-sum-exp per head and row
  else bytes += A * T * T * e;     // softmax output per head
  return bytes;
}

TEST(PlanLlama, TinyActivationsByHand) {
  const Workload tiny = make_workload("llama-tiny");
  EXPECT_DOUBLE_EQ(tiny_layer_by_hand(true), 125952);
  EXPECT_DOUBLE_EQ(llama_layer_activation_bytes(T, 1, C, A, KV, F, 1, Recompute::none, Attention::flash),
                   tiny_layer_by_hand(true));
  EXPECT_DOUBLE_EQ(llama_layer_activation_bytes(T, 1, C, A, KV, F, 1, Recompute::none,
                                                Attention::materialized),
                   tiny_layer_by_hand(false));
  // Selective recomputation drops the scores; a flash kernel stores none to drop.
  EXPECT_DOUBLE_EQ(llama_layer_activation_bytes(T, 1, C, A, KV, F, 1, Recompute::selective,
                                                Attention::materialized),
                   tiny_layer_by_hand(true) - A * T * 4);
  EXPECT_DOUBLE_EQ(llama_layer_activation_bytes(T, 1, C, A, KV, F, 1, Recompute::full),
                   T * C * 2);
  // Two tensor ranks with sequence parallelism: all of it halved; without, the four norm
  // tensors (input and output of each norm) whole.
  EXPECT_DOUBLE_EQ(llama_layer_activation_bytes(T, 1, C, A, KV, F, 2, Recompute::none),
                   tiny_layer_by_hand(true) / 2);
  EXPECT_DOUBLE_EQ(llama_layer_activation_bytes(T, 1, C, A, KV, F, 2, Recompute::none,
                                                Attention::flash, 2.0, false),
                   tiny_layer_by_hand(true) / 2 + 4 * T * C * 2 / 2);

  // The whole model on one GPU, generic accounting, bf16: both layers, the final norm's
  // input and output (4·s·h bytes) and fp32 logits (4·s·V), no dropout mask anywhere.
  Layout l;
  l.micro_batch = 1;
  Workload w = tiny;
  w.attention = Attention::flash;
  MemoryBreakdown m = memory_per_gpu(w, l, Precision::bf16);
  EXPECT_DOUBLE_EQ(m.activations, 2 * 125952 + 4 * T * C + 4 * T * V);
  EXPECT_DOUBLE_EQ(m.activations, 333824);
  // Full recomputation: each layer's input, plus one layer rematerialised in its backward.
  l.recompute = Recompute::full;
  m = memory_per_gpu(w, l, Precision::bf16);
  EXPECT_DOUBLE_EQ(m.activations, 2 * (T * C * 2) + 125952 + 4 * T * C + 4 * T * V);
}

TEST(PlanLlama, TinyModelStatesUnderEachZeroStage) {
  const Workload w = make_workload("llama-tiny");
  const double n = 125248;  // GptConfig::num_params, the layout's exact count
  // bf16 AdamW: 2-byte weights, fp32 gradients, 12 bytes of fp32 master weights, m and v;
  // ZeRO shards the optimizer state (1), the gradients (2), the weights (3) over dp = 4.
  const double expect[4][3] = {{2 * n, 4 * n, 12 * n},
                               {2 * n, 4 * n, 12 * n / 4},
                               {2 * n, 4 * n / 4, 12 * n / 4},
                               {2 * n / 4, 4 * n / 4, 12 * n / 4}};
  for (int zero = 0; zero <= 3; ++zero) {
    Layout l;
    l.dp = 4;
    l.zero = zero;
    const MemoryBreakdown m = memory_per_gpu(w, l, Precision::bf16);
    EXPECT_DOUBLE_EQ(m.params_on_gpu, n);
    EXPECT_DOUBLE_EQ(m.weights, expect[zero][0]) << "ZeRO-" << zero;
    EXPECT_DOUBLE_EQ(m.gradients, expect[zero][1]) << "ZeRO-" << zero;
    EXPECT_DOUBLE_EQ(m.optimizer, expect[zero][2]) << "ZeRO-" << zero;
    // ZeRO-3 gathers two layers ahead of their use (2-byte weights).
    EXPECT_DOUBLE_EQ(m.buffers, zero == 3 ? 2 * 46208 * 2 : 0) << "ZeRO-" << zero;
  }
}

TEST(PlanLlama, TinyOptimizerOffload) {
  // The optimizer state (fp32 master weights, m, v: 12 bytes a parameter) moves to host
  // memory: the GPUs keep 2 + 4 = 6 bytes a parameter over dp = 4 under ZeRO-3.
  const Workload w = make_workload("llama-tiny");
  const double n = 125248;
  Layout l;
  l.dp = 4;
  l.zero = 3;
  l.offload = true;
  const MemoryBreakdown m = memory_per_gpu(w, l, Precision::bf16);
  EXPECT_DOUBLE_EQ(m.optimizer, 0);
  EXPECT_DOUBLE_EQ(m.offloaded, 12 * n / 4);
  EXPECT_DOUBLE_EQ(m.weights + m.gradients, 6 * n / 4);
  Layout kept = l;
  kept.offload = false;
  // (A difference of totals over the 1 GiB fixed workspace: equal to well under a byte.)
  EXPECT_NEAR(memory_per_gpu(w, kept, Precision::bf16).total - m.total,
              12 * n / 4 * (1 + MemoryAssumptions{}.fragmentation), 1e-3);
  // The update: the fp32 gradient shard down and the bf16 working copy up over PCIe, AdamW's
  // 28 bytes a parameter in host memory.
  Partition part;
  part.id = part.name = "one";
  part.kind = "gpu";
  part.nodes = 1;
  part.gpus_per_node = 4;
  MachineFigures f;
  f.peak_flops = 100e12;
  f.utilisation.value = 0.5;
  f.intra_bytes_per_s.value = 100e9;
  f.node_bytes_per_s.value = 10e9;
  f.hbm_bytes_per_s.value = 1e12;
  const Assumptions a;
  const StepEstimate e = estimate_step(w, l, part, f, Precision::bf16, a);
  EXPECT_DOUBLE_EQ(e.optimizer_s, n / 4 * 6 / a.offload_pcie_bytes_per_s +
                                      n / 4 * 28 / a.offload_host_bytes_per_s);
  // Without a ZeRO stage there is no shard to offload; aiscale offloads ZeRO-3 on GPU ranks
  // without tensor parallelism.
  Layout ddp = l;
  ddp.zero = 0;
  ASSERT_TRUE(layout_problem(ddp, w));
  EXPECT_NE(layout_problem(ddp, w)->find("optimizer offload"), std::string::npos);
  const Workload g = make_workload("gpt2-124m");
  EXPECT_EQ(engine_gap(g, l, Precision::bf16, false), "");
  Layout split = l;
  split.tp = 2;
  split.dp = 2;
  EXPECT_NE(engine_gap(g, split, Precision::bf16, false).find("optimizer offload"), std::string::npos);
  Layout two = l;
  two.zero = 2;
  EXPECT_NE(engine_gap(g, two, Precision::bf16, false).find("ZeRO-3"), std::string::npos);
  EXPECT_NE(engine_gap(g, l, Precision::fp32, true).find("GPU ranks"), std::string::npos);
}

TEST(PlanLlama, TensorSizesTheShapeRulesOutAreSkippedWithTheReason) {
  // llama-tiny: 4 heads but 2 key/value heads, so tp 4 is impossible though it divides the
  // heads.
  const Workload w = make_workload("llama-tiny");
  Layout l;
  l.tp = 2;
  EXPECT_FALSE(layout_problem(l, w));
  l.tp = 4;
  const auto why = layout_problem(l, w);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("2 key/value heads"), std::string::npos) << *why;
  EXPECT_NE(why->find("model.n_kv_head"), std::string::npos) << *why;
  // The MLP width must split evenly too: 176 = 16 × 11 (a custom shape of 8 heads, 8 KV).
  ModelOverrides o;
  o.n_layer = 2, o.n_head = 8, o.n_embd = 64, o.n_kv_head = 8, o.ffn_hidden = 180;
  o.family = nn::GptFamily::llama;
  const Workload odd = make_workload("custom", o);
  l.tp = 8;
  const auto mlp = layout_problem(l, odd);
  ASSERT_TRUE(mlp);
  EXPECT_NE(mlp->find("MLP width 180"), std::string::npos) << *mlp;

  // The planner skips tp 4 on four GPUs and says why; pinned, it is refused with the reason.
  Partition part;
  part.id = part.name = "four";
  part.kind = "gpu";
  part.nodes = 1;
  part.gpus_per_node = 4;
  part.accelerator.id = "test-gpu";
  part.accelerator.memory_gib = 80;
  part.accelerator.peak_bf16 = 100;
  Target t;
  t.partition = &part;
  MachineFigures m;
  m.peak_flops = 100e12;
  m.utilisation.value = 0.5;
  m.intra_bytes_per_s.value = 100e9;
  m.node_bytes_per_s.value = 10e9;
  m.hbm_bytes_per_s.value = 1e12;
  PlanRequest r;
  r.workload = w;
  r.tokens = 1e6;
  r.global_batch = 8;
  const Search s = best_layout(r, t, 4, m, Assumptions{}, /*unsupported_too=*/true);
  ASSERT_TRUE(s.best) << s.reason;
  EXPECT_NE(s.best->layout.tp, 4);
  ASSERT_EQ(s.skipped.size(), 1u);
  EXPECT_NE(s.skipped[0].find("tp 4 skipped"), std::string::npos) << s.skipped[0];
  EXPECT_NE(s.skipped[0].find("key/value heads"), std::string::npos) << s.skipped[0];
  r.pins.tp = 4;
  const Search pinned = best_layout(r, t, 4, m, Assumptions{}, true);
  EXPECT_FALSE(pinned.best);
  EXPECT_NE(pinned.reason.find("key/value heads"), std::string::npos) << pinned.reason;
  try {
    check_request(r);
    ADD_FAILURE() << "tp 4 of llama-tiny accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.n_kv_head"), std::string::npos) << e.what();
  }
}

const Catalog& catalog() {
  static const Catalog cat = load_catalog(std::string(AISCALE_SOURCE_DIR) + "/data/systems");
  return cat;
}

TEST(PlanLlama, Llama3EightBOnOneAndTwoNodesOfFourH100s) {
  // MareNostrum 5's accelerated partition: 4 H100 (64 GB) a node.
  const Catalog& cat = catalog();
  const std::vector<Target> mn5 = cat.resolve("marenostrum5");
  ASSERT_EQ(mn5.size(), 1u);
  ASSERT_EQ(mn5[0].partition->gpus_per_node, 4);
  PlanRequest r;
  r.workload = make_workload("llama3-8b-shape");
  EXPECT_EQ(r.workload.seq_len, 8192);
  EXPECT_EQ(r.workload.default_global_batch, 512);
  r.tokens = 1e9;
  r.include_unsupported = false;  // GPU ranks train the llama family: only runnable layouts
  const double capacity = mn5[0].partition->accelerator.memory_bytes();
  for (long gpus : {4L, 8L}) {
    r.gpus = gpus;
    const PlanResult res = plan(r, mn5, cat, Calibration{}, Assumptions{});
    ASSERT_EQ(res.ranked.size(), 1u) << gpus << " GPUs: "
                                     << (res.rejected.empty() ? "" : res.rejected[0].reason);
    const Candidate& c = res.ranked[0];
    EXPECT_TRUE(c.runs()) << c.engine_gap;
    EXPECT_EQ(c.layout.gpus(), gpus);
    EXPECT_EQ(c.layout.global_batch(), 512);
    EXPECT_FALSE(layout_problem(c.layout, r.workload)) << c.layout.describe();
    EXPECT_EQ(8 % c.layout.tp, 0) << c.layout.describe();      // key/value heads
    EXPECT_EQ(14336 % c.layout.tp, 0) << c.layout.describe();  // SwiGLU width
    EXPECT_LE(c.layout.tp, 4);  // inside a node
    EXPECT_LE(c.memory.total, capacity) << c.layout.describe();
    // 8.03B parameters at 18 bytes do not fit one 64 GB GPU unsharded: the layout splits
    // them (tensor, pipeline or ZeRO).
    EXPECT_LT(c.memory.weights + c.memory.gradients + c.memory.optimizer, capacity);
    EXPECT_TRUE(c.layout.tp > 1 || c.layout.pp > 1 || c.layout.zero >= 1) << c.layout.describe();
    // Model FLOPs per step: the engine's formula over 512 × 8192 tokens.
    EXPECT_DOUBLE_EQ(c.step.model_flops_per_step,
                     nn::gpt_train_flops_per_token(r.workload.gpt, 8192) * 512 * 8192);
  }
  // --offload-optimizer on one node: the chosen layout offloads, and its GPU model states
  // are 6 bytes a parameter over the ZeRO shards (or less with tensor/pipeline splits).
  r.gpus = 4;
  r.pins.offload = true;
  {
    const PlanResult res = plan(r, mn5, cat, Calibration{}, Assumptions{});
    ASSERT_EQ(res.ranked.size(), 1u) << (res.rejected.empty() ? "" : res.rejected[0].reason);
    const Candidate& c = res.ranked[0];
    EXPECT_TRUE(c.layout.offload);
    EXPECT_GE(c.layout.zero, 1);
    EXPECT_DOUBLE_EQ(c.memory.optimizer, 0);
    EXPECT_GT(c.memory.offloaded, 0);
    EXPECT_LE(c.memory.total, capacity);
  }
  r.pins.offload = false;
  // In fp8 (the H100s have FP8 tensor cores): runnable as well.
  r.precision = Precision::fp8;
  const PlanResult res = plan(r, mn5, cat, Calibration{}, Assumptions{});
  ASSERT_EQ(res.ranked.size(), 1u) << (res.rejected.empty() ? "" : res.rejected[0].reason);
  EXPECT_TRUE(res.ranked[0].runs()) << res.ranked[0].engine_gap;  // fp8 on the H100s
}

TEST(PlanLlama, PresetsAndCustomShapes) {
  const Workload one = make_workload("llama3-1b-shape");
  EXPECT_EQ(one.params(), 1235814400);
  EXPECT_NE(one.origin.find("Llama 3.2 1B shape (Meta's config.json)"), std::string::npos);
  EXPECT_NE(make_workload("llama3-3b-shape").origin.find("Llama 3.2 3B"), std::string::npos);
  const Workload eight = make_workload("llama3-8b-shape");
  EXPECT_NE(eight.origin.find("Llama 3.1 8B"), std::string::npos);
  EXPECT_EQ(eight.params(), nn::gpt_preset("llama3-8b-shape").num_params());
  EXPECT_NE(eight.describe().find("(8 key/value)"), std::string::npos) << eight.describe();
  EXPECT_NE(eight.describe().find("untied"), std::string::npos) << eight.describe();
  for (const char* name : {"llama3-1b-shape", "llama3-3b-shape", "llama3-8b-shape", "llama-tiny"}) {
    const auto names = workload_names();
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  }
  // Llama 3's 128,256 ids are stored as 32-bit token ids: 4 bytes a token on the filesystem.
  EXPECT_DOUBLE_EQ(eight.data.bytes_per_sample, 4.0 * 8192);
  EXPECT_DOUBLE_EQ(make_workload("llama-tiny").data.bytes_per_sample, 2.0 * 64);
  // --seq-len overrides the planned context (no parameter depends on it).
  ModelOverrides seq;
  seq.seq_len = 4096;
  EXPECT_EQ(make_workload("llama3-8b-shape", seq).seq_len, 4096);
  EXPECT_EQ(make_workload("llama3-8b-shape", seq).params(), eight.params());
  // A custom Llama: Llama 3 8B's shape by hand gives its parameter count.
  ModelOverrides o;
  o.family = nn::GptFamily::llama;
  o.n_layer = 32, o.n_head = 32, o.n_embd = 4096, o.n_kv_head = 8, o.ffn_hidden = 14336;
  o.vocab_size = 128256, o.tie_embeddings = false, o.seq_len = 8192;
  EXPECT_EQ(make_workload("custom", o).params(), eight.params());
  EXPECT_EQ(eight.params(), 8030261248);
  // The Llama options on a GPT-2 model, --family on a preset: refused, naming them.
  ModelOverrides bad;
  bad.n_kv_head = 4;
  EXPECT_THROW(make_workload("gpt2-124m", bad), Error);
  ModelOverrides fam;
  fam.family = nn::GptFamily::llama;
  EXPECT_THROW(make_workload("gpt2-124m", fam), Error);
  EXPECT_THROW(make_workload("resnet50", fam), Error);
  // A key/value head count that does not divide the heads: the config's own error.
  o.n_kv_head = 6;
  EXPECT_THROW(make_workload("custom", o), Error);
}

}  // namespace
}  // namespace aiscale::plan
