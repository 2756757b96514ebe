#include "aiscale/plan/layout.h"

#include <fmt/format.h>

#include "aiscale/core/enum_names.h"
#include "aiscale/core/error.h"

namespace aiscale::plan {

namespace {

constexpr EnumName<Recompute> recomputations[] = {{Recompute::none, "none"},
                                                  {Recompute::none, "off"},
                                                  {Recompute::selective, "selective"},
                                                  {Recompute::full, "full"}};

constexpr EnumName<GradTransport> grad_transports[] = {{GradTransport::nccl, "nccl"},
                                                       {GradTransport::copy_engine, "copy-engine"}};

}  // namespace

Recompute parse_recompute(std::string_view t) { return parse_enum(recomputations, t, "recomputation"); }

std::string_view to_string(Recompute r) { return enum_name(recomputations, r); }

GradTransport parse_grad_transport(std::string_view t) {
  return parse_enum(grad_transports, t, "gradient transport");
}

std::string_view to_string(GradTransport t) { return enum_name(grad_transports, t, "nccl"); }

std::string Layout::shape() const { return fmt::format("{}×{}×{}", dp, tp, pp); }

std::string Layout::describe() const {
  return fmt::format("dp {} × tp {} × pp {}, {}, micro-batch {} × accumulation {}, recompute {}{}{}",
                     dp, tp, pp, zero == 0 ? std::string("DDP") : fmt::format("ZeRO-{}", zero),
                     micro_batch, grad_accum, to_string(recompute),
                     transport == GradTransport::copy_engine ? ", copy engines" : "",
                     offload ? ", optimizer offloaded" : "");
}

std::optional<std::string> layout_problem(const Layout& l, const Workload& w) {
  if (l.dp < 1 || l.tp < 1 || l.pp < 1)
    return fmt::format("data, tensor and pipeline sizes must be at least 1 (got {})", l.shape());
  if (l.zero < 0 || l.zero > 3) return fmt::format("ZeRO stage {} does not exist: use 0, 1, 2 or 3", l.zero);
  if (l.transport == GradTransport::copy_engine && l.zero > 1)
    return fmt::format("the copy-engine transport carries plain data parallelism and ZeRO-1, "
                       "not ZeRO-{}: use --zero-stage 0 or 1, or --grad-transport nccl", l.zero);
  if (l.offload && l.zero == 0)
    return "optimizer offload moves the ZeRO optimizer shards to host memory: use a ZeRO stage "
           "(--zero-stage 1, 2 or 3; aiscale trains it with 3)";
  if (l.micro_batch < 1 || l.grad_accum < 1)
    return fmt::format("micro-batch ({}) and gradient accumulation ({}) must be at least 1",
                       l.micro_batch, l.grad_accum);
  if (!w.is_transformer()) {
    if (l.tp > 1 || l.pp > 1)
      return fmt::format("{} is planned with data parallelism only: tensor and pipeline sizes "
                         "must be 1 (got tp {}, pp {})", w.name, l.tp, l.pp);
    if (l.recompute != Recompute::none)
      return fmt::format("recomputation is modelled for transformers only, not {}", w.name);
    return std::nullopt;
  }
  if (w.gpt.n_head % l.tp != 0)
    return fmt::format("tensor-parallel size {} does not divide the {} attention heads of {}: "
                       "choose a divisor of {}", l.tp, w.gpt.n_head, w.name, w.gpt.n_head);
  // Megatron splits K and V by key/value heads and the MLP by its rows (a Llama's gate and
  // up each): each tensor rank needs whole heads and an equal share of the MLP.
  if (w.gpt.kv_heads() % l.tp != 0)
    return fmt::format("tensor-parallel size {} does not divide the {} key/value heads of {} "
                       "(model.n_kv_head): choose a divisor of {}", l.tp, w.gpt.kv_heads(),
                       w.name, w.gpt.kv_heads());
  if (w.gpt.ffn() % l.tp != 0)
    return fmt::format("tensor-parallel size {} does not divide the MLP width {} of {} "
                       "(model.ffn_hidden): choose a divisor of {}", l.tp, w.gpt.ffn(), w.name,
                       w.gpt.ffn());
  if (l.pp > w.gpt.n_layer)
    return fmt::format("pipeline size {} exceeds the {} layers of {}", l.pp, w.gpt.n_layer, w.name);
  if (l.pp > 1 && l.zero >= 2)
    return fmt::format("ZeRO-{} with pipeline parallelism (pp {}) is not supported (DeepSpeed "
                       "allows ZeRO-1 with pipelines): use --zero-stage 1 or --pp 1", l.zero, l.pp);
  return std::nullopt;
}

void validate_layout(const Layout& l, const Workload& w) {
  if (auto p = layout_problem(l, w)) fail("impossible layout: {}", *p);
}

}  // namespace aiscale::plan
