// One named tensor inside a model's flat fp32 parameter buffer (and its gradient buffer,
// and any per-value optimizer state, which share the layout): what a model publishes of its
// parameters (nn/model.h) and what the optimizers and data-parallel wrappers that know no
// model read (optim/optimizer.h, optim/data_parallel.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace aiscale {

struct ParamTensor {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0, size = 0;
  bool decay = false;  // weight decay applies to it
};

}  // namespace aiscale
