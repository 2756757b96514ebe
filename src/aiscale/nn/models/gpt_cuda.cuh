// The CUDA GPT model's constructor, callable from host code (no CUDA types here).
// make_gpt_cuda (gpt_factory_nocuda.cpp) validates the configuration, draws the
// initial parameters with gpt_init_params and calls this.
#pragma once
#include <memory>
#include <vector>

#include "aiscale/nn/models/gpt.h"

namespace aiscale::nn::detail {

// Builds the model on the current CUDA device from initial parameters in gpt_param_infos
// order (num_params values).
std::unique_ptr<GptModel> create_gpt_cuda(const GptConfig& c, const GptRunOptions& o,
                                          const std::vector<float>& init_params);

// Number of usable CUDA devices (0 when there is no driver or no GPU; never throws).
int cuda_device_count_checked();

}  // namespace aiscale::nn::detail
