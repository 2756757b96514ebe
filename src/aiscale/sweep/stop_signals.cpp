#include "aiscale/sweep/stop_signals.h"

#include <csignal>

namespace aiscale::sweep {
namespace {

volatile sig_atomic_t g_first = 0;
volatile sig_atomic_t g_count = 0;
volatile pid_t g_point = 0;
struct sigaction g_saved_int, g_saved_term;

extern "C" void aiscale_scale_on_stop_signal(int sig) {
  if (g_first == 0) g_first = sig;
  g_count = g_count + 1;
  const pid_t p = g_point;
  // The child makes its own session (and process group) first thing; until it has, the
  // group does not exist and the signal goes to the child itself.
  if (p > 0 && ::kill(-p, sig) != 0) ::kill(p, sig);
}

sigset_t stop_set() {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGINT);
  sigaddset(&s, SIGTERM);
  return s;
}

}  // namespace

StopSignals::StopSignals() {
  g_first = 0;
  g_count = 0;
  g_point = 0;
  struct sigaction sa {};
  sa.sa_handler = aiscale_scale_on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a blocking waitpid returns EINTR, so the wait sees it
  // A signal ignored when aiscale started (a background job of a script ignores SIGINT)
  // stays ignored, as it would have been without these handlers.
  ::sigaction(SIGINT, nullptr, &g_saved_int);
  ::sigaction(SIGTERM, nullptr, &g_saved_term);
  if (g_saved_int.sa_handler != SIG_IGN) ::sigaction(SIGINT, &sa, nullptr);
  if (g_saved_term.sa_handler != SIG_IGN) ::sigaction(SIGTERM, &sa, nullptr);
}

StopSignals::~StopSignals() {
  ::sigaction(SIGINT, &g_saved_int, nullptr);
  ::sigaction(SIGTERM, &g_saved_term, nullptr);
  g_point = 0;
  g_first = 0;
  g_count = 0;
}

int StopSignals::received() { return g_first; }
int StopSignals::count() { return g_count; }
void StopSignals::set_point_process(pid_t pid) { g_point = pid; }

BlockStopSignals::BlockStopSignals() {
  const sigset_t s = stop_set();
  ::sigprocmask(SIG_BLOCK, &s, &saved_);
}

BlockStopSignals::~BlockStopSignals() { ::sigprocmask(SIG_SETMASK, &saved_, nullptr); }

void reset_stop_signals_in_child() {
  // What they were before the handlers: the default, or ignored.
  ::signal(SIGINT, g_saved_int.sa_handler == SIG_IGN ? SIG_IGN : SIG_DFL);
  ::signal(SIGTERM, g_saved_term.sa_handler == SIG_IGN ? SIG_IGN : SIG_DFL);
  const sigset_t s = stop_set();
  ::sigprocmask(SIG_UNBLOCK, &s, nullptr);
}

const char* stop_signal_name(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGKILL: return "SIGKILL";
    case SIGHUP: return "SIGHUP";
    default: return "a signal";
  }
}

}  // namespace aiscale::sweep
