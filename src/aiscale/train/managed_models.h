// The data-parallel wrapper of a GPT run (optim/data_parallel.h): a host
// model that leaves synchronisation to the trainer gets DDP, or ZeRO-1 with
// parallel.zero_stage = 1, with AdamW outside the model (optim/optimizer.h); a model that
// synchronises itself (the CUDA models, which keep their own reducer, ZeRO and AdamW on the
// device; the CPU model holding tensor slices, pipeline stages or ZeRO-2/3 shards) gets the
// "model" wrapper, which forwards the exchange, the norm and the update to the model's own
// interface (nn/models/gpt.h).
#pragma once
#include <memory>

#include "aiscale/nn/model.h"
#include "aiscale/nn/models/gpt.h"
#include "aiscale/parallel/comm.h"
#include "aiscale/optim/data_parallel.h"
#include "aiscale/train/config.h"

namespace aiscale::train {

// The wrapper the trainer uses for `model` under `c` (model, comm must outlive it).
std::unique_ptr<optim::DataParallel> make_data_parallel(const TrainConfig& c,
                                                               nn::GptModel& model,
                                                               parallel::Communicator& comm,
                                                               int data_world);

// A host model's buffers and tensors for the host wrappers.
inline optim::HostModel host_model(nn::Model& m) {
  return {m.param_buffer(), m.grad_buffer(), m.num_params(), &m.param_tensors()};
}

// The ZeRO stage the model itself runs: the config's, except CPU ZeRO-1, which is the
// trainer's wrapper around a plain model (the model then shards nothing).
inline int model_zero_stage(const TrainConfig& c) {
  return c.device == "cpu" && c.zero_stage == 1 ? 0 : static_cast<int>(c.zero_stage);
}

// The options of the host wrappers from a run's [parallel] keys.
optim::HostDataParallelOptions host_data_parallel_options(const TrainConfig& c);

}  // namespace aiscale::train
