#include "aiscale/parallel/param_server/channel.h"

#include <chrono>
#include <thread>

#include "aiscale/core/error.h"
#include "aiscale/parallel/comm.h"
#include "aiscale/parallel/mpi_error.h"

#ifdef AISCALE_HAVE_MPI
#include <mpi.h>
#endif

namespace aiscale::parallel::param_server {

#ifdef AISCALE_HAVE_MPI
namespace {

void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) fail("MPI {} (parameter servers) failed: {}", what, mpi_error_text(rc));
}

const char* tag_name(Tag t) {
  switch (t) {
    case Tag::pull: return "pull request";
    case Tag::push_header: return "push header";
    case Tag::push_gradient: return "gradient";
    case Tag::done: return "done message";
    case Tag::weights_header: return "weights header";
    case Tag::weights: return "weights";
    case Tag::final_state: return "final state";
    case Tag::final_stats: return "staleness statistics";
    case Tag::worker_records: return "step records";
  }
  return "message";
}

}  // namespace

struct Channel::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  double timeout_s = 300;
  struct Pending {
    std::vector<char> bytes;
    MPI_Request request = MPI_REQUEST_NULL;
  };
  std::deque<Pending> sends;  // oldest first

  // Polls `done` with a growing sleep (up to 1 ms) so a waiting rank leaves its core.
  template <class Test>
  void wait_for(Test done, const char* what, int peer) {
    const auto start = std::chrono::steady_clock::now();
    int spins = 0;
    while (!done()) {
      if (++spins > 64)
        std::this_thread::sleep_for(std::chrono::microseconds(spins > 1000 ? 1000 : 50));
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (waited > timeout_s)
        fail("parameter servers: waited {:.0f} s for {} from rank {} (parallel.timeout_s = {}): a "
             "rank has stopped or is far slower than the others; see its log, or raise "
             "parallel.timeout_s", waited, what, peer < 0 ? std::string("any rank") : std::to_string(peer),
             timeout_s);
    }
  }
  void reap(bool all) {
    while (!sends.empty()) {
      int done = 0;
      if (all) {
        MPI_Request& r = sends.front().request;
        wait_for([&] { check(MPI_Test(&r, &done, MPI_STATUS_IGNORE), "send (test)"); return done != 0; },
                 "a send to complete", -1);
      } else {
        check(MPI_Test(&sends.front().request, &done, MPI_STATUS_IGNORE), "send (test)");
        if (!done) return;
      }
      sends.pop_front();
    }
  }
  void send(const void* data, int64_t bytes, MPI_Datatype type, int64_t n, int peer, Tag tag) {
    reap(false);
    sends.push_back({});
    Pending& p = sends.back();
    p.bytes.assign(static_cast<const char*>(data), static_cast<const char*>(data) + bytes);
    check(MPI_Isend(p.bytes.data(), static_cast<int>(n), type, peer, static_cast<int>(tag), comm, &p.request),
          tag_name(tag));
  }
  void recv(void* data, int64_t n, MPI_Datatype type, int peer, Tag tag) {
    MPI_Request r = MPI_REQUEST_NULL;
    check(MPI_Irecv(data, static_cast<int>(n), type, peer, static_cast<int>(tag), comm, &r), tag_name(tag));
    MPI_Status st;
    int done = 0;
    wait_for([&] { check(MPI_Test(&r, &done, &st), tag_name(tag)); return done != 0; }, tag_name(tag), peer);
    int got = 0;
    MPI_Get_count(&st, type, &got);
    if (got != n)
      fail("parameter servers: rank {} sent {} values as its {}, {} expected (ranks running "
           "different models or builds?)", peer, got, tag_name(tag), n);
  }
};

Channel::Channel(Communicator& world, double timeout_s) : impl_(std::make_unique<Impl>()) {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (world.backend() != "mpi" || size != world.world())
    fail("parameter servers run on CPU ranks over MPI (the world's {} rank(s), communicator '{}'): "
         "launch with mpirun or `aiscale launch` and set parallel.communicator = \"auto\" or \"mpi\"",
         world.world(), world.backend());
  impl_->timeout_s = timeout_s;
  check(MPI_Comm_dup(MPI_COMM_WORLD, &impl_->comm), "duplicate the world communicator");
  MPI_Comm_set_errhandler(impl_->comm, MPI_ERRORS_RETURN);
}

Channel::~Channel() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  try {
    impl_->reap(true);
  } catch (const std::exception&) {
    // a peer that stopped: nothing more to deliver
  }
  MPI_Comm_free(&impl_->comm);
}

void Channel::send(const double* data, int64_t n, int peer, Tag tag) {
  impl_->send(data, n * 8, MPI_DOUBLE, n, peer, tag);
}
void Channel::send(const float* data, int64_t n, int peer, Tag tag) {
  impl_->send(data, n * 4, MPI_FLOAT, n, peer, tag);
}
void Channel::recv(double* data, int64_t n, int peer, Tag tag) { impl_->recv(data, n, MPI_DOUBLE, peer, tag); }
void Channel::recv(float* data, int64_t n, int peer, Tag tag) { impl_->recv(data, n, MPI_FLOAT, peer, tag); }

std::vector<double> Channel::recv_doubles(int peer, Tag tag) {
  MPI_Status st;
  int found = 0;
  impl_->wait_for([&] {
    check(MPI_Iprobe(peer, static_cast<int>(tag), impl_->comm, &found, &st), "probe");
    return found != 0;
  }, tag_name(tag), peer);
  int n = 0;
  MPI_Get_count(&st, MPI_DOUBLE, &n);
  std::vector<double> out(static_cast<size_t>(n));
  impl_->recv(out.data(), n, MPI_DOUBLE, peer, tag);
  return out;
}

Incoming Channel::next() {
  MPI_Status st;
  int found = 0;
  impl_->wait_for([&] {
    impl_->reap(false);
    check(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, impl_->comm, &found, &st), "probe");
    return found != 0;
  }, "a worker's message", -1);
  Incoming in;
  in.source = st.MPI_SOURCE;
  in.tag = static_cast<Tag>(st.MPI_TAG);
  int n = 0;
  MPI_Get_count(&st, in.tag == Tag::push_gradient || in.tag == Tag::weights || in.tag == Tag::final_state
                         ? MPI_FLOAT : MPI_DOUBLE, &n);
  in.count = n;
  return in;
}

void Channel::flush() { impl_->reap(true); }

#else

struct Channel::Impl {};
Channel::Channel(Communicator& world, double) {
  fail("parameter servers need MPI, and aiscale was built without it (world of {} rank(s)): "
       "install libopenmpi-dev (scripts/setup.sh) and rebuild", world.world());
}
Channel::~Channel() = default;
void Channel::send(const double*, int64_t, int, Tag) {}
void Channel::send(const float*, int64_t, int, Tag) {}
void Channel::recv(double*, int64_t, int, Tag) {}
void Channel::recv(float*, int64_t, int, Tag) {}
std::vector<double> Channel::recv_doubles(int, Tag) { return {}; }
Incoming Channel::next() { return {}; }
void Channel::flush() {}

#endif

}  // namespace aiscale::parallel::param_server
