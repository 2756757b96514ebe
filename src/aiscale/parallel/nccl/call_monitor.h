// Bounds the host calls into a blocking NCCL communicator.
//
// A blocking communicator's calls return only when NCCL has done their host-side work:
// the set-up waits for every rank, and a collective's first use of an algorithm or a
// peer connects to the peers. If a peer died, such a call never returns and nothing on
// this thread can notice. The monitor's thread can: the owning thread marks each call
// (enter/leave: two atomic stores, nothing else on the fast path), and when one mark has
// stood longer than the deadline the monitor says which call on which rank stalled and
// ends the process with exit code 3, so that the launcher ends the other ranks instead of
// the job hanging until its time limit. (Waits on issued collectives are bounded by the
// communicator itself, which polls the stream and aborts the communicator.)
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

namespace aiscale::parallel {

class NcclCallMonitor {
 public:
  // rank and world name the process in the message; timeout_s is parallel.timeout_s.
  NcclCallMonitor(int rank, int world, double timeout_s);
  ~NcclCallMonitor();
  NcclCallMonitor(const NcclCallMonitor&) = delete;
  NcclCallMonitor& operator=(const NcclCallMonitor&) = delete;

  void set_rank(int rank, int world) {
    rank_.store(rank, std::memory_order_relaxed);
    world_.store(world, std::memory_order_relaxed);
  }
  // `what` must outlive the call (a string literal).
  void enter(const char* what);
  void leave() { since_ns_.store(0, std::memory_order_release); }

  // Marks the scope of one call.
  class Scope {
   public:
    Scope(NcclCallMonitor* m, const char* what) : m_(m) {
      if (m_) m_->enter(what);
    }
    ~Scope() {
      if (m_) m_->leave();
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    NcclCallMonitor* m_;
  };

 private:
  void watch();

  std::atomic<int> rank_, world_;
  const double timeout_s_;
  std::atomic<int64_t> since_ns_{0};  // steady-clock time the current call began; 0: none
  std::atomic<const char*> what_{""};
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace aiscale::parallel
