// A full mesh of TCP connections between the ranks of one group, and tagged messages over
// it: the transport of the TCP communicator (comm_tcp.cpp), for CPU ranks started without
// an MPI launcher (torchrun, srun without an MPI plugin).
//
// Set-up goes through a Store: each rank listens on a free port, publishes "host port"
// under <prefix>addr/<rank>, connects to every lower rank and accepts the higher ones
// (each connection opens with a handshake naming the group and the connecting rank).
//
// Messages carry a header (tag, length) and match receives per (peer, tag) in the order
// sent, as MPI's do. Every operation is non-blocking and completed by wait(); while
// waiting, the mesh moves every connection's data at once (poll), so two ranks that send
// each other large messages never wait for each other, and bytes that arrive before their
// receive is posted are kept aside. A wait fails with an Error naming the peer when its
// connection closes (the peer ended or died) or when no byte moved for timeout_s.
#pragma once
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "aiscale/parallel/algorithms/peer_links.h"

namespace aiscale::parallel {

class Store;

namespace tcp {

class Mesh final : public algorithms::PeerLinks {
 public:
  // Collective over the `world` ranks that call it with the same store and prefix.
  // `world_ranks` names each member by its rank in the whole job (for messages);
  // `advertise` is the host name or address the other ranks reach this one by. A group of
  // one needs no store (null).
  Mesh(Store* store, const std::string& prefix, int rank, std::vector<int> world_ranks,
       double timeout_s, const std::string& advertise);
  ~Mesh() override;
  Mesh(const Mesh&) = delete;
  Mesh& operator=(const Mesh&) = delete;

  int rank() const override { return rank_; }
  int world() const override { return static_cast<int>(peers_.size()); }

  // PeerLinks (the all-reduce algorithms): floats, not copied.
  int isend(const float* data, int64_t n, int peer, int tag) override {
    return isend_bytes(data, n * 4, peer, tag);
  }
  int irecv(float* data, int64_t n, int peer, int tag) override {
    return irecv_bytes(data, n * 4, peer, tag);
  }
  void wait(int id) override;
  void wait_all() override;

  // `data` must stay untouched until the send is waited for.
  int isend_bytes(const void* data, int64_t bytes, int peer, int tag);
  // A copy is sent: the caller's buffer is free at once. Not waited for by wait_all();
  // flush() completes these.
  void send_copy(const void* data, int64_t bytes, int peer, int tag);
  // The message from `peer` with `tag` must hold exactly `bytes` bytes.
  int irecv_bytes(void* data, int64_t bytes, int peer, int tag);
  void flush();

  // What the waits are for, named in their errors ("all-reduce", "broadcast").
  void set_activity(const char* what) { activity_ = what; }
  // "rank 3" (the job's rank of group member `peer`).
  std::string name(int peer) const;
  // Closes every connection at once (a rank that aborts: its peers fail naming it).
  void close_all();

 private:
  struct Outgoing {
    char header[16];
    const char* data = nullptr;
    int64_t bytes = 0;
    int64_t sent = 0;  // of header + data
    std::vector<char> copy;  // send_copy's own bytes
    int op = -1;             // -1: a send_copy, not in ops_
  };
  struct Peer {
    int fd = -1;
    bool closed = false;
    std::deque<Outgoing> out;
    // The message being read: its header, then its body into `dest` (a posted receive's
    // buffer, or `held` when none was posted yet).
    char header[16];
    int header_got = 0;
    bool in_body = false;
    int tag = 0;
    int64_t body_bytes = 0, body_got = 0;
    char* dest = nullptr;
    int dest_op = -1;
    std::vector<char> held;
    std::map<int, std::deque<int>> posted;                 // receives by tag, oldest first
    std::map<int, std::deque<std::vector<char>>> arrived;  // messages nobody asked for yet
  };
  struct Op {
    bool done = false;
    bool receive = false;
    int peer = 0;
    int tag = 0;
    char* data = nullptr;
    int64_t bytes = 0;
  };

  // Fails (a bug in aiscale) unless `peer` is another rank of the group.
  void check_peer(int peer, bool receive) const;
  // Records an operation with `peer` (checked) and returns its id.
  int new_op(bool receive, int peer, int tag, char* data, int64_t bytes);
  void connect_mesh(Store& store, const std::string& prefix, const std::string& advertise);
  // Moves data until done() is true; throws naming the peer that closed or stalled.
  template <typename Done>
  void progress_until(Done&& done);
  bool write_some(int peer);
  // Queues `o` (its data and op set) to `peer` as message `tag` of `bytes`; the first in
  // the queue starts leaving at once.
  void queue_message(int peer, int tag, int64_t bytes, Outgoing o);
  bool read_some(int peer);
  void header_arrived(int peer);
  void body_arrived(int peer);
  void deliver(int peer, int op_id, const std::vector<char>& msg);
  [[noreturn]] void fail_peer(int peer, const std::string& why) const;
  bool peer_busy(int peer) const;

  int rank_ = 0;
  std::vector<int> world_ranks_;
  double timeout_s_ = 300;
  uint64_t group_id_ = 0;
  std::vector<Peer> peers_;
  std::unordered_map<int, Op> ops_;
  int next_op_ = 0;
  const char* activity_ = "set-up";
};

}  // namespace tcp
}  // namespace aiscale::parallel
