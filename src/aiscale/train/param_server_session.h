// `aiscale train` with parallel.parameter_servers = S: asynchronous training, the last S
// ranks holding the weights and AdamW state in shards, the others pulling weights,
// computing gradients on their own data and pushing them without a barrier
// (parallel/param_server/). Writes the run directory as a synchronous run does: config,
// environment, metrics (one line per worker step, with its staleness), the summary and a
// final checkpoint in the usual format, gathered whole from the servers.
#pragma once
#include <string>

#include "aiscale/parallel/comm.h"
#include "aiscale/train/config.h"
#include "aiscale/train/session.h"

namespace aiscale::train {

// Returns the process exit code. `comm` spans every rank of the job (MPI).
int run_parameter_server_training(const TrainRequest& request, const TrainConfig& config,
                                  const std::string& config_path, parallel::Communicator& comm);

}  // namespace aiscale::train
