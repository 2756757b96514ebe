// Memory per GPU against the ZeRO paper's formulas and Korthikanti et al.'s activations.
#include <gtest/gtest.h>

#include <cmath>

#include "aiscale/core/error.h"
#include "aiscale/plan/memory.h"

namespace aiscale::plan {
namespace {

TEST(PlanMemory, ZeroPaperExampleSevenAndAHalfBillionOnSixtyFourGpus) {
  // Rajbhandari et al. 2020, Figure 1: Ψ = 7.5B, K = 12, Nd = 64.
  const double psi = 7.5e9;
  EXPECT_DOUBLE_EQ(zero_paper_bytes(psi, 0, 64), 120e9);
  EXPECT_NEAR(zero_paper_bytes(psi, 1, 64) / 1e9, 31.4, 0.05);
  EXPECT_NEAR(zero_paper_bytes(psi, 2, 64) / 1e9, 16.6, 0.05);
  EXPECT_NEAR(zero_paper_bytes(psi, 3, 64) / 1e9, 1.9, 0.05);
  EXPECT_DOUBLE_EQ(zero_paper_bytes(psi, 1, 64), 4 * psi + 12 * psi / 64);
  EXPECT_DOUBLE_EQ(zero_paper_bytes(psi, 2, 64), 2 * psi + 14 * psi / 64);
  EXPECT_DOUBLE_EQ(zero_paper_bytes(psi, 3, 64), 16 * psi / 64);
  EXPECT_THROW(zero_paper_bytes(psi, 4, 64), Error);
}

TEST(PlanMemory, ModelStatesFollowTheZeroFormulas) {
  // The paper's formulas with fp32 gradients: 2 more bytes per parameter than its 2-byte
  // ones, sharded with the gradients from stage 2 on.
  const Workload w = make_workload("gpt2-1558m");
  const double psi = static_cast<double>(w.params());
  for (int stage = 0; stage <= 3; ++stage) {
    Layout l;
    l.dp = 64;
    l.zero = stage;
    const MemoryBreakdown m = memory_per_gpu(w, l, Precision::bf16);
    const double fp32_gradients = 2.0 * psi / (stage >= 2 ? 64.0 : 1.0);
    EXPECT_NEAR(m.weights + m.gradients + m.optimizer,
                zero_paper_bytes(psi, stage, 64) + fp32_gradients, 1.0)
        << "ZeRO stage " << stage;
  }
  const StateBytes mixed = state_bytes(Optimizer::adamw, Precision::bf16);
  EXPECT_DOUBLE_EQ(mixed.gradients, 4.0);  // fp32, as they are reduced
  EXPECT_DOUBLE_EQ(mixed.total(), 18.0);   // 18 bytes/parameter before sharding
  EXPECT_DOUBLE_EQ(state_bytes(Optimizer::adamw, Precision::fp32).total(), 16.0);
  EXPECT_DOUBLE_EQ(state_bytes(Optimizer::sgd_momentum, Precision::bf16).total(), 12.0);
}

TEST(PlanMemory, KorthikantiActivationsPerLayer) {
  // Materialized attention, as Korthikanti et al. count it.
  // GPT-2 124M shape: s = 1024, b = 1, h = 768, a = 12 → sbh = 786,432, 5as/h = 80.
  const Attention m = Attention::materialized;
  const double sbh = 1024.0 * 768;
  EXPECT_DOUBLE_EQ(transformer_layer_activation_bytes(1024, 1, 768, 12, 1, Recompute::none, m), sbh * 114);
  EXPECT_DOUBLE_EQ(transformer_layer_activation_bytes(1024, 1, 768, 12, 1, Recompute::selective, m), sbh * 34);
  EXPECT_DOUBLE_EQ(transformer_layer_activation_bytes(1024, 1, 768, 12, 1, Recompute::full, m), sbh * 2);
  // Tensor + sequence parallelism divides everything by t.
  EXPECT_DOUBLE_EQ(transformer_layer_activation_bytes(1024, 4, 768, 12, 2, Recompute::none, m),
                   4 * sbh * 114 / 2);
  // The default of the function is the paper's (materialized) count.
  EXPECT_DOUBLE_EQ(transformer_layer_activation_bytes(1024, 1, 768, 12, 1, Recompute::none), sbh * 114);
}

TEST(PlanMemory, FlashAttentionStoresNoScoreMatrices) {
  // Flash attention: the 5·a·s²·b score terms go; one fp32 log-sum-exp per head and row
  // (4·a·s·b bytes) stays. GPT-2 124M shape, b = 16: 34 × 1024 × 16 × 768 = 427,819,008
  // plus 4 × 12 × 1024 × 16 = 786,432 bytes per layer.
  const Attention f = Attention::flash;
  EXPECT_DOUBLE_EQ(transformer_layer_activation_bytes(1024, 16, 768, 12, 1, Recompute::none, f),
                   427819008.0 + 786432.0);
  // Selective recomputation saves nothing more: the scores were never stored.
  EXPECT_DOUBLE_EQ(transformer_layer_activation_bytes(1024, 16, 768, 12, 1, Recompute::selective, f),
                   427819008.0 + 786432.0);
  // Full recomputation keeps each layer's input only, whatever the kernel.
  EXPECT_DOUBLE_EQ(transformer_layer_activation_bytes(1024, 16, 768, 12, 1, Recompute::full, f),
                   2.0 * 1024 * 16 * 768);
  // Tensor parallelism splits the heads, so the log-sum-exp too; fp32 elements double the
  // Korthikanti part only (the log-sum-exp is fp32 either way).
  EXPECT_DOUBLE_EQ(transformer_layer_activation_bytes(1024, 16, 768, 12, 2, Recompute::none, f),
                   (427819008.0 + 786432.0) / 2);
  EXPECT_DOUBLE_EQ(transformer_layer_activation_bytes(1024, 16, 768, 12, 1, Recompute::none, f, 4.0),
                   2 * 427819008.0 + 786432.0);

  // Per GPU: GPT-2 124M, micro-batch 16, bf16 (the measured single-H200 configuration).
  Workload w = make_workload("gpt2-124m");
  EXPECT_EQ(w.attention, Attention::flash);  // the default
  Layout l;
  l.micro_batch = 16;
  const double flash = memory_per_gpu(w, l, Precision::bf16).activations;
  w.attention = Attention::materialized;
  const double materialized = memory_per_gpu(w, l, Precision::bf16).activations;
  // 12 layers × (5·a·s²·b − 4·a·s·b) = 12 × (5 × 12 × 1024² × 16 − 786,432) bytes.
  EXPECT_DOUBLE_EQ(materialized - flash, 12.0 * (5.0 * 12 * 1024 * 1024 * 16 - 786432.0));
  // 12 layers + embedding dropout mask + final LayerNorm + fp32 logits, by hand.
  EXPECT_DOUBLE_EQ(flash, 12.0 * (427819008.0 + 786432.0) + 1024.0 * 16 * 768 +
                              4.0 * 1024 * 16 * 768 + 4.0 * 1024 * 16 * 50257);
}

TEST(PlanMemory, ActivationsGrowWithBatchAndShrinkWithRecomputation) {
  Workload w = make_workload("gpt2-774m");
  w.attention = Attention::materialized;  // selective recomputation saves memory only here
  Layout l;
  l.micro_batch = 4;
  const double none = memory_per_gpu(w, l, Precision::bf16).activations;
  l.recompute = Recompute::selective;
  const double selective = memory_per_gpu(w, l, Precision::bf16).activations;
  l.recompute = Recompute::full;
  const double full = memory_per_gpu(w, l, Precision::bf16).activations;
  EXPECT_GT(none, selective);
  EXPECT_GT(selective, full);
  l.recompute = Recompute::none;
  l.micro_batch = 8;
  EXPECT_NEAR(memory_per_gpu(w, l, Precision::bf16).activations, 2 * none, 1.0);
  EXPECT_NEAR(memory_per_gpu(w, l, Precision::fp32).activations, 4 * none, 1.0);
}

TEST(PlanMemory, TensorAndPipelineSplitTheParameters) {
  const Workload w = make_workload("gpt2-124m");
  EXPECT_DOUBLE_EQ(params_per_gpu(w, 1, 1), 124439808.0);
  // tp 2 by hand: per layer (12·768² + 7·768)/2 + 6·768 = 3,546,240; ×12 layers
  // = 42,554,880; vocabulary-parallel embedding 50257·768/2 = 19,298,688; positions
  // 1024·768 = 786,432; final LayerNorm 1,536.
  EXPECT_DOUBLE_EQ(params_per_gpu(w, 2, 1), 42554880.0 + 19298688.0 + 786432.0 + 1536.0);
  EXPECT_LT(params_per_gpu(w, 1, 4), params_per_gpu(w, 1, 2));
  // The first of 4 stages holds 3 layers and the embeddings.
  EXPECT_DOUBLE_EQ(params_per_gpu(w, 1, 4), 3 * (12.0 * 768 * 768 + 13 * 768) + 50257.0 * 768 + 1024.0 * 768);
}

TEST(PlanMemory, GpuTensorParallelismSplitsTheVocabularyNotTheResidualStream) {
  // aiscale's GPU ranks (nn/models/gpt_cuda_tp.cuh): the token embedding with the tied LM
  // head split by vocabulary rows, each rank's logits its slice's columns (ceil(50257 / 2)
  // rounded up to 128: 25,216), and no sequence parallelism: per layer 8·s·b·h bytes whole
  // (LayerNorm inputs and outputs, residual stream) and 24·s·b·h split. CPU ranks split the
  // sequence too.
  const Workload w = make_workload("gpt2-124m");
  Layout l;
  l.tp = 2;
  l.micro_batch = 4;
  const MemoryBreakdown gpu = memory_per_gpu(w, l, Precision::bf16, {}, Accounting::aiscale_gpu);
  const MemoryBreakdown cpu = memory_per_gpu(w, l, Precision::bf16, {}, Accounting::aiscale_cpu);
  EXPECT_DOUBLE_EQ(gpu.params_on_gpu, params_per_gpu(w, 2, 1));
  EXPECT_DOUBLE_EQ(cpu.params_on_gpu, params_per_gpu(w, 2, 1));
  const double sbh = 1024.0 * 4 * 768;
  const double lse = 4.0 * 12 * 1024 * 4 / 2;  // flash attention's log-sum-exp, split by heads
  const double logits = 2.0 * 1024 * 4 * 50304;  // bf16, padded vocabulary, whole
  EXPECT_DOUBLE_EQ(gpu.activations, 12 * ((8 + 24.0 / 2) * sbh + lse) + 4 * sbh + 2.0 * 1024 * 4 * 25216);
  EXPECT_DOUBLE_EQ(cpu.activations, 12 * (32.0 / 2 * sbh + lse) + 4 * sbh / 2 + logits / 2);
  // One tensor rank: the same either way.
  l.tp = 1;
  EXPECT_DOUBLE_EQ(memory_per_gpu(w, l, Precision::bf16, {}, Accounting::aiscale_gpu).total,
                   memory_per_gpu(w, l, Precision::bf16, {}, Accounting::aiscale_cpu).total);
}

TEST(PlanMemory, GpuTensorParallelismWithZeroOneShardsTheOptimizerOverTheDataGroup) {
  // dp x tp with ZeRO-1 on GPU ranks (optim/zero1.cuh without a reducer): each rank's
  // tensor-local fp32 master weights and AdamW moments divided by dp, the working copy and
  // the fp32 gradients whole; the flat all-gather buffer shares the logits' memory where it
  // fits there.
  const Workload w = make_workload("gpt2-124m");
  const double psi = params_per_gpu(w, 2, 1);
  Layout l;
  l.tp = 2;
  l.dp = 4;
  l.micro_batch = 4;
  const MemoryBreakdown z0 = memory_per_gpu(w, l, Precision::bf16, {}, Accounting::aiscale_gpu);
  l.zero = 1;
  const MemoryBreakdown z1 = memory_per_gpu(w, l, Precision::bf16, {}, Accounting::aiscale_gpu);
  const StateBytes sb = state_bytes(Optimizer::adamw, Precision::bf16);
  EXPECT_DOUBLE_EQ(z0.optimizer, sb.optimizer * psi);
  EXPECT_DOUBLE_EQ(z1.optimizer, sb.optimizer * psi / 4);
  EXPECT_DOUBLE_EQ(z1.weights, z0.weights);
  EXPECT_DOUBLE_EQ(z1.gradients, z0.gradients);
  const double logits = 2.0 * 1024 * 4 * 25216;  // bf16, the rank's padded vocabulary slice
  EXPECT_DOUBLE_EQ(z1.buffers, psi * sb.weights > logits ? psi * sb.weights : 0.0);
  EXPECT_LT(z1.total, z0.total);
}

TEST(PlanMemory, GpuTensorParallelismWithZeroTwoAndThreeShardsEachRanksSlices) {
  // dp x tp with ZeRO-2/3 on GPU ranks (nn/models/gpt_zero3.cuh over the data group, the local
  // buffer as its model): the tensor-local state divided by dp as ZeRO-2/3 divide the whole
  // model's, the gathered layers and the three fp32 layer gradient buffers each of a rank's
  // slice of a layer, the embeddings (the rank's vocabulary slice, 25,216 rows at tp 2, and
  // the position embedding) and the final norm with their fp32 gradients, and under ZeRO-2
  // the rank's shard of the working copy.
  const Workload w = make_workload("gpt2-124m");
  const double psi = params_per_gpu(w, 2, 1);
  const double slice = layer_params_per_gpu(w, 2);
  const double c = w.gpt.n_embd;
  const double resident = (25216.0 + w.gpt.block_size) * c + 2 * c;
  Layout l;
  l.tp = 2;
  l.dp = 4;
  l.micro_batch = 4;
  const StateBytes sb = state_bytes(Optimizer::adamw, Precision::bf16);
  l.zero = 1;
  const MemoryBreakdown z1 = memory_per_gpu(w, l, Precision::bf16, {}, Accounting::aiscale_gpu);
  l.zero = 2;
  const MemoryBreakdown z2 = memory_per_gpu(w, l, Precision::bf16, {}, Accounting::aiscale_gpu);
  l.zero = 3;
  const MemoryBreakdown z3 = memory_per_gpu(w, l, Precision::bf16, {}, Accounting::aiscale_gpu);
  EXPECT_DOUBLE_EQ(z2.gradients, sb.gradients * psi / 4);
  EXPECT_DOUBLE_EQ(z2.weights, sb.weights * psi);
  EXPECT_DOUBLE_EQ(z3.weights, sb.weights * psi / 4);
  EXPECT_DOUBLE_EQ(z3.optimizer, sb.optimizer * psi / 4);
  EXPECT_DOUBLE_EQ(z2.buffers, 3 * slice * 4 + resident * (4 + sb.weights) + sb.weights * psi / 4);
  EXPECT_DOUBLE_EQ(z3.buffers, 2 * slice * sb.weights + 3 * slice * 4 + resident * (4 + sb.weights));
  // (On a model this small ZeRO-2 need not beat ZeRO-1: the embeddings and their fp32
  // gradients kept gathered outweigh the gradients' shards.)
  EXPECT_LT(z3.total, z2.total);
  EXPECT_DOUBLE_EQ(z1.gradients, sb.gradients * psi);
}

TEST(PlanMemory, GpuPipelineStagesHoldTheirLayersAndTheEmbeddings) {
  // aiscale's GPU pipeline stages (nn/models/gpt_cuda_pp.cuh) hold their layers, the
  // embeddings and the final norm, one micro-batch's activation buffers for their layers
  // and the LM head's (each forward is recomputed before its backward), the residual
  // stream between every pair of layers, and the stash of the micro-batches' inputs in
  // flight (min(pp, accumulation) x s b h values).
  const Workload w = make_workload("gpt2-124m");
  Layout whole;
  whole.micro_batch = 4;
  Layout l = whole;
  l.pp = 2;
  l.grad_accum = 8;
  const MemoryBreakdown one = memory_per_gpu(w, whole, Precision::bf16, {}, Accounting::aiscale_gpu);
  const MemoryBreakdown gpu = memory_per_gpu(w, l, Precision::bf16, {}, Accounting::aiscale_gpu);
  const double c = 768, wpe = 1024 * c;
  const double stage_params = params_per_gpu(w, 1, 2, true, false) + wpe;
  EXPECT_DOUBLE_EQ(gpu.params_on_gpu, stage_params);
  EXPECT_LT(gpu.params_on_gpu, 0.7 * one.params_on_gpu);  // half the layers, all the embeddings
  const StateBytes sb = state_bytes(w.optimizer, Precision::bf16);
  EXPECT_DOUBLE_EQ(gpu.optimizer, sb.optimizer * stage_params);
  const double bsh = 2.0 * 4 * 1024 * c;  // bf16
  EXPECT_DOUBLE_EQ(gpu.buffers, 2 * bsh + (12 + 1 - 6) * bsh);
  EXPECT_LT(gpu.activations, one.activations);
  EXPECT_LT(gpu.total, one.total);
}

TEST(PlanMemory, WorkspaceIsAStatedMargin) {
  const Workload w = make_workload("gpt2-124m");
  Layout l;
  MemoryAssumptions a;
  const MemoryBreakdown m = memory_per_gpu(w, l, Precision::bf16, a);
  const double modelled = m.weights + m.gradients + m.optimizer + m.activations + m.buffers;
  EXPECT_DOUBLE_EQ(m.workspace, a.fixed_bytes + a.fragmentation * modelled);
  EXPECT_DOUBLE_EQ(m.total, modelled + m.workspace);
}

TEST(PlanMemory, ImpossibleLayoutsAreExplained) {
  const Workload w = make_workload("gpt2-124m");
  Layout l;
  l.tp = 5;  // 12 heads
  try {
    memory_per_gpu(w, l, Precision::bf16);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not divide the 12 attention heads"), std::string::npos)
        << e.what();
  }
  l.tp = 1;
  l.pp = 13;  // 12 layers
  EXPECT_THROW(memory_per_gpu(w, l, Precision::bf16), Error);
  l.pp = 2;
  l.zero = 3;
  EXPECT_THROW(memory_per_gpu(w, l, Precision::bf16), Error);
  Layout cnn;
  cnn.tp = 2;
  EXPECT_THROW(memory_per_gpu(make_workload("resnet50"), cnn, Precision::bf16), Error);
}

}  // namespace
}  // namespace aiscale::plan
