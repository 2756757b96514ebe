// SIGINT and SIGTERM while a study runs on this machine: instead of ending `aiscale scale`
// at once (which would leave the running point's mpirun and ranks behind, to run beside the
// next attempt), the signal is recorded and passed on to the point's processes; the study
// then ends them, records the point as interrupted and stops (study_dir.cpp).
#pragma once
#include <signal.h>
#include <sys/types.h>

#include "aiscale/core/non_copyable.h"

namespace aiscale::sweep {

// Installs the handlers for its lifetime (the previous ones are restored after, and what was
// received is forgotten).
class StopSignals : NonCopyable {
 public:
  StopSignals();
  ~StopSignals();

  // The first stop signal received (SIGINT or SIGTERM), 0 when none.
  static int received();
  // How many were received: a second one means "now" (the grace period is cut short).
  static int count();
  // The running point's process: a signal goes on to its process group (and to the process
  // itself before it has made that group). 0: no point runs.
  static void set_point_process(pid_t pid);
};

// With SIGINT and SIGTERM blocked for its lifetime: a point's process is started and
// recorded (set_point_process) before a signal can be handled, so none falls in between.
class BlockStopSignals : NonCopyable {
 public:
  BlockStopSignals();
  ~BlockStopSignals();

 private:
  sigset_t saved_;
};

// In a forked child before exec: the default handlers and no blocked stop signals.
void reset_stop_signals_in_child();

// "SIGTERM", "SIGINT", "signal 10".
const char* stop_signal_name(int sig);

}  // namespace aiscale::sweep
