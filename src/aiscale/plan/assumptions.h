// The planner's modelling assumptions in one place. None of these is a measurement:
// they are stated defaults (printed with every plan) that calibration from measured
// `aiscale bench` results replaces where it can.
#pragma once

namespace aiscale::plan {

struct MemoryAssumptions {
  // CUDA/ROCm context, communication buffers and library workspaces, per GPU.
  double fixed_bytes = 1.0 * 1024 * 1024 * 1024;
  // Allocator fragmentation and temporaries, as a fraction of the modelled total.
  double fragmentation = 0.10;
};

struct TopologyAssumptions {
  // Bandwidth a job keeps on links between Dragonfly(+) groups (global links shared with
  // other jobs, adaptive routing); within one group, and on a fat tree, the factor is 1.
  double dragonfly_global = 0.70;
  double dragonfly_plus_global = 0.80;
  // Dragonfly(+) group size where the catalogue does not give one.
  int default_group_nodes = 128;
  // Global bandwidth of a group over its nodes' injection bandwidth (one direction) where
  // the catalogue gives no global_taper. Assumed: a balanced Dragonfly (as many global as
  // endpoint ports per group; Kim et al., ISCA 2008) whose adaptive routing sends about half
  // of the inter-group traffic non-minimally through a third group, over two global links:
  // 0.5. Congestion follows from it (collectives.h, global_congestion).
  double global_taper = 0.5;
};

// Per-epoch figures (epoch.h) where neither the catalogue nor a measurement gives them.
struct EpochAssumptions {
  // Aggregate read bandwidth of a shared filesystem not in the catalogue (a mid-size
  // Lustre), and the share of a filesystem's bandwidth one job gets beside the others.
  double storage_gbytes_per_s = 100;
  double storage_share = 0.25;
  // Images/s one host core decodes (JPEG), crops and flips: `aiscale bench loader` on the
  // 2x H100 host, 500x375 JPEGs to 224, 504 images/s on one worker thread and 503 per
  // thread on 16 (docs/results/machine.md, 2026-11-26, commit 31591e1).
  double decode_images_per_s_per_core = 500;
  // Host cores feeding each GPU's loader where the site's [slurm] cores_per_gpu is unknown.
  double loader_cores_per_gpu = 8;
};

struct Assumptions {
  // Fraction of the dense datasheet peak the math kernels sustain (hardware FLOPs) at
  // large per-GPU GEMMs (gemm_half_elements scales it down for small ones). PyTorch 2.11
  // compiled reached 42% of the H200's bf16 peak on GPT-2 124M at 16 × 1024 tokens
  // (docs/results/one-gpu.md, 2026-11-26), 0.42 / 0.92 = 45% on the curve; aiscale 46-50%.
  double transformer_utilisation = 0.45;
  // CNNs in 16-bit (bf16/fp16 AMP): aiscale's ResNet-50 at batch 256 reached 15.1% of the
  // H100's dense bf16 peak (6,074 images/s × 24.5 GFLOP, docs/results/vision.md,
  // 2026-11-27) and 17.8% of the H200's (7,171 images/s, 2026-11-28): batch norm, pooling
  // and the elementwise work keep the tensor cores idle for much of the step.
  double cnn_utilisation = 0.15;
  // CNNs in fp32/TF32: OpenAI's "AI and Compute" (Amodei and Hernandez, 2018,
  // https://openai.com/index/ai-and-compute/) assumed 33% GPU utilisation when estimating
  // training compute from GPU time, and its worked estimates include CNNs; aiscale's
  // ResNet-50 fp32 (TF32 off) reached 36% of the H100's fp32 peak (977 images/s, 2026-11-27).
  double cnn_utilisation_fp32 = 0.33;
  // CPU partitions (fp32): aiscale's measured CPU training step, 81.7 GFLOP/s on 2 cores
  // of a Zen 3 EPYC at 2.45 GHz (docs/results/cpu.md, idle machine), over those cores'
  // peak 2 × 2.45 GHz × 32 FLOP/cycle = 156.8 GFLOP/s: 52%.
  double cpu_utilisation = 0.52;
  // Utilisation against the per-GPU work (GPU partitions, transformers): the GEMMs of a
  // layer reach the full utilisation (assumed, or measured at a calibration run's shape)
  // as x / (x + gemm_half_elements), x = micro-batch × sequence × width / tensor size, the
  // elements of one layer's activation on one GPU (the output of its smallest GEMMs).
  // Assumed: half the rate where one wave of 128 × 128 output tiles half-fills an H100's
  // 132 SMs; replaced by a fit when a micro-batch sweep is calibrated
  // (bench/gpu/calibrate_planner.sh; docs/guide/planner.md, "Utilisation").
  double gemm_half_elements = 132.0 * 128 * 128 / 2;
  // FP8 training (precision fp8: the transformer blocks' linear layers on the FP8 tensor
  // cores, everything else bf16; docs/design/fp8.md). The step is the bf16 step with the
  // linear layers' GEMMs at fp8_gemm_speedup × their bf16 rate plus the quantisation
  // passes (each linear layer's input, weight and output gradient read in bf16 and written
  // in FP8, in the layouts the GEMMs read) at fp8_cast_bandwidth_share of the datasheet
  // memory bandwidth. The share is assumed (separate element-wise passes, byte stores of
  // transposes); the speed-up, with it, fitted to GPT-2 350M's measured fp8 step on an
  // H200 (238,525 against bf16's 214,573 tokens/s, 2026-11-29): 1.5, not the datasheet's 2
  // (GEMMs of these sizes, backward GEMMs without fast accumulation). GPT-2 124M, 1558M
  // and the Llama-3-1B shape, measured in the same call, are predicted out of sample
  // (tests/plan/fixtures/measured_runs.toml).
  double fp8_gemm_speedup = 1.5;
  double fp8_cast_bandwidth_share = 0.7;
  // Job start-up charged once per run: launch, CUDA/NCCL initialisation, cuBLASLt
  // autotuning, first batches (aiscale's bench measures 3-5 s of start-up and 10 warm-up
  // steps on one host; at scale, assumed). A short job does not gain from many nodes.
  double startup_fixed_s = 60;
  double startup_per_node_s = 0.5;
  // A GPU the job allocates but places no rank on (the rest of each node where fewer ranks
  // per node than GPUs are placed) draws this share of its datasheet board power over the
  // run (`--rank energy`; the ranks' GPUs count at the whole board power). Assumed: the
  // datasheets give the maximum board power only. One measured point: an H200 with no
  // process on it (persistence mode on, P0) read 80.6-80.8 W of its 700 W in nvidia-smi
  // (driver 580.159.04, 20 readings over 20 s, 2026-11-29), 11.5%; 15% lies above it, so
  // that the idle GPUs, like the busy ones, are not under-counted. Other parts: unmeasured,
  // assumed alike.
  double idle_power_fraction = 0.15;
  // Fixed cost per step of data parallelism over NCCL on GPUs: the embedding gradients'
  // bucket after backward and the ranks waiting for each other. Measured on 2 H200s: the
  // embedding tail 0.25-0.51 ms against 0.07 ms on one GPU, forward +0.1-0.3 ms
  // (docs/design/gradient-exchange.md, phase timings of 2da53e8 and 1614044).
  double dp_step_sync_s = 0.3e-3;
  // Step-to-step spread of one device's training step (standard deviation over the median)
  // where no calibration run reports its p90. A synchronous data-parallel step waits for
  // its slowest rank: with n ranks whose steps spread independently by σ it is longer by
  // σ × E[max of n standard normals] (0.56σ at 2, 3.0σ at 512; perf.cpp). GPUs: the median
  // of (p90 − median) / 1.28 over the 22 one-GPU runs of the H100 calibration sweep
  // (tests/plan/fixtures/calibration_sweep_h100.jsonl) is 0.35%. CPU nodes: assumed 2% for
  // a dedicated node (OS noise, no other tenants); the shared 2-core development VM
  // measured 11% (docs/results/cpu.md).
  double step_spread_gpu = 0.0035;
  double step_spread_cpu = 0.02;
  // Achievable ring bus bandwidth as a fraction of the datasheet link rate.
  double intra_efficiency = 0.75;
  double inter_efficiency = 0.85;
  // Per-message latency of one ring step (software + link), seconds.
  double alpha_intra_s = 2e-6;
  double alpha_inter_s = 5e-6;
  // Fraction of the compute time that can hide communication running beside it across
  // nodes, where the collectives wait on the network (assumed; the first/last buckets, which
  // cannot overlap at all, are priced apart).
  double comm_overlap = 0.8;
  // Inside a node (NVLink/xGMI) the bytes of a data-parallel collective hide behind the
  // compute that runs beside it as far as that compute lasts (per layer: its backward
  // against its bucket's transfer; perf.cpp), but every NCCL collective launched beside
  // compute costs the compute this much: its CTAs take SMs as the compute kernels' blocks
  // drain and hold them while they wait for the peers' CTAs, whatever the bytes. Measured on
  // 2 NVLink H200s with GPT-2 124M: backward ran 1.56-1.73 ms slower with its 13 buckets
  // (the embeddings' and the 12 layers') all-reduced beside it, each collective taking
  // 0.36-0.55 ms against ~0.14 ms alone (docs/design/gradient-exchange.md, "Overlap over
  // NCCL hides nothing on NVLink"): 1.6 ms / 13 ≈ 0.12 ms each. With few short collectives
  // per layer that is as much as the exchange takes alone (124M); a 2.7B layer's 177 MB
  // bucket costs the same 0.12 ms, so there most of the traffic hides.
  double collective_overlap_cost_s = 0.12e-3;
  // aiscale's copy-engine transport inside a node: the buckets move by DMA beside backward
  // and hold no SMs, so the exchange hides behind backward as far as it fits; what it
  // costs is every kernel of the step running this much slower (and the last bucket after
  // backward). Measured on 2 and 4 NVLink H200s, GPT-2 124M: the step took 3.3-4.1% (2
  // GPUs, five hosts) and 3.7% (4 GPUs) longer than one GPU's, of which ~0.5% is the tail;
  // about half of the slowdown came with the NVLink traffic alone
  // (docs/design/gradient-exchange.md, "NVLink traffic alone"). Other links and GPUs:
  // unmeasured, assumed alike.
  double copy_engine_slowdown = 0.032;
  // Bytes per parameter of the data-parallel gradient reduction: fp32 (aiscale, PyTorch
  // AMP with DDP and Megatron's default keep and reduce fp32 gradients in mixed precision).
  double grad_comm_bytes = 4;
  // Gradient bucket size: aiscale's default (train bucket_mib, as PyTorch DDP's bucket_cap_mb
  // = 25). aiscale's reducer fills its buckets with whole layers until one holds this much
  // (a GPT-2 124M or larger layer is a bucket of its own), the embeddings in one more.
  double bucket_bytes = 25.0 * 1024 * 1024;
  // HBM bytes the optimizer update reads and writes per parameter:
  // AdamW: fp32 master, m, v read+written (24) + 16-bit grad read (2) + 16-bit weight
  // written (2) = 28; SGD with momentum: weight, momentum read+written (16) + grad (4) = 20.
  double adamw_bytes_touched = 28;
  double sgd_bytes_touched = 20;
  // Optimizer offload (the optimizer state in host memory, AdamW on the CPU): each update
  // copies the rank's fp32 gradient shard to the host and its new 16-bit working copy back
  // over PCIe, at offload_pcie_bytes_per_s per GPU each way in turn (pinned copies over
  // PCIe 4.0 x16 run at about 25 GB/s), and AdamW touches adamw_bytes_touched per
  // parameter of the shard in host memory at offload_host_bytes_per_s per rank (a node's
  // DRAM bandwidth, some 200 GB/s, shared by its ranks and below peak on AdamW's streams).
  double offload_pcie_bytes_per_s = 25e9;
  double offload_host_bytes_per_s = 20e9;
  MemoryAssumptions memory;
  TopologyAssumptions topology;
  EpochAssumptions epoch;
};

}  // namespace aiscale::plan
