#include "aiscale/train/model_options.h"

#include "aiscale/core/dtype.h"

namespace aiscale::train {

nn::GptRunOptions gpt_run_options(const TrainConfig& c) {
  nn::GptRunOptions ro;
  ro.batch = c.batch_size;
  ro.seq = c.seq_len;
  set_precision(ro, c);
  ro.recompute = c.recompute;
  ro.recompute_layers = c.recompute_layers;
  ro.decay_embeddings = c.decay_embeddings;
  ro.seed = c.seed;
  return ro;
}

void set_precision(nn::GptRunOptions& o, const TrainConfig& c) {
  o.fp8 = c.precision == "fp8";
  o.precision = o.fp8 ? DType::bf16 : parse_dtype(c.precision);
  o.fp8_history = static_cast<int>(c.fp8_history);
  o.fp8_margin = static_cast<int>(c.fp8_margin);
}

}  // namespace aiscale::train
