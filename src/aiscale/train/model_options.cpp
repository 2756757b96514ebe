#include "aiscale/train/model_options.h"

#include "aiscale/core/dtype.h"

namespace aiscale::train {

nn::GptRunOptions gpt_run_options(const TrainConfig& c) {
  nn::GptRunOptions ro;
  ro.batch = c.batch_size;
  ro.seq = c.seq_len;
  ro.precision = parse_dtype(c.precision);
  ro.recompute = c.recompute;
  ro.recompute_layers = c.recompute_layers;
  ro.decay_embeddings = c.decay_embeddings;
  ro.seed = c.seed;
  return ro;
}

}  // namespace aiscale::train
