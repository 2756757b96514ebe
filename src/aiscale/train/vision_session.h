// One `aiscale train` invocation of a vision config (model.kind = "resnet"): ranks, model,
// images, run directory, checkpoints and resume around the one Trainer (train/trainer.h).
//
// Checkpoint folder (the protocol of checkpoint.h: step_N.tmp, renamed, COMPLETE last):
//   model.safetensors      parameters and batch norm running statistics under torchvision's
//                          names (loadable into torchvision's resnet with load_state_dict)
//   optimizer.safetensors  SGD momentum buffers, one per parameter, same names
//   state.json             step, data position, seed, world size, resolved config
#pragma once
#include <string>

#include "aiscale/train/session.h"

namespace aiscale::train {

// Whether `request` names a vision config (its --config, or the run directory's config.toml
// when resuming).
bool is_vision_request(const TrainRequest& request);
// Returns the process exit code (0: finished).
int run_vision_training(const TrainRequest& request);

}  // namespace aiscale::train
