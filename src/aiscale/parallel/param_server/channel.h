// The point-to-point messages between parameter servers and workers: MPI on a
// communicator duplicated from the world (so that none of them can match a message of the
// trainer's collectives), one tag per kind of message. Waiting polls with a short sleep
// instead of MPI's spinning wait, so that an idle server leaves its core to the workers
// (CPU ranks often share cores), and fails after the run's parallel.timeout_s.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

namespace aiscale::parallel {
class Communicator;
}

namespace aiscale::parallel::param_server {

// Kinds of message. Headers are small arrays of doubles (integers up to 2^53 exact);
// payloads are floats.
enum class Tag : int {
  pull = 1,            // worker -> server: send me your shard (no payload but a header)
  push_header = 2,     // worker -> server: {version computed from, gradient scale, loss}
  push_gradient = 3,   // worker -> server: the gradient of the server's shard
  done = 4,            // worker -> server: no more pushes from me
  weights_header = 5,  // server -> worker: {version, staleness of your last push, applied}
  weights = 6,         // server -> worker: the shard's weights
  final_state = 7,     // server -> rank 0: the shard's weights, m, v (one message)
  final_stats = 8,     // server -> rank 0: {updates, discarded, staleness sum, max}
  worker_records = 9,  // worker -> rank 0: its step records
};

struct Incoming {
  int source = -1;
  Tag tag = Tag::pull;
  int64_t count = 0;  // values in the message (doubles for headers, floats for payloads)
};

class Channel {
 public:
  // Collective over every rank of `world`, which must be the MPI world of the job.
  Channel(Communicator& world, double timeout_s);
  ~Channel();
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  // Sends return at once; the data is copied, so the caller may reuse its buffer.
  void send(const double* data, int64_t n, int peer, Tag tag);
  void send(const float* data, int64_t n, int peer, Tag tag);
  // Blocking receives of exactly n values from `peer`.
  void recv(double* data, int64_t n, int peer, Tag tag);
  void recv(float* data, int64_t n, int peer, Tag tag);
  // A message of unknown length from `peer` (worker records).
  std::vector<double> recv_doubles(int peer, Tag tag);
  // Waits for the next message from any rank (any tag) and returns what it is, without
  // receiving it.
  Incoming next();
  // Completes every send in flight.
  void flush();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace aiscale::parallel::param_server
