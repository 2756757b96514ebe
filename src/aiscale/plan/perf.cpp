#include "aiscale/plan/perf.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "aiscale/core/error.h"
#include "aiscale/plan/collectives.h"
#include "aiscale/plan/engine_support.h"
#include "aiscale/plan/flops.h"
#include "aiscale/parallel/pipeline/schedule.h"
#include "aiscale/plan/memory.h"

namespace aiscale::plan {
namespace {

// Time per FLOP of a transformer layer's forward against the mean of its forward and
// backward, from the GPT-2 124M op table (docs/results/machine.md, one H100, bf16): the
// layers' forward (matmuls without the LM head, attention, LayerNorm) took 18.6 ms of the
// layers' 60.9 ms over three steps, 0.305 of the time for a third of the FLOPs.
constexpr double kForwardTimePerFlop = 0.915;

struct Placement {
  int g = 1;            // GPUs used per node
  int nodes = 1;
  GroupShape tp, dp;
  bool pp_crosses_nodes = false;
};

// Ranks are numbered tensor-fastest, then data, then pipeline (Megatron's order), and
// filled node by node, l.ranks_per_node to a node (all of its GPUs when 0).
Placement place(const Layout& l, const Partition& part) {
  Placement pl;
  const long gpus = l.gpus();
  const int per_node = l.ranks_per_node > 0 ? l.ranks_per_node
                       : part.gpus_per_node > 0 ? part.gpus_per_node : 1;
  if (gpus <= per_node) {
    pl.g = static_cast<int>(gpus);
    pl.nodes = 1;
  } else {
    if (gpus % per_node != 0)
      fail("{} GPUs do not fill whole nodes of {} GPUs on {}: use a multiple of {}", gpus,
           per_node, part.name, per_node);
    pl.g = per_node;
    pl.nodes = static_cast<int>(gpus / per_node);
  }
  if (l.tp <= pl.g) {
    pl.tp = {l.tp, 1};
    const int dp_in_node = std::max(1, std::min(l.dp, pl.g / l.tp));
    pl.dp = {dp_in_node, l.dp / dp_in_node};
  } else {  // tensor group spans nodes (the planner avoids it; the model still prices it)
    pl.tp = {pl.g, l.tp / pl.g};
    pl.dp = {1, l.dp};
  }
  pl.pp_crosses_nodes = pl.nodes > 1 && static_cast<long>(l.tp) * l.dp >= pl.g;
  return pl;
}

// The data-parallel gradient buckets as aiscale's reducer cuts them
// (parallel/data_parallel/bucket_plan.h): whole layers in backward's order, merged until a
// bucket holds bucket_bytes, and the embeddings (ready first, after the LM head) one of
// their own; a CNN's gradients in bucket_bytes pieces. `last_bytes`: the bucket ready at
// the end of backward, whose collective cannot overlap. (aiscale cuts layer 0's bucket in
// three so that less of it follows backward; the planner keeps it whole, which overstates
// that tail by under a millisecond for GPT-2 2.7B on 4 GPUs.)
struct Buckets {
  int count = 1;
  double last_bytes = 0;
  int layers = 1;  // the units ZeRO-3 gathers one by one
};

Buckets gradient_buckets(const Workload& w, const Layout& l, double grad_bytes, double comm_bytes,
                         const Assumptions& a) {
  Buckets b;
  if (!w.is_transformer()) {
    b.count = std::max(1, static_cast<int>(std::ceil(grad_bytes / a.bucket_bytes)));
    b.last_bytes = std::min(grad_bytes, a.bucket_bytes);
    b.layers = b.count;
    return b;
  }
  b.layers = static_cast<int>((w.gpt.n_layer + l.pp - 1) / l.pp);
  const double layer_bytes = layer_params_per_gpu(w, l.tp) * comm_bytes;
  const int per_bucket =
      std::min(b.layers, std::max(1, static_cast<int>(std::ceil(a.bucket_bytes / layer_bytes))));
  b.count = (b.layers + per_bucket - 1) / per_bucket + 1;
  b.last_bytes = per_bucket * layer_bytes;
  return b;
}

// FP8 linear layers on one GPU, per micro-batch (nn/models/gpt_cuda's linear layers,
// ops/cuda/fp8.cuh): the forward FLOPs of the blocks' linear layers (backward is twice
// them), and the bytes their quantisations move: forward, each layer's input (read as
// bf16, written as e4m3: 3 bytes a value) and weight (3); backward, the input again
// transposed (3), the weight transposed (3) and the output gradient (read once, written
// twice: 4). Tensor parallelism splits every linear layer.
struct Fp8Linears {
  double fwd_flops = 0, fwd_bytes = 0, bwd_bytes = 0;
};
Fp8Linears fp8_linears(const nn::GptConfig& g, double tokens_mb, double layers, int tp) {
  const LinearWidths lw = linear_widths(g);
  const double in = 3.0 * lw.d + lw.f;  // qkv, proj, fc (gate/up) read d; down reads f
  const double out = lw.qkv + lw.d + lw.up + lw.d;
  const double weights = lw.d * (lw.qkv + lw.d + lw.up + lw.f);
  const double share = layers / double(tp);
  Fp8Linears x;
  x.fwd_flops = 2.0 * weights * tokens_mb * share;
  x.fwd_bytes = (3.0 * in * tokens_mb + 3.0 * weights) * share;
  x.bwd_bytes = (3.0 * in * tokens_mb + 4.0 * out * tokens_mb + 3.0 * weights) * share;
  return x;
}

}  // namespace

double expected_max_normal(long n) {
  if (n <= 1) return 0.0;
  // Simpson's rule over [-8, 8]: the integrand's tails beyond are below 1e-12 for n ≤ 2^24.
  constexpr int kSteps = 800;
  constexpr double lo = -8.0, hi = 8.0, h = (hi - lo) / kSteps;
  const double nn = static_cast<double>(n);
  auto f = [&](double x) {
    const double phi = std::exp(-0.5 * x * x) / std::sqrt(2.0 * std::numbers::pi);
    const double cdf = 0.5 * std::erfc(-x / std::sqrt(2.0));
    return cdf > 0 ? nn * x * phi * std::pow(cdf, nn - 1.0) : 0.0;
  };
  double sum = f(lo) + f(hi);
  for (int i = 1; i < kSteps; ++i) sum += f(lo + i * h) * (i % 2 ? 4.0 : 2.0);
  return sum * h / 3.0;
}

StepEstimate estimate_step(const Workload& w, const Layout& l, const Partition& part,
                           const MachineFigures& m, Precision p, const Assumptions& a,
                           Accounting acc) {
  validate_layout(l, w);
  if (m.peak_flops <= 0) fail("{}", part.accelerator.unsupported_reason(p));
  StepEstimate e;
  const Placement pl = place(l, part);
  e.nodes = pl.nodes;
  e.gpus_per_node_used = pl.g;
  e.topology_factor = topology_factor(part.network.topology, pl.nodes, part.network.group_nodes,
                                      a.topology, part.network.global_taper);
  Fabric fabric;
  fabric.intra = {a.alpha_intra_s, m.intra_bytes_per_s.value};
  fabric.inter_per_gpu = {a.alpha_inter_s, m.node_bytes_per_s.value * e.topology_factor / pl.g};

  // Hardware FLOP/s per GPU: the utilisation at this rank's GEMM size (one layer's
  // activation elements on this GPU; calibration.h utilisation_at).
  const double elements = w.is_transformer()
                              ? static_cast<double>(l.micro_batch) * w.seq_len * w.gpt.n_embd / l.tp
                              : 0.0;
  e.utilisation = utilisation_at(m, elements, a);
  const double rate = m.peak_flops * e.utilisation;
  const double act = activation_bytes(p);
  const StateBytes sb = state_bytes(w.optimizer, p);
  const double ga = l.grad_accum;
  const TensorSplit split = tensor_split(acc);
  // aiscale's GPU pipeline stages (nn/models/gpt_cuda_pp.cuh): each micro-batch's backward
  // first runs the stage's forward again from its stash; after the backward the stage's
  // gradients are summed over its data-parallel copies (one fp32 all-reduce, in place of
  // buckets during backward) and the embeddings' and the final norm's over the stages,
  // which all hold them; each GPU runs AdamW over what its stage holds.
  const bool gpu_stages = l.pp > 1 && w.is_transformer() && !part.is_cpu() && is_aiscale(acc) &&
                          engine_support_for(false).pipeline_recomputes_stages;
  // The values such a stage holds: its layers, the embeddings and the final norm.
  const double stage_params =
      gpu_stages ? params_per_gpu(w, l.tp, l.pp, true, split.vocab_parallel) + position_params(w) +
                       untied_head_params_per_gpu(w, l.tp, split.vocab_parallel)
                 : 0.0;

  // ---- compute, one micro-batch on one GPU ------------------------------------------
  double fwd_flops = 0, bwd_flops = 0, recompute_flops = 0;
  if (w.is_transformer()) {
    const auto& g = w.gpt;
    const double tokens_mb = static_cast<double>(l.micro_batch) * w.seq_len;
    const double per_token = nn::gpt_train_flops_per_token(g, w.seq_len);
    // Its parts by operation (flops.h): attention's QKᵀ and AV (12·L·d·T over forward and
    // backward) and the LM head's 2·V·d forward, tied or not (Llama's untied input
    // embedding is a lookup, in neither).
    const TransformerOpFlops ops = transformer_op_flops(g, w.seq_len);
    const double attention = 3.0 * static_cast<double>(g.n_layer) * ops.attention;
    const double share = 1.0 / (static_cast<double>(l.tp) * l.pp);
    // A vocabulary kept whole on every tensor rank has every rank compute all the logits:
    // the LM head's 6·V·d per token is not split.
    const double lm_head = split.vocab_parallel || l.tp == 1 ? 0.0 : 3.0 * ops.head;
    fwd_flops = ((per_token - lm_head) * share + lm_head / l.pp) * tokens_mb / 3.0;
    bwd_flops = 2.0 * fwd_flops;
    // A recomputed forward runs at the forward's own rate, faster per FLOP than the step's
    // mean (kForwardTimePerFlop). Full recomputation redoes the layers, not the LM head
    // (2·V·d per token, on the last stage, whole on every tensor rank unless the vocabulary
    // is split); a GPU pipeline stage recomputes its whole forward, the head included.
    const double head_fwd =
        ops.head * tokens_mb /
        ((split.vocab_parallel ? static_cast<double>(l.tp) : 1.0) * l.pp);
    if (l.recompute == Recompute::full)
      recompute_flops = std::max(0.0, fwd_flops - head_fwd) * kForwardTimePerFlop;
    if (gpu_stages) recompute_flops += fwd_flops * kForwardTimePerFlop;
    // Selective recomputation redoes attention's forward; a flash kernel recomputes its
    // scores in backward anyway (inside the utilisation), so there it changes nothing.
    if (l.recompute == Recompute::selective && w.attention == Attention::materialized)
      recompute_flops = attention * tokens_mb * share / 3.0;
    e.samples_per_step = static_cast<double>(l.global_batch());
    e.tokens_per_step = e.samples_per_step * w.seq_len;
    e.model_flops_per_step = per_token * e.tokens_per_step;
  } else {
    fwd_flops = 2.0 * w.cnn.macs_per_sample * l.micro_batch;
    bwd_flops = 2.0 * fwd_flops;
    e.samples_per_step = static_cast<double>(l.global_batch());
    e.model_flops_per_step = 6.0 * w.cnn.macs_per_sample * e.samples_per_step;
  }
  double t_fwd = fwd_flops / rate;
  double t_bwd = (bwd_flops + recompute_flops) / rate;
  if (p == Precision::fp8 && w.is_transformer() && !part.is_cpu()) {
    // The rate is the bf16 one (machine_figures); the linear layers' GEMMs run faster,
    // their quantisations add memory passes (Assumptions::fp8_*).
    const double layers = static_cast<double>((w.gpt.n_layer + l.pp - 1) / l.pp);
    const Fp8Linears x = fp8_linears(w.gpt, static_cast<double>(l.micro_batch) * w.seq_len,
                                     layers, l.tp);
    const double saved = 1.0 - 1.0 / a.fp8_gemm_speedup;
    const double bw = m.hbm_bytes_per_s.value * a.fp8_cast_bandwidth_share;
    const double cast_f = bw > 0 ? x.fwd_bytes / bw : 0.0, cast_b = bw > 0 ? x.bwd_bytes / bw : 0.0;
    const double fwd_delta = cast_f - x.fwd_flops / rate * saved;
    t_fwd += fwd_delta;
    t_bwd += cast_b - 2.0 * x.fwd_flops / rate * saved;
    if (l.recompute == Recompute::full || gpu_stages) t_bwd += fwd_delta * kForwardTimePerFlop;
  }
  const double t_mb = t_fwd + t_bwd;
  // Share of the compute windows that hides communication across nodes
  // (Assumptions::comm_overlap). aiscale's CPU ranks sum their gradients over MPI after
  // backward (the bench records "trainer all-reduce after backward"): nothing hides there.
  const double overlap = part.is_cpu() ? 0.0 : a.comm_overlap;

  // ---- tensor parallel: 2 all-reduces forward, 2 backward per layer (+2 if the forward
  // is recomputed), of the layer's activations (b·s·h); sequence parallelism replaces each
  // with a reduce-scatter + all-gather of the same volume.
  // A vocabulary split over the tensor ranks adds one all-reduce of the same size each way:
  // the embedding's sum over the ranks' slices (first stage) and the LM head's input
  // gradient (last stage).
  double t_tp_mb = 0, t_vocab_mb = 0;
  if (l.tp > 1 && w.is_transformer()) {
    const auto& g = w.gpt;
    const double bytes = static_cast<double>(l.micro_batch) * w.seq_len * g.n_embd * act;
    const double per_layer = (l.recompute == Recompute::full) ? 6.0 : 4.0;
    const double layers_here = static_cast<double>((g.n_layer + l.pp - 1) / l.pp);
    const double ar = hier_allreduce_time(bytes, pl.tp, fabric);
    t_tp_mb = layers_here * per_layer * ar;
    if (split.vocab_parallel) t_vocab_mb = (l.pp == 1 ? 2.0 : 1.0) * ar;
  }
  e.compute_s = ga * t_mb;
  e.tp_comm_s = ga * (t_tp_mb + t_vocab_mb);

  // ---- pipeline: bubble of pp-1 micro-batch slots; one activation send forward and one
  // gradient send backward per micro-batch and stage boundary (scattered over tp).
  if (gpu_stages) {
    // The engine's schedule (1F1B where there are enough micro-batches, else GPipe) run
    // through with this layout's pass times: the stage's recomputation before each
    // backward fills part of the wait for the downstream gradient
    // (parallel/pipeline/schedule.h simulate_pipeline).
    namespace pipe = parallel::pipeline;
    const int micro = static_cast<int>(ga);
    std::vector<pipe::StageSchedule> tables;
    for (int s = 0; s < l.pp; ++s)
      tables.push_back(micro >= l.pp ? pipe::one_f_one_b_schedule(l.pp, s, micro)
                                     : pipe::gpipe_schedule(l.pp, s, micro));
    const double t_stash = t_fwd;  // the stage's forward again
    // Tensor parallelism inside the stages: two all-reduces per layer forward, two backward
    // (four with full recomputation), two more in the stage's recomputed forward.
    const double per_layer = l.recompute == Recompute::full ? 6.0 : 4.0;
    const double ar = t_tp_mb / per_layer;  // the layers' one all-reduce each
    const pipe::PipelineRun run = pipe::simulate_pipeline(
        tables, t_fwd + 2.0 * ar, t_bwd - t_stash + (per_layer - 2.0) * ar, t_stash + 2.0 * ar);
    e.tp_comm_s += ga * 2.0 * ar;
    e.bubble_s = std::max(0.0, run.makespan - e.compute_s - e.tp_comm_s);
  } else if (l.pp > 1) {
    e.bubble_s = (l.pp - 1) * (t_mb + t_tp_mb);
  }
  if (l.pp > 1) {
    const double bytes = static_cast<double>(l.micro_batch) * w.seq_len * w.gpt.n_embd * act / l.tp;
    const Link link = pl.pp_crosses_nodes ? fabric.inter_per_gpu : fabric.intra;
    e.pp_comm_s = 2.0 * (ga + l.pp - 1) * p2p_time(bytes, link);
  }

  // ---- data parallel -----------------------------------------------------------------
  if (gpu_stages) {  // after backward, nothing beside it: the stage's gradients over its
                     // copies, the embeddings' and the final norm's over the stages; under
                     // ZeRO-1 a reduce-scatter over the copies instead, and after the update
                     // an all-gather of the new working copy
    const double bytes_per_value = std::max(sb.gradients, 4.0);
    const auto& g = w.gpt;
    const double shared = double(g.vocab_size) / (split.vocab_parallel ? l.tp : 1) * double(g.n_embd) +
                          untied_head_params_per_gpu(w, l.tp, split.vocab_parallel) +
                          position_params(w) + final_norm_params(w);
    const GroupShape stages = pl.pp_crosses_nodes ? GroupShape{1, l.pp} : GroupShape{l.pp, 1};
    double copies = 0;
    if (l.dp > 1 && l.zero >= 1)
      copies = hier_reduce_scatter_time(stage_params * bytes_per_value, pl.dp, fabric, 1) +
               hier_allgather_time(stage_params * sb.weights, pl.dp, fabric);
    else if (l.dp > 1)
      copies = hier_allreduce_time(stage_params * bytes_per_value, pl.dp, fabric);
    e.dp_comm_s = copies + hier_allreduce_time(shared * bytes_per_value, stages, fabric);
    e.dp_exposed_s = e.dp_comm_s;
  } else if (l.dp > 1) {
    const double psi = params_per_gpu(w, l.tp, l.pp, false, split.vocab_parallel);
    const double comm_bytes = std::max(sb.gradients, a.grad_comm_bytes);
    const double grad_bytes = psi * comm_bytes;
    const double weight_bytes = psi * sb.weights;
    const Buckets bk = gradient_buckets(w, l, grad_bytes, comm_bytes, a);
    const int buckets = bk.count;
    const double last_bucket = bk.last_bytes;
    const GroupShape dp = pl.dp;
    const GroupShape in_node{dp.per_node, 1};
    // What a compute window hides of collectives launched beside it, of time t alone (t_in
    // of it on the links inside a node). Inside a node the bytes hide as far as the window
    // lasts: each layer's (or bucket's) transfer behind that layer's compute, the layers
    // alike, so summed over them max(0, t_in − window); what is left shows. Across nodes
    // comm_overlap of the window hides them (an assumption: the collectives mostly wait on
    // the network). Every collective run beside the compute over NCCL inside a node costs
    // collective_overlap_cost_s whatever its size (its kernels' wait for SMs and peers,
    // measured: assumptions.h), so many small collectives hide little and a few large ones
    // most of their traffic. `unhidden`: the part that cannot overlap at all (the last
    // bucket after backward, the first layer's gather before forward). CPU ranks sum
    // their gradients after backward: nothing hides.
    const double in_share = part.is_cpu() ? 0.0 : 1.0;
    const double cost = !part.is_cpu() && dp.per_node > 1 ? a.collective_overlap_cost_s : 0.0;
    // Returns what shows of the traffic (never more than t); the collectives' own cost
    // beside the compute goes to overlap_cost_s, `times` over (micro-batches).
    auto beside = [&](double t, double t_in, double window, int collectives, double unhidden,
                      double times = 1.0) {
      const double across = std::max(0.0, t - t_in);
      const double shows = std::max(0.0, t_in - in_share * window) +
                           std::max(0.0, across - overlap * window);
      e.overlap_cost_s += times * collectives * cost;
      return std::min(t, std::max(shows, unhidden));
    };
    if (l.transport == GradTransport::copy_engine) {
      // aiscale's copy engines (one node, ZeRO 0 or 1): the buckets' exchange runs beside
      // the last micro-batch's backward without SMs and hides there while it fits; every
      // kernel of that micro-batch runs the copy-engine slowdown slower (as measured, the
      // forward too); the last bucket, and ZeRO-1's all-gather of the new weights, follow.
      if (pl.nodes > 1)
        fail("the copy-engine transport works inside one node; this layout spans {} nodes: "
             "use --grad-transport nccl", pl.nodes);
      const bool zero1 = l.zero == 1;
      const double x = zero1 ? hier_reduce_scatter_time(grad_bytes, dp, fabric, buckets)
                             : hier_allreduce_time(grad_bytes, dp, fabric, buckets);
      const double tail = zero1 ? hier_reduce_scatter_time(last_bucket, dp, fabric)
                                : hier_allreduce_time(last_bucket, dp, fabric);
      const double ag = zero1 ? hier_allgather_time(weight_bytes, dp, fabric, buckets) : 0.0;
      e.dp_comm_s = x + ag;
      e.dp_exposed_s = std::max(tail, x - t_bwd) + ag;
      e.overlap_cost_s += m.copy_engine_slowdown.value * t_mb;  // beside the compute
    } else switch (l.zero) {
      case 0: {  // one all-reduce per bucket, beside the last micro-batch's backward
        const double t = hier_allreduce_time(grad_bytes, dp, fabric, buckets);
        const double t_in = hier_allreduce_time(grad_bytes, in_node, fabric, buckets);
        e.dp_comm_s = t;
        e.dp_exposed_s = beside(t, t_in, t_bwd, buckets, hier_allreduce_time(last_bucket, dp, fabric));
        break;
      }
      case 1: {  // reduce-scatter gradients beside backward, all-gather the updated weights
                 // after the update (nothing left to hide them behind)
        const double rs = hier_reduce_scatter_time(grad_bytes, dp, fabric, buckets);
        const double rs_in = hier_reduce_scatter_time(grad_bytes, in_node, fabric, buckets);
        const double ag = hier_allgather_time(weight_bytes, dp, fabric, buckets);
        e.dp_comm_s = rs + ag;
        e.dp_exposed_s =
            beside(rs, rs_in, t_bwd, buckets, hier_reduce_scatter_time(last_bucket, dp, fabric)) + ag;
        break;
      }
      case 2: {  // gradients reduce-scattered every micro-batch, weights gathered once
        const double rs = hier_reduce_scatter_time(grad_bytes, dp, fabric, buckets);
        const double rs_in = hier_reduce_scatter_time(grad_bytes, in_node, fabric, buckets);
        const double ag = hier_allgather_time(weight_bytes, dp, fabric, buckets);
        e.dp_comm_s = ga * rs + ag;
        e.dp_exposed_s =
            ga * beside(rs, rs_in, t_bwd, buckets, hier_reduce_scatter_time(last_bucket, dp, fabric), ga) + ag;
        break;
      }
      case 3: {  // per micro-batch: gather each layer's weights for forward and again for
                 // backward, one layer ahead of its use, and reduce-scatter its gradients
                 // after its backward; the embeddings are gathered and reduced once
        const int layers = bk.layers;
        const double ag = hier_allgather_time(weight_bytes, dp, fabric, layers);
        const double ag_in = hier_allgather_time(weight_bytes, in_node, fabric, layers);
        const double rs = hier_reduce_scatter_time(grad_bytes, dp, fabric, buckets);
        const double rs_in = hier_reduce_scatter_time(grad_bytes, in_node, fabric, buckets);
        // Neither the first layer's gather nor the last bucket's reduce-scatter can overlap.
        const double first_layer = hier_allgather_time(weight_bytes / layers, dp, fabric);
        const double last_rs = hier_reduce_scatter_time(last_bucket, dp, fabric);
        const int embeddings = w.is_transformer() ? 1 : 0;
        e.dp_comm_s = ga * (2.0 * ag + rs);
        e.dp_exposed_s = ga * (beside(ag, ag_in, t_fwd, layers + embeddings, first_layer, ga) +
                               beside(ag + rs, ag_in + rs_in, t_bwd, layers + buckets, last_rs, ga));
        break;
      }
    }
  }

  // ---- optimizer update: memory-bound over the parameters this GPU updates -----------
  {
    const double psi = (gpu_stages ? stage_params
                                   : params_per_gpu(w, l.tp, l.pp, false, split.vocab_parallel)) /
                       (l.zero >= 1 ? l.dp : 1);
    const double bytes = psi * (w.optimizer == Optimizer::adamw ? a.adamw_bytes_touched
                                                                 : a.sgd_bytes_touched);
    e.optimizer_s = m.hbm_bytes_per_s.value > 0 ? bytes / m.hbm_bytes_per_s.value : 0.0;
    // Offloaded: the gradient shard down and the new working copy up over PCIe, AdamW over
    // host memory (Assumptions::offload_*), nothing of it beside the GPU's compute.
    if (l.offload)
      e.optimizer_s = psi * (sb.gradients + sb.weights) / a.offload_pcie_bytes_per_s +
                      psi * a.adamw_bytes_touched / a.offload_host_bytes_per_s;
  }

  // The embedding tail and rank skew every data-parallel GPU step pays over NCCL (the
  // copy-engine model's tail and its calibrated slowdown hold it already).
  if (l.dp > 1 && !part.is_cpu() && l.transport == GradTransport::nccl) e.sync_s = a.dp_step_sync_s;
  // Stragglers: the ranks meet at every step's gradient collective (and, with tensor or
  // pipeline parallelism, more often), so a step lasts as long as its slowest rank's work.
  // One device's step spreads by m.step_spread (σ / median, measured from a calibration
  // run's p90 where there is one); n independent ranks wait E[max of n normals] × σ. A step
  // of `ga` micro-batches spreads by 1/√ga of that (independent micro-batches).
  if (l.gpus() > 1)
    e.straggler_s = m.step_spread.value * (e.compute_s + e.optimizer_s) / std::sqrt(ga) *
                    expected_max_normal(l.gpus());
  e.step_s = e.compute_s + e.tp_comm_s + e.bubble_s + e.pp_comm_s + e.dp_exposed_s + e.overlap_cost_s +
             e.optimizer_s + e.sync_s + e.straggler_s;
  e.samples_per_s = e.samples_per_step / e.step_s;
  e.tokens_per_s = e.tokens_per_step / e.step_s;
  e.mfu = e.model_flops_per_step / (e.step_s * static_cast<double>(l.gpus()) * m.peak_flops);
  return e;
}

}  // namespace aiscale::plan
