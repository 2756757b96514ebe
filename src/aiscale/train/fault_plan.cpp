// AISCALE_FAULT: failures made on purpose, for the tests of failure handling (session.h).
#include <cmath>
#include <cstdio>

#include "aiscale/core/env.h"
#include "aiscale/core/error.h"
#include "aiscale/train/session.h"

namespace aiscale::train {

FaultPlan fault_plan_from_env() {
  FaultPlan f;
  const std::string s = env::get("AISCALE_FAULT");
  if (s.empty()) return f;
  long long step = 0;
  int rank = 0;
  if (std::sscanf(s.c_str(), "nan@%lld", &step) == 1) f.nan_step = step;
  else if (std::sscanf(s.c_str(), "kill@%lld:%d", &step, &rank) == 2) f.kill_step = step, f.kill_rank = rank;
  else if (std::sscanf(s.c_str(), "fail@%lld:%d", &step, &rank) == 2) f.fail_step = step, f.fail_rank = rank;
  else if (std::sscanf(s.c_str(), "term@%lld", &step) == 1) f.term_step = step;
  else if (std::sscanf(s.c_str(), "slow@%d:%lf", &rank, &f.slow_ms) == 2 && std::isfinite(f.slow_ms) &&
           f.slow_ms >= 0 && f.slow_ms <= 3.6e6) f.slow_rank = rank;
  else if (std::sscanf(s.c_str(), "blowup@%lld", &step) == 1) f.blowup_step = step;
  else fail("environment variable AISCALE_FAULT='{}' is not understood: use nan@STEP, "
            "kill@STEP:RANK, fail@STEP:RANK, term@STEP, slow@RANK:MS (0 to 3600000) or blowup@STEP", s);
  return f;
}

}  // namespace aiscale::train
