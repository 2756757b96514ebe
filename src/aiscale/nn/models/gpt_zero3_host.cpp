#include "aiscale/nn/models/gpt_zero3_host.h"

#include <algorithm>
#include <cstring>

#include "aiscale/ops/cpu/kernels.h"
#include "aiscale/ops/cpu/simd.h"

namespace aiscale::nn {

void zero3_host_adamw(const GptZero3Layout& z, const nn::GptLayout& layout, bool decay_embeddings,
                      float* master, float* m, float* v, const float* grads, void* work, DType t,
                      const ops::AdamWParams& hp) {
  zero3_host_adamw(z, nn::GptShardLayout(layout.config(), 1, 0), decay_embeddings, master, m, v,
                   grads, work, t, hp);
}

void zero3_host_adamw(const GptZero3Layout& z, const nn::GptShardLayout& layout,
                      bool decay_embeddings, float* master, float* m, float* v,
                      const float* grads, void* work, DType t, const ops::AdamWParams& hp) {
  ops::AdamWParams no_decay = hp;
  no_decay.weight_decay = 0.0f;
  const auto& tensors = layout.tensors();
  for (int u = 0; u < z.units(); ++u) {
    const int64_t ob = z.owned_begin(u);
    for (const auto& r : z.runs(ob, z.owned_end(u))) {
      // The run's flat range, cut at tensor boundaries (each tensor decays or not).
      int64_t f = r.flat;
      const int64_t end = r.flat + r.n;
      while (f < end) {
        auto it = std::upper_bound(tensors.begin(), tensors.end(), f,
                                   [](int64_t x, const nn::ShardedTensor& p) { return x < p.offset; });
        const nn::ShardedTensor& p = *(it - 1);
        const int64_t stop = std::min(end, p.offset + p.numel);
        const int64_t s = z.shard_offset(u) + (r.work - ob) + (f - r.flat);
        ops::cpu::adamw_update(master + s, grads + s, m + s, v + s, stop - f,
                               nn::GptLayout::decays(p.full, decay_embeddings) ? hp : no_decay);
        f = stop;
      }
    }
  }
  // The working copy's shard, whole (padding included: its master values are zero).
  const int64_t n = z.shards_size();
  if (t == DType::f32) {
    std::memcpy(work, master, size_t(n) * 4);
    return;
  }
  auto* w = static_cast<uint16_t*>(work);
  ops::cpu::parallel_slices(n, 1, [&](int64_t b, int64_t e) {
    if (t == DType::bf16)
      for (int64_t i = b; i < e; ++i) w[i] = f32_to_bf16(master[i]);
    else
      for (int64_t i = b; i < e; ++i) w[i] = f32_to_f16(master[i]);
  });
}

}  // namespace aiscale::nn
