#include "aiscale/plan/engine_support.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "aiscale/core/ascii.h"

namespace aiscale::plan {
namespace {

// What `aiscale train` runs, as of this revision (train/config.cpp validate(),
// nn/models/gpt_common.cpp make_gpt()):
//  * GPU ranks (train.device = "cuda"): GPT-2- and Llama-family models; fp32 (no TF32),
//    bf16 and fp16, and fp8 for the transformers' linear layers on GPUs with FP8 tensor
//    cores (docs/design/fp8.md);
//    data parallelism over NCCL (any node count) or the copy engines (one node); ZeRO
//    stage 0, 1 (up to n_embd + 1 ranks), 2 or 3 (2 and 3 over NCCL only); tensor parallelism with
//    data-parallel copies (dp x tp, ZeRO 0 to 3 over NCCL, ZeRO-2/3 sharding each tensor
//    rank's slices over its data group; the vocabulary split in padded slices); and
//    pipeline stages with both (dp x tp x pp, GPipe/1F1B, ZeRO 0 or 1 over NCCL, each stage
//    holding its layers with the embeddings and the final norm and recomputing its forward
//    before each backward).
//    ResNets with plain data parallelism (train/vision_*, fp32 and bf16/fp16 AMP).
//  * CPU ranks (train.device = "cpu"): GPT-2- and Llama-family models in fp32; any dp x tp x pp layout
//    over MPI (tensor parallelism with sequence parallelism, GPipe/1F1B pipelines) with ZeRO
//    stage 0, 2 or 3 on the data axis (ZeRO-3 without pipeline stages); ZeRO-1 (the
//    trainer's wrapper, optim/data_parallel.h) with plain data parallelism only.
//  * CPU ranks also train ResNets (train/vision_*: fp32, data parallelism over MPI).
//    train.recompute_layers is Korthikanti's full recomputation (every layer's forward run
//    again in its backward, on CPU and GPU ranks, with every layout); train.recompute
//    (GELU and LayerNorm outputs) is neither of the selective or full modes and is
//    planned as none; selective recomputation is not implemented.
const std::vector<EngineSupport> kEngineSupport = {
    {"cuda",
     {WorkloadKind::transformer, WorkloadKind::cnn},
     {Precision::fp32, Precision::bf16, Precision::fp16, Precision::fp8},
     {0, 1, 2, 3},
     1 << 20,
     1 << 20,
     {GradTransport::nccl, GradTransport::copy_engine},
     {0, 1},
     {Recompute::none, Recompute::full},
     false,
     {0, 1, 2, 3},
     true,
     true,
     false,
     {0, 1},
     true,
     true,
     {nn::GptFamily::gpt2, nn::GptFamily::llama}},
    {"cpu",
     {WorkloadKind::transformer, WorkloadKind::cnn},
     {Precision::fp32},
     {0, 1, 2, 3},
     1 << 20,
     1 << 20,
     {GradTransport::nccl},  // the planner's "nccl" stands for the default transport: MPI on CPU ranks
     {},
     {Recompute::none, Recompute::full},
     false,
     {0, 2, 3},
     false,
     true,
     true,
     {0, 2},
     true,
     false,
     {nn::GptFamily::gpt2, nn::GptFamily::llama}},
};

template <typename T>
bool has(const std::vector<T>& v, T x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

std::string list_zero(const std::vector<int>& stages) {
  std::string out;
  for (size_t i = 0; i < stages.size(); ++i)
    out += (i == 0 ? "" : i + 1 == stages.size() ? " and " : ", ") + std::to_string(stages[i]);
  return out;
}

std::string list_precisions(const std::vector<Precision>& ps) {
  std::string out;
  for (Precision p : ps) out += (out.empty() ? "" : ", ") + std::string(to_string(p));
  return out;
}

}  // namespace

const std::vector<EngineSupport>& engine_support() { return kEngineSupport; }

const EngineSupport& engine_support_for(bool cpu_partition) {
  const std::string_view device = cpu_partition ? "cpu" : "cuda";
  for (const auto& e : kEngineSupport)
    if (e.device == device) return e;
  return kEngineSupport.front();
}

std::string device_gap(const Accelerator& a, bool cpu_partition) {
  // A vendor the catalogue leaves out is not second-guessed (a site's own entry).
  const std::string vendor = ascii_lower(a.vendor);
  if (cpu_partition || a.cpu_node || vendor.empty() || vendor == "nvidia") return "";
  return fmt::format("its GPUs ({}) are not NVIDIA's, and aiscale's GPU code is CUDA: a what-if "
                     "for comparison, not a machine aiscale runs on",
                     a.name.empty() ? a.id : a.name);
}

std::string engine_gap_for_workload(const Workload& w, Precision p, bool cpu_partition) {
  const EngineSupport& e = engine_support_for(cpu_partition);
  if (!has(e.models, w.kind))
    return w.is_transformer() ? "transformer training not implemented on this device"
                              : "CNN training not implemented on GPU ranks yet (CPU ranks train ResNets)";
  if (w.is_transformer() && !has(e.gpt_families, w.gpt.family))
    return fmt::format("{}-family training not implemented on {} ranks yet (aiscale trains the "
                       "GPT-2 family there)", w.gpt.llama() ? "Llama" : "GPT-2",
                       cpu_partition ? "CPU" : "GPU");
  if (!has(e.precisions, p))
    return fmt::format("{} training not implemented on {} ranks (aiscale trains {})", to_string(p),
                       cpu_partition ? "CPU" : "GPU", list_precisions(e.precisions));
  if (p == Precision::fp8 && !w.is_transformer())
    return "fp8 training runs the transformers' linear layers only (ResNets train in fp32, bf16 "
           "or fp16)";
  return "";
}

std::string engine_gap(const Workload& w, const Layout& l, Precision p, bool cpu_partition) {
  if (std::string why = engine_gap_for_workload(w, p, cpu_partition); !why.empty()) return why;
  const EngineSupport& e = engine_support_for(cpu_partition);
  if (!w.is_transformer() && (l.tp > 1 || l.pp > 1 || l.zero != 0))
    return "ResNets are planned with plain data parallelism (the engine also runs ZeRO-1, whose "
           "sharded momentum the planner does not search; no tensor or pipeline stages)";
  if (l.tp > e.max_tensor) return "tensor parallelism not implemented yet";
  if (l.tp > 1 && l.pp > 1 && (e.tensor_no_pipeline || !e.pipeline_with_tensor))
    return "GPU ranks run tensor parallelism or pipeline stages, not both at once, in this "
           "version";
  if (l.tp > 1 && !e.tensor_zero_stages.empty() && !has(e.tensor_zero_stages, l.zero))
    return fmt::format("GPU tensor parallelism runs with ZeRO {} only (no ZeRO-{}) in this "
                       "version", list_zero(e.tensor_zero_stages), l.zero);
  if (l.pp > e.max_pipeline) return "pipeline parallelism not implemented yet";
  if (l.dp > 1 && l.zero == 3 && l.pp > 1) return "ZeRO-3 with pipeline stages not implemented";
  if (l.pp > 1 && !e.pipeline_zero_stages.empty() && !has(e.pipeline_zero_stages, l.zero))
    return fmt::format("{} pipeline stages run with ZeRO {} only (no ZeRO-{}) in this version",
                       cpu_partition ? "CPU" : "GPU", list_zero(e.pipeline_zero_stages), l.zero);
  if (l.pp > 1 && e.pipeline_recomputes_stages && l.transport != GradTransport::nccl)
    return "GPU pipeline stages sum their gradients over NCCL, not the copy engines";
  if (l.dp > 1 && !has(e.zero_stages, l.zero))
    return fmt::format("ZeRO-{} not implemented{} (aiscale trains ZeRO {})", l.zero,
                       cpu_partition ? " on CPU ranks" : "", list_zero(e.zero_stages));
  if (!has(e.transports, l.transport)) return "the copy-engine transport needs GPU ranks";
  if (l.dp > 1 && l.transport == GradTransport::copy_engine && !e.copy_engine_zero_stages.empty() &&
      !has(e.copy_engine_zero_stages, l.zero))
    return fmt::format("ZeRO-{} over the copy engines not implemented (ZeRO-{} runs over NCCL)",
                       l.zero, l.zero);
  if (l.offload && (cpu_partition || l.zero != 3 || l.tp > 1 || l.pp > 1))
    return cpu_partition ? "optimizer offload is for GPU ranks (CPU ranks hold it in host memory "
                           "already)"
                         : "optimizer offload runs with ZeRO-3 and neither tensor nor pipeline "
                           "parallelism (parallel.offload_optimizer)";
  if (!has(e.recompute, l.recompute))
    return fmt::format("{} recomputation not implemented (aiscale recomputes whole layers, "
                       "--recompute-layers, or GELU and LayerNorm outputs, --recompute)",
                       to_string(l.recompute));
  // (Under tensor parallelism ZeRO-1 shards one bucket per data group: no such bound.)
  if (e.zero1_ranks_at_most_width_plus_one && l.zero == 1 && w.is_transformer() && l.tp == 1 &&
      l.dp > w.gpt.n_embd + 1)
    return fmt::format("ZeRO-1 runs on at most n_embd + 1 = {} ranks", w.gpt.n_embd + 1);
  return "";
}

std::string host_memory_gap(const Workload& w, const Layout& l, int gpus_per_node, double ram_gib) {
  if (ram_gib <= 0 || !w.is_transformer()) return "";
  const double ranks = static_cast<double>(std::min<long>(std::max(gpus_per_node, 1), l.gpus()));
  // With the optimizer offloaded each rank also keeps its shard of the fp32 master weights
  // and moments there (12 bytes per parameter over the data-parallel ranks).
  const double shard = l.offload ? 12.0 / (l.zero >= 1 ? l.dp : 1) : 0.0;
  const double need = (12.0 + shard) * static_cast<double>(w.params()) * ranks;
  const double have = ram_gib * 1024.0 * 1024.0 * 1024.0;
  if (need <= have) return "";
  return fmt::format("the planner counts the whole model's parameters and AdamW moments in "
                     "each rank's host memory (12 bytes per parameter, a conservative rule: "
                     "checkpoints now stream, docs/guide/planner.md): {:.0f} GiB for {:.0f} "
                     "ranks per node, the node has {:.0f} GiB",
                     need / (1024.0 * 1024.0 * 1024.0), ranks, ram_gib);
}

std::string engine_support_summary(bool cpu_partition) {
  const EngineSupport& e = engine_support_for(cpu_partition);
  const std::vector<int>& tensor_zero =
      e.tensor_zero_stages.empty() ? e.zero_stages : e.tensor_zero_stages;
  std::string model_parallel;
  if (e.max_tensor > 1 && e.max_pipeline > 1 && e.pipeline_with_tensor && !e.tensor_no_pipeline &&
      e.pipeline_recomputes_stages)
    model_parallel = fmt::format("tensor parallelism (dp x tp, ZeRO {}) and pipeline stages "
                                 "with it (dp x tp x pp, ZeRO {}, each stage's forward "
                                 "recomputed before its backward)",
                                 list_zero(tensor_zero),
                                 list_zero(e.pipeline_zero_stages.empty() ? e.zero_stages
                                                                          : e.pipeline_zero_stages));
  else if (e.max_tensor > 1 && e.max_pipeline > 1 && e.pipeline_with_tensor && !e.tensor_no_pipeline)
    model_parallel = "tensor and pipeline parallelism";
  else if (e.max_tensor > 1 && e.max_pipeline > 1)
    model_parallel = fmt::format("tensor parallelism (dp x tp, ZeRO {}) or pipeline stages "
                                 "(dp x pp, ZeRO {}{}), not both",
                                 list_zero(tensor_zero),
                                 list_zero(e.pipeline_zero_stages.empty() ? e.zero_stages
                                                                          : e.pipeline_zero_stages),
                                 e.pipeline_recomputes_stages ? ", each stage's forward recomputed before its backward" : "");
  else if (e.max_tensor > 1)
    model_parallel = fmt::format("tensor parallelism (dp x tp, ZeRO {}), no pipeline stages",
                                 list_zero(tensor_zero));
  else
    model_parallel = "no tensor or pipeline parallelism";
  return fmt::format("`aiscale train` on {} ranks runs {}-family models in {}; data parallelism "
                     "with ZeRO {}{}; {}; {}",
                     cpu_partition ? "CPU" : "GPU",
                     has(e.gpt_families, nn::GptFamily::llama) ? "GPT-2- and Llama" : "GPT-2",
                     list_precisions(e.precisions), list_zero(e.zero_stages),
                     cpu_partition ? " over MPI" : " over NCCL (or the copy engines in one node)",
                     model_parallel,
                     has(e.models, WorkloadKind::cnn) ? "ResNets with data parallelism"
                                                     : "no CNN training yet");
}

}  // namespace aiscale::plan
