// The GPT model options that a training config fixes whatever the parallel layout: the
// batch and sequence per step, precision, recomputation, weight decay of the embeddings
// and the seed. Both training runs that build a GPT start from it (session.cpp for the
// synchronous layouts, which add the communicator, groups, ZeRO and the gradient exchange;
// param_server_session.cpp for the parameter-server workers, which add nothing), so that
// a key added to both is set in one place.
#pragma once
#include "aiscale/nn/models/gpt.h"
#include "aiscale/train/config.h"

namespace aiscale::train {

nn::GptRunOptions gpt_run_options(const TrainConfig& c);

// train.precision into the options: "fp32", "bf16", "fp16" as the activations' type;
// "fp8" as bf16 with the FP8 linear layers (GptRunOptions::fp8), with the delayed scaling's
// train.fp8_history and train.fp8_margin.
void set_precision(nn::GptRunOptions& o, const TrainConfig& c);

}  // namespace aiscale::train
