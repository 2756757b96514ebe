// A communicator wrapper that bounds how long any collective may take. When a peer rank
// dies, MPI collectives can block forever; the watchdog thread notices the stalled call
// after `timeout_s`, prints which call stalled on which rank, and ends the process with
// exit code 3 (mpirun/srun then end the remaining ranks).
#pragma once
#include <memory>

#include "aiscale/parallel/comm.h"

namespace aiscale::parallel {
std::unique_ptr<Communicator> with_watchdog(std::unique_ptr<Communicator> inner, double timeout_s);
}  // namespace aiscale::parallel
