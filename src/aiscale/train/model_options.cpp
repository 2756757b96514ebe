#include "aiscale/train/model_options.h"

#include "aiscale/core/dtype.h"

namespace aiscale::train {

nn::GptRunOptions gpt_run_options(const TrainConfig& c) {
  nn::GptRunOptions ro;
  ro.batch = c.batch_size;
  ro.seq = c.seq_len;
  set_precision(ro, c.precision);
  ro.fp8_history = static_cast<int>(c.fp8_history);
  ro.fp8_margin = static_cast<int>(c.fp8_margin);
  ro.recompute = c.recompute;
  ro.recompute_layers = c.recompute_layers;
  ro.decay_embeddings = c.decay_embeddings;
  ro.seed = c.seed;
  return ro;
}

void set_precision(nn::GptRunOptions& o, const std::string& precision) {
  o.fp8 = precision == "fp8";
  o.precision = o.fp8 ? DType::bf16 : parse_dtype(precision);
}

}  // namespace aiscale::train
