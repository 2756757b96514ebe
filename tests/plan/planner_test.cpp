// The performance model and the planner: hand-checked step times, fit / no-fit, access
// routes, scaling curves and the explanations for impossible requests.
#include <cmath>

#include <gtest/gtest.h>

#include "aiscale/core/error.h"
#include "aiscale/plan/collectives.h"
#include "aiscale/plan/engine_support.h"
#include "aiscale/plan/planner.h"
#include "aiscale/plan/report.h"

namespace aiscale::plan {
namespace {

const Catalog& catalog() {
  static const Catalog cat = load_catalog(std::string(AISCALE_SOURCE_DIR) + "/data/systems");
  return cat;
}

PlanRequest gpt_request(const char* model, double tokens) {
  PlanRequest r;
  r.workload = make_workload(model);
  r.tokens = tokens;
  return r;
}

// A GPU partition for hand calculations: 100 TFLOP/s at 50%, 100 GB/s between the GPUs
// of a node, one 80 Gb/s (10 GB/s) link per node, 1 TB/s of memory bandwidth.
Partition toy_partition(int nodes, int gpus_per_node) {
  Partition part;
  part.id = "toy";
  part.name = "toy";
  part.kind = "gpu";
  part.nodes = nodes;
  part.gpus_per_node = gpus_per_node;
  part.network.kind = "toy";
  part.network.links = 1;
  part.network.gbps_per_link = 80.0;
  part.network.topology = Topology::fat_tree;
  return part;
}
MachineFigures toy_figures() {
  MachineFigures m;
  m.peak_flops = 100e12;
  m.utilisation.value = 0.5;
  m.intra_bytes_per_s.value = 100e9;
  m.node_bytes_per_s.value = 10e9;
  m.hbm_bytes_per_s.value = 1e12;
  m.copy_engine_slowdown.value = Assumptions{}.copy_engine_slowdown;
  return m;
}

TEST(PlanPlanner, DataParallelStepMatchesAHandCalculation) {
  // Two nodes of one GPU joined by one 80 Gb/s link: everything by hand.
  const Partition part = toy_partition(2, 1);
  const MachineFigures m = toy_figures();
  Assumptions a;
  const Workload w = make_workload("gpt2-124m");
  Layout l;
  l.dp = 2;
  const StepEstimate s = estimate_step(w, l, part, m, Precision::bf16, a);

  const double per_token = 6.0 * 124439808 + 12.0 * 12 * 768 * 1024;
  // The datasheet utilisation (50% here) holds for large GEMMs; one sequence of 1024 × 768
  // per GPU reaches x / (x + gemm_half_elements) of it.
  const double x = 1024.0 * 768;
  const double u = 0.5 * x / (x + a.gemm_half_elements);
  EXPECT_NEAR(s.utilisation, u, 1e-12);
  const double t_fwd = per_token * 1024 / 3.0 / (100e12 * u);
  const double t_bwd = 2 * t_fwd;
  EXPECT_NEAR(s.compute_s, t_fwd + t_bwd, 1e-12);
  const double grads = 124439808.0 * 4;  // fp32 gradients reduced (a.grad_comm_bytes)
  // aiscale's buckets: one per layer (28.35 MB of fp32 gradients, over the 25 MiB target)
  // and one for the embeddings.
  const double layer = (12.0 * 768 * 768 + 13.0 * 768) * 4;
  ASSERT_GT(layer, a.bucket_bytes);
  const int buckets = 12 + 1;
  // Ring all-reduce over 2 nodes: 2(p-1)α per bucket + 2(p-1)/p · bytes / 10 GB/s.
  const double t_ar = 2 * 1 * a.alpha_inter_s * buckets + grads / 10e9;
  EXPECT_NEAR(s.dp_comm_s, t_ar, 1e-12);
  // One GPU per node: all of it crosses the network, where comm_overlap of backward hides it.
  EXPECT_NEAR(s.dp_exposed_s, t_ar - a.comm_overlap * t_bwd, 1e-12);
  const double t_opt = 124439808.0 * a.adamw_bytes_touched / 1e12;
  EXPECT_NEAR(s.optimizer_s, t_opt, 1e-12);
  EXPECT_DOUBLE_EQ(s.sync_s, a.dp_step_sync_s);  // data parallelism over NCCL on GPUs
  EXPECT_NEAR(s.step_s, s.compute_s + s.dp_exposed_s + t_opt + a.dp_step_sync_s, 1e-12);
  EXPECT_NEAR(s.tokens_per_s, 2 * 1024 / s.step_s, 1e-6);
  EXPECT_LT(s.mfu, 0.5);  // communication and the optimizer cost utilisation
}

TEST(PlanPlanner, CopyEngineTransportStepMatchesAHandCalculation) {
  // Two GPUs of one node, 100 GB/s between them: the exchange hides behind backward, every
  // kernel runs copy_engine_slowdown slower, the last bucket follows backward.
  const Partition part = toy_partition(1, 2);
  const MachineFigures m = toy_figures();
  Assumptions a;
  const Workload w = make_workload("gpt2-124m");
  Layout l;
  l.dp = 2;
  l.transport = GradTransport::copy_engine;
  const StepEstimate s = estimate_step(w, l, part, m, Precision::bf16, a);
  const double grads = 124439808.0 * 4;
  const int buckets = 13;  // the 12 layers' and the embeddings'
  const double layer = (12.0 * 768 * 768 + 13.0 * 768) * 4;  // the last bucket: layer 0
  const double x = 2 * a.alpha_intra_s * buckets + grads / 100e9;  // 2(p-1)/p = 1
  const double tail = 2 * a.alpha_intra_s + layer / 100e9;
  EXPECT_NEAR(s.dp_comm_s, x, 1e-12);
  ASSERT_LT(x, 2.0 / 3.0 * s.compute_s);  // fits in backward
  // The slowdown runs beside the compute: its own component, not exposed traffic.
  EXPECT_NEAR(s.dp_exposed_s, tail, 1e-12);
  EXPECT_NEAR(s.overlap_cost_s, m.copy_engine_slowdown.value * s.compute_s, 1e-12);
  // NCCL inside a node: the bytes hide behind backward, but each of the 13 collectives
  // beside it costs collective_overlap_cost_s; the last bucket follows backward.
  l.transport = GradTransport::nccl;
  const StepEstimate n = estimate_step(w, l, part, m, Precision::bf16, a);
  EXPECT_NEAR(n.dp_exposed_s, tail, 1e-12);
  EXPECT_NEAR(n.overlap_cost_s, buckets * a.collective_overlap_cost_s, 1e-12);
  EXPECT_LT(s.step_s, n.step_s);
  // ZeRO-1: reduce-scatter beside backward, the new weights' all-gather after the update.
  l.transport = GradTransport::copy_engine;
  l.zero = 1;
  const StepEstimate z = estimate_step(w, l, part, m, Precision::bf16, a);
  const double ag = a.alpha_intra_s * buckets + 124439808.0 * 2 / 2 / 100e9;
  EXPECT_NEAR(z.dp_exposed_s, a.alpha_intra_s + layer / 2 / 100e9 + ag, 1e-12);
  EXPECT_NEAR(z.overlap_cost_s, m.copy_engine_slowdown.value * z.compute_s, 1e-12);
  // Not beyond one node.
  l.zero = 0;
  EXPECT_THROW(estimate_step(w, l, toy_partition(2, 1), m, Precision::bf16, a), Error);
}

TEST(PlanPlanner, NvlinkExchangeHidesBehindLongLayersButEachCollectiveCosts) {
  // Four GPUs of one node, 100 GB/s between them, GPT-2 2.7B (60 layers of 44.3M
  // parameters, 177 MB of fp32 gradients each): 61 buckets (60 layers and the embeddings),
  // each all-reduced beside backward. Backward is far longer than the exchange, so only
  // the last bucket's all-reduce (layer 0's, after backward) and 61 × the cost of a
  // collective beside compute show.
  const Partition part = toy_partition(1, 4);
  const MachineFigures m = toy_figures();
  Assumptions a;
  const Workload w = make_workload("gpt2-2.7b");
  Layout l;
  l.dp = 4;
  l.micro_batch = 4;
  const StepEstimate s = estimate_step(w, l, part, m, Precision::bf16, a);
  Fabric f;
  f.intra = {a.alpha_intra_s, 100e9};
  const GroupShape dp{4, 1};
  const double layer = (12.0 * 1920 * 1920 + 13.0 * 1920) * 4;
  const double grads = static_cast<double>(w.params()) * 4;
  EXPECT_NEAR(s.dp_comm_s, hier_allreduce_time(grads, dp, f, 61), 1e-12);
  ASSERT_LT(s.dp_comm_s, 2.0 / 3.0 * s.compute_s);
  EXPECT_NEAR(s.dp_exposed_s, hier_allreduce_time(layer, dp, f), 1e-12);
  EXPECT_NEAR(s.overlap_cost_s, 61 * a.collective_overlap_cost_s, 1e-12);
  EXPECT_LT(s.dp_exposed_s, 0.2 * s.dp_comm_s);
  // On links 50 times slower the exchange outlasts backward: the excess shows as well.
  MachineFigures slow = m;
  slow.intra_bytes_per_s.value = 2e9;
  f.intra.bytes_per_s = 2e9;
  const StepEstimate t = estimate_step(w, l, part, slow, Precision::bf16, a);
  ASSERT_GT(t.dp_comm_s, 2.0 / 3.0 * t.compute_s);
  EXPECT_NEAR(t.dp_exposed_s, t.dp_comm_s - 2.0 / 3.0 * t.compute_s, 1e-9);
  EXPECT_NEAR(t.overlap_cost_s, 61 * a.collective_overlap_cost_s, 1e-12);
  // ZeRO-3: per layer a gather beside forward (the first one before it), a gather and a
  // reduce-scatter beside backward (the last one after it), the embeddings' gather and
  // reduce-scatter once: 61 + 60 + 61 collectives.
  l.zero = 3;
  f.intra.bytes_per_s = 100e9;
  const StepEstimate z = estimate_step(w, l, part, m, Precision::bf16, a);
  const double weights = static_cast<double>(w.params()) * 2;
  EXPECT_NEAR(z.dp_exposed_s, hier_allgather_time(weights / 60, dp, f) + hier_reduce_scatter_time(layer, dp, f),
              1e-12);
  EXPECT_NEAR(z.overlap_cost_s, 182 * a.collective_overlap_cost_s, 1e-12);
  // GPT-2 124M on 2 GPUs at NVLink's ~340 GB/s: each of its 13 buckets of 28 MB costs the
  // compute about as much as its bytes take alone, so overlapping gains nothing (measured).
  const Workload small = make_workload("gpt2-124m");
  MachineFigures nvlink = m;
  nvlink.intra_bytes_per_s.value = 340e9;
  l.dp = 2;
  l.zero = 0;
  l.micro_batch = 16;
  const StepEstimate n = estimate_step(small, l, toy_partition(1, 2), nvlink, Precision::bf16, a);
  // (The exposed traffic itself never exceeds the traffic: the cost is its own component.)
  EXPECT_GT(n.dp_exposed_s + n.overlap_cost_s, n.dp_comm_s);
  EXPECT_LE(n.dp_exposed_s, n.dp_comm_s);
}

// --rank energy: the GPUs' energy at their datasheet board power (GPU-hours × W); a
// partition whose accelerator has no power figure ranks after those with one.
TEST(PlanPlanner, RankByEnergyCountsTheGpusAtTheirBoardPower) {
  EXPECT_EQ(parse_objective("energy"), Objective::energy);
  EXPECT_EQ(to_string(Objective::energy), "energy");
  const Catalog& cat = catalog();
  PlanRequest r = gpt_request("gpt2-124m", 1e9);
  r.objective = Objective::energy;
  std::vector<Target> targets = cat.resolve("discoverer");  // H200s: 700 W
  for (const Target& t : cat.resolve("leonardo")) targets.push_back(t);  // custom A100: no figure
  for (const Target& t : cat.resolve("karolina/gpu")) targets.push_back(t);  // A100 40GB: 400 W
  const PlanResult res = plan(r, targets, cat, Calibration{}, Assumptions{});
  ASSERT_GE(res.ranked.size(), 3u);
  for (const Candidate& c : res.ranked) {
    const double w = c.target.partition->accelerator.board_power_w;
    EXPECT_NEAR(c.energy_kwh, c.gpu_hours * w / 1000.0, 1e-9 * (1 + c.energy_kwh)) << c.target.label();
  }
  EXPECT_GT(res.ranked[0].energy_kwh, 0.0);
  EXPECT_LE(res.ranked[0].energy_kwh, res.ranked[1].energy_kwh);
  EXPECT_EQ(res.ranked.back().target.label(), "leonardo/booster");  // unknown power last
  EXPECT_EQ(res.ranked.back().energy_kwh, 0.0);
}

// --rank cost: GPU-hours × the --price of the partition (or its system); a price makes a
// dearer-per-hour but faster partition rank by what the run costs, not by its GPU-hours;
// a partition without a price ranks after those with one.
TEST(PlanPlanner, RankByCostIsGpuHoursTimesThePartitionsPrice) {
  EXPECT_EQ(parse_objective("cost"), Objective::cost);
  EXPECT_EQ(to_string(Objective::cost), "cost");
  const Catalog& cat = catalog();
  PlanRequest r = gpt_request("gpt2-124m", 1e9);
  std::vector<Target> targets = cat.resolve("discoverer");  // H200s
  for (const Target& t : cat.resolve("leonardo")) targets.push_back(t);  // A100s
  for (const Target& t : cat.resolve("karolina/gpu")) targets.push_back(t);
  r.objective = Objective::gpu_hours;
  const PlanResult by_hours = plan(r, targets, cat, Calibration{}, Assumptions{});
  ASSERT_GE(by_hours.ranked.size(), 3u);
  // Price the partition with the fewest GPU-hours far above the second: by cost it drops.
  const std::string cheapest_hours = by_hours.ranked[0].target.label();
  const std::string second = by_hours.ranked[1].target.label();
  r.objective = Objective::cost;
  r.prices[cheapest_hours] = 100.0;
  r.prices[by_hours.ranked[1].target.system->id] = 1.0;  // a system-wide price
  const PlanResult res = plan(r, targets, cat, Calibration{}, Assumptions{});
  ASSERT_EQ(res.ranked.size(), by_hours.ranked.size());
  EXPECT_EQ(res.ranked[0].target.label(), second);
  EXPECT_EQ(res.ranked[1].target.label(), cheapest_hours);
  for (const Candidate& c : res.ranked) {
    if (c.target.label() == cheapest_hours) EXPECT_NEAR(c.cost, c.gpu_hours * 100.0, 1e-9 * (1 + c.cost));
    else if (c.target.label() == second) EXPECT_NEAR(c.cost, c.gpu_hours, 1e-9 * (1 + c.cost));
    else EXPECT_LT(c.cost, 0.0) << c.target.label();  // no price: last
  }
  EXPECT_LT(res.ranked.back().cost, 0.0);
}

TEST(PlanPlanner, CopyEngineTransportIsPlannedInsideOneNodeOnly) {
  PlanRequest r = gpt_request("gpt2-124m", 1e9);
  r.grad_transport = GradTransport::copy_engine;
  const Catalog& cat = catalog();
  // Leonardo's booster has 4 GPUs per node: 4 plan, 8 are rejected with the reason.
  r.gpus = 4;
  PlanResult res = plan(r, cat.resolve("leonardo/booster"), cat, Calibration{}, Assumptions{});
  ASSERT_EQ(res.ranked.size(), 1u);
  EXPECT_EQ(res.ranked[0].layout.transport, GradTransport::copy_engine);
  EXPECT_NE(res.ranked[0].layout.describe().find("copy engines"), std::string::npos);
  r.gpus = 8;
  res = plan(r, cat.resolve("leonardo/booster"), cat, Calibration{}, Assumptions{});
  ASSERT_EQ(res.rejected.size(), 1u);
  EXPECT_NE(res.rejected[0].reason.find("inside one node"), std::string::npos) << res.rejected[0].reason;
  EXPECT_NE(res.rejected[0].reason.find("--grad-transport nccl"), std::string::npos);
  // Searching GPU counts stops at one node.
  r.gpus = 0;
  res = plan(r, cat.resolve("leonardo/booster"), cat, Calibration{}, Assumptions{});
  ASSERT_EQ(res.ranked.size(), 1u);
  EXPECT_LE(res.ranked[0].layout.gpus(), 4);
  // A CPU partition (planned in fp32, as aiscale's CPU backend trains), and ZeRO-2, are
  // refused with the fix named.
  r.precision = Precision::fp32;
  res = plan(r, cat.resolve("lumi/lumi-c"), cat, Calibration{}, Assumptions{});
  ASSERT_EQ(res.rejected.size(), 1u);
  EXPECT_NE(res.rejected[0].reason.find("for GPU ranks"), std::string::npos) << res.rejected[0].reason;
  r.pins.zero = 2;
  EXPECT_THROW(check_request(r), Error);
  EXPECT_THROW(parse_grad_transport("shm"), Error);
  EXPECT_EQ(parse_grad_transport("copy-engine"), GradTransport::copy_engine);
}

// aiscale's GPU code is CUDA: AMD and Intel GPU partitions are what-ifs, never ranked as
// runnable; with --include-unsupported they are planned, every row marked with the reason.
TEST(PlanPlanner, GpusOfOtherVendorsAreWhatIfsOnly) {
  const Catalog& cat = catalog();
  PlanRequest r = gpt_request("gpt2-350m", 1e9);
  for (const char* system : {"lumi/lumi-g", "dawn/max1550", "cosma8/mi210"}) {
    SCOPED_TRACE(system);
    PlanResult res = plan(r, cat.resolve(system), cat, Calibration{}, Assumptions{});
    EXPECT_TRUE(res.ranked.empty());
    ASSERT_EQ(res.rejected.size(), 1u);
    EXPECT_NE(res.rejected[0].reason.find("not NVIDIA's"), std::string::npos) << res.rejected[0].reason;
    r.include_unsupported = true;
    res = plan(r, cat.resolve(system), cat, Calibration{}, Assumptions{});
    ASSERT_FALSE(res.ranked.empty());
    for (const Candidate& c : res.ranked) {
      EXPECT_FALSE(c.runs());
      EXPECT_NE(c.engine_gap.find("aiscale's GPU code is CUDA"), std::string::npos) << c.engine_gap;
    }
    r.include_unsupported = false;
  }
  // NVIDIA partitions and CPU partitions run.
  EXPECT_FALSE(plan(r, cat.resolve("leonardo/booster"), cat, Calibration{}, Assumptions{}).ranked.empty());
  EXPECT_EQ(device_gap(cat.resolve("lumi/lumi-c")[0].partition->accelerator, true), "");
}

TEST(PlanPlanner, PipelineBubbleIsPpMinusOneSlots) {
  const Catalog& cat = catalog();
  const Target t = cat.resolve("leonardo")[0];
  const Workload w = make_workload("gpt2-1558m");
  const MachineFigures m = machine_figures(t, w, Precision::bf16, Calibration{}, cat, Assumptions{});
  Layout l;
  l.pp = 4;
  l.grad_accum = 8;
  const StepEstimate s = estimate_step(w, l, *t.partition, m, Precision::bf16, Assumptions{});
  EXPECT_NEAR(s.bubble_s, 3.0 * s.compute_s / 8.0, 1e-9);
  EXPECT_GT(s.pp_comm_s, 0);
}

TEST(PlanPlanner, Gpt2XlOnLeonardoFitsAndScales) {
  const Catalog& cat = catalog();
  PlanRequest r = gpt_request("gpt2-1558m", 10e9);
  const PlanResult res = plan(r, cat.resolve("leonardo"), cat, Calibration{}, Assumptions{});
  ASSERT_EQ(res.ranked.size(), 1u);
  const Candidate& c = res.ranked[0];
  EXPECT_LE(c.memory.total, c.target.partition->accelerator.memory_bytes());
  EXPECT_GE(c.efficiency, r.min_efficiency);
  EXPECT_GT(c.layout.gpus(), 4);
  EXPECT_EQ(c.layout.global_batch(), 512);
  // Time to train can never beat the compute alone at the assumed utilisation.
  const double ideal = ideal_gpu_hours(res.compute.flops, c.figures.peak_flops,
                                       c.figures.utilisation.value).hours;
  EXPECT_GE(c.gpu_hours, ideal * 0.999);
  EXPECT_LT(c.gpu_hours, ideal * 1.5);
  EXPECT_EQ(c.route.name, "Playground");
}

TEST(PlanPlanner, Gpt3NeedsModelParallelismAndALargeScaleAllocation) {
  const Catalog& cat = catalog();
  PlanRequest r = gpt_request("gpt3-175b", 300e9);
  r.include_unsupported = true;  // tensor and pipeline parallelism: not in `aiscale train` yet
  const PlanResult res = plan(r, cat.resolve("leonardo"), cat, Calibration{}, Assumptions{});
  ASSERT_EQ(res.ranked.size(), 1u) << (res.rejected.empty() ? "" : res.rejected[0].reason);
  const Candidate& c = res.ranked[0];
  EXPECT_GT(static_cast<long>(c.layout.tp) * c.layout.pp * (c.layout.zero == 3 ? c.layout.dp : 1), 8);
  EXPECT_EQ(c.route.name, "Large Scale");
}

TEST(PlanPlanner, TooLittleMemoryIsExplained) {
  const Catalog& cat = catalog();
  PlanRequest r = gpt_request("gpt3-175b", 300e9);
  r.gpus = 4;
  const PlanResult res = plan(r, cat.resolve("leonardo"), cat, Calibration{}, Assumptions{});
  EXPECT_TRUE(res.ranked.empty());
  ASSERT_EQ(res.rejected.size(), 1u);
  EXPECT_NE(res.rejected[0].reason.find("does not fit in memory"), std::string::npos)
      << res.rejected[0].reason;
  EXPECT_NE(res.rejected[0].reason.find("has 64.0 GiB"), std::string::npos) << res.rejected[0].reason;
}

TEST(PlanPlanner, ImpossibleRequestsAreExplained) {
  const Catalog& cat = catalog();
  PlanRequest r = gpt_request("gpt2-1558m", 10e9);
  r.pins.tp = 3;  // 25 heads
  EXPECT_THROW(plan(r, cat.resolve("leonardo"), cat, Calibration{}, Assumptions{}), Error);
  r.pins.tp.reset();
  r.gpus = 6;  // not whole nodes of 4
  PlanResult res = plan(r, cat.resolve("leonardo"), cat, Calibration{}, Assumptions{});
  ASSERT_EQ(res.rejected.size(), 1u);
  EXPECT_NE(res.rejected[0].reason.find("whole nodes"), std::string::npos) << res.rejected[0].reason;
  r.gpus = 1000000;
  res = plan(r, cat.resolve("leonardo"), cat, Calibration{}, Assumptions{});
  ASSERT_EQ(res.rejected.size(), 1u);
  EXPECT_NE(res.rejected[0].reason.find("13824 GPUs"), std::string::npos) << res.rejected[0].reason;
  r.gpus = 0;
  r.tokens = 0;
  EXPECT_THROW(plan(r, cat.resolve("leonardo"), cat, Calibration{}, Assumptions{}), Error);
  // V100 has no BF16: the partition is rejected with the reason.
  r.tokens = 1e9;
  res = plan(r, cat.resolve("jade2"), cat, Calibration{}, Assumptions{});
  ASSERT_EQ(res.rejected.size(), 1u);
  EXPECT_NE(res.rejected[0].reason.find("no bf16"), std::string::npos) << res.rejected[0].reason;
  r.precision = Precision::fp16;
  r.include_unsupported = true;  // 32 GB fits 1.5B parameters only with recomputation
  res = plan(r, cat.resolve("jade2"), cat, Calibration{}, Assumptions{});
  EXPECT_EQ(res.ranked.size(), 1u);
  EXPECT_EQ(res.ranked[0].layout.gpus(), 1);  // node layout unknown: one GPU
}

TEST(PlanPlanner, ScalingCurveOnLeonardo) {
  const Catalog& cat = catalog();
  PlanRequest r = gpt_request("gpt2-124m", 1e9);
  const ScalingCurve c = scaling_curve(r, cat.resolve("leonardo")[0], 64, cat, Calibration{}, Assumptions{});
  ASSERT_EQ(c.strong.size(), 7u);  // 1, 2, 4, ..., 64 nodes
  ASSERT_TRUE(c.strong[0].run);
  EXPECT_DOUBLE_EQ(c.strong[0].efficiency, 1.0);
  double previous = 1.0 + 1e-9;
  for (const auto& row : c.strong) {
    if (!row.run) continue;
    EXPECT_LE(row.efficiency, previous + 1e-9) << row.nodes << " nodes";
    EXPECT_EQ(row.run->layout.global_batch(), c.global_batch);
    previous = row.efficiency;
  }
  for (const auto& row : c.weak)
    if (row.run) {
      EXPECT_LE(row.efficiency, 1.0 + 1e-9);
      EXPECT_EQ(row.run->layout.micro_batch, c.base.micro_batch);
    }
  const nlohmann::json j = scaling_json(r, c, Calibration{}, Assumptions{});
  EXPECT_TRUE(j["predicted"].get<bool>());
  EXPECT_EQ(j["strong"].size(), 7u);
  EXPECT_THROW(scaling_curve(r, cat.resolve("stanage")[0], 8, cat, Calibration{}, Assumptions{}), Error);
}

TEST(PlanPlanner, ResNet50OnKarolina) {
  const Catalog& cat = catalog();
  PlanRequest r;
  r.workload = make_workload("resnet50");
  r.images = kImageNetTrainImages;
  r.epochs = 90;
  r.gpus = 16;
  // Default: the fixed global batch of 8192 images.
  PlanResult res = plan(r, cat.resolve("karolina"), cat, Calibration{}, Assumptions{});
  ASSERT_EQ(res.ranked.size(), 1u);
  EXPECT_FALSE(res.ranked[0].weak);
  EXPECT_EQ(res.ranked[0].layout.global_batch(), 8192);
  EXPECT_TRUE(res.ranked[0].runs()) << res.ranked[0].engine_gap;  // GPU ResNets: plain data parallelism
  // 157 steps per epoch (the last one partial, priced whole), 90 epochs.
  EXPECT_NEAR(res.ranked[0].steps, 90.0 * 157, 1e-6);
  // The vision benchmark's weak scaling: a fixed batch per GPU, the largest that fits.
  const ScalingCurve c = scaling_curve(r, cat.resolve("karolina")[0], 4, cat, Calibration{}, Assumptions{});
  ASSERT_TRUE(c.weak[0].run);
  EXPECT_EQ(c.base.micro_batch, 256);
  EXPECT_EQ(c.base.grad_accum, 1);
  EXPECT_EQ(c.weak.back().run->layout.global_batch(), 4 * 8 * 256);
}

TEST(PlanPlanner, JsonCarriesTheRankedPlan) {
  const Catalog& cat = catalog();
  PlanRequest r = gpt_request("gpt2-124m", 1e9);
  const PlanResult res = plan(r, cat.gpu_targets(), cat, Calibration{}, Assumptions{});
  const nlohmann::json j = plan_json(r, res, Calibration{}, Assumptions{});
  EXPECT_EQ(j["workload"]["params"].get<int64_t>(), 124439808);
  EXPECT_FALSE(j["ranked"].empty());
  EXPECT_TRUE(j["ranked"][0].contains("access_route"));
  EXPECT_FALSE(j["ranked"][0]["figures"]["utilisation"]["measured"].get<bool>());
  const std::string text = plan_text(r, res, Calibration{}, Assumptions{}, /*explain=*/true);
  EXPECT_NE(text.find("6·N·D + 12·L·d·T·D = 6 × 124,439,808"), std::string::npos);
  EXPECT_NE(text.find("Calibration: none given"), std::string::npos);
}

}  // namespace
}  // namespace aiscale::plan
