#include "aiscale/parallel/tcp_mesh.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>

#include <fmt/format.h>

#include "aiscale/core/error.h"
#include "aiscale/parallel/store.h"
#include "aiscale/parallel/tcp_socket.h"

namespace aiscale::parallel::tcp {
namespace {

constexpr uint32_t kMessageMagic = 0x61694d47;    // "aiMG": every message's header
constexpr uint32_t kHandshakeMagic = 0x6169484b;  // "aiHK": a connection's first bytes
constexpr uint32_t kVersion = 1;

// FNV-1a of the group's store prefix: a connection from another group (another job, an
// earlier attempt whose rank still runs) is refused.
uint64_t group_id_of(const std::string& prefix) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : prefix) h = (h ^ c) * 1099511628211ull;
  return h;
}

struct Handshake {
  uint32_t magic = kHandshakeMagic;
  uint32_t version = kVersion;
  uint32_t world = 0;
  uint32_t rank = 0;
  uint64_t group = 0;
};

double seconds_left(Clock::time_point deadline) {
  return std::max(0.0, std::chrono::duration<double>(deadline - Clock::now()).count());
}

}  // namespace

Mesh::Mesh(Store* store, const std::string& prefix, int rank, std::vector<int> world_ranks,
           double timeout_s, const std::string& advertise)
    : rank_(rank), world_ranks_(std::move(world_ranks)), timeout_s_(timeout_s),
      group_id_(group_id_of(prefix)), peers_(world_ranks_.size()) {
  if (rank_ < 0 || rank_ >= world())
    fail("internal: TCP mesh rank {} outside a group of {}", rank_, world());
  try {
    if (world() > 1) {
      if (!store) fail("internal: a TCP mesh of {} ranks without a store", world());
      connect_mesh(*store, prefix, advertise);
    }
  } catch (...) {
    for (Peer& p : peers_)
      if (p.fd >= 0) ::close(p.fd);
    throw;
  }
}

Mesh::~Mesh() {
  // Sends copied for the receiver (pipeline stages) still in flight are delivered, unless
  // the mesh goes away on an error path, where a peer may be gone.
  if (std::uncaught_exceptions() == 0) {
    try {
      flush();
    } catch (const std::exception&) {
    }
  }
  for (Peer& p : peers_)
    if (p.fd >= 0) {
      ::shutdown(p.fd, SHUT_WR);
      ::close(p.fd);
    }
}

std::string Mesh::name(int peer) const {
  return "rank " + std::to_string(world_ranks_[static_cast<size_t>(peer)]);
}

void Mesh::connect_mesh(Store& store, const std::string& prefix, const std::string& advertise) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeout_s_));
  int port = 0, err = 0;
  const int listener = listen_any(0, world() + 16, &port, &err);
  if (listener < 0)
    fail("{}: cannot listen for the TCP communicator's connections: {}", name(rank_),
         std::strerror(err));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{listener};
  store.set(prefix + "addr/" + std::to_string(rank_), advertise + " " + std::to_string(port));

  Handshake mine;
  mine.world = static_cast<uint32_t>(world());
  mine.rank = static_cast<uint32_t>(rank_);
  mine.group = group_id_;
  // Connect to every lower rank (its listener queues us even before it accepts) ...
  for (int j = 0; j < rank_; ++j) {
    const std::string text = store.get(prefix + "addr/" + std::to_string(j), seconds_left(deadline));
    const size_t space = text.rfind(' ');
    const std::string host = space == std::string::npos ? "" : text.substr(0, space);
    const int peer_port = space == std::string::npos ? 0 : std::atoi(text.c_str() + space + 1);
    if (host.empty() || peer_port <= 0)
      fail("{}: the address of {} in the {} is malformed ('{}'): do two jobs share one store?",
           name(rank_), name(j), store.where(), text);
    std::string why;
    const int fd = connect_until(host, peer_port, deadline, why);
    if (fd < 0)
      fail("{}: could not connect to {} at {} within {:.0f} s ({}): check that the ranks' hosts "
           "reach each other on any TCP port (firewall), and that {} resolves to {}'s host from "
           "here", name(rank_), name(j), host_port(host, peer_port), timeout_s_, why, host, name(j));
    peers_[static_cast<size_t>(j)].fd = fd;
    set_io_timeout(fd, std::max(1.0, seconds_left(deadline)));
    if (!send_all(fd, &mine, sizeof mine))
      fail("{}: {} closed the TCP connection during the set-up: it has probably ended or failed "
           "(see its log)", name(rank_), name(j));
  }
  // ... and accept every higher one.
  int missing = world() - 1 - rank_;
  while (missing > 0) {
    const double left = seconds_left(deadline);
    if (left <= 0) {
      std::string absent;
      for (int r = rank_ + 1; r < world(); ++r)
        if (peers_[static_cast<size_t>(r)].fd < 0) absent += (absent.empty() ? "" : ", ") + name(r);
      fail("{}: waited {:.0f} s for {} to connect to the TCP communicator: they have not started, "
           "failed, or cannot reach this host ({}) on port {} (raise parallel.timeout_s if ranks "
           "start that far apart)", name(rank_), timeout_s_, absent, advertise, port);
    }
    pollfd p{listener, POLLIN, 0};
    const int rc = ::poll(&p, 1, std::clamp(static_cast<int>(left * 1000), 1, 1000));
    if (rc < 0 && errno != EINTR)
      fail("{}: poll on the TCP communicator's listener failed: {}", name(rank_), std::strerror(errno));
    if (rc <= 0 || !(p.revents & POLLIN)) continue;
    const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    set_io_timeout(fd, std::max(1.0, std::min(10.0, seconds_left(deadline))));
    Handshake theirs;
    const bool ok = recv_all(fd, &theirs, sizeof theirs) && theirs.magic == kHandshakeMagic &&
                    theirs.version == kVersion && theirs.group == group_id_ &&
                    theirs.world == mine.world && static_cast<int>(theirs.rank) > rank_ &&
                    static_cast<int>(theirs.rank) < world() &&
                    peers_[theirs.rank].fd < 0;
    if (!ok) {  // not a member of this group (or a duplicate): ignore it
      ::close(fd);
      continue;
    }
    peers_[theirs.rank].fd = fd;
    --missing;
  }
  for (int r = 0; r < world(); ++r)
    if (r != rank_) {
      set_non_blocking(peers_[static_cast<size_t>(r)].fd);
      set_no_delay(peers_[static_cast<size_t>(r)].fd);
    }
}

void Mesh::check_peer(int peer, bool receive) const {
  if (peer >= 0 && peer < world() && peer != rank_) return;
  if (receive)
    fail("internal: TCP receive on {} from group rank {} of {}", name(rank_), peer, world());
  fail("internal: TCP send from {} to group rank {} of {}", name(rank_), peer, world());
}

int Mesh::new_op(bool receive, int peer, int tag, char* data, int64_t bytes) {
  check_peer(peer, receive);
  const int id = next_op_++;
  ops_.emplace(id, Op{.receive = receive, .peer = peer, .tag = tag, .data = data, .bytes = bytes});
  return id;
}

int Mesh::isend_bytes(const void* data, int64_t bytes, int peer, int tag) {
  const int id = new_op(false, peer, tag, nullptr, bytes);
  Outgoing o;
  o.data = static_cast<const char*>(data);
  o.op = id;
  queue_message(peer, tag, bytes, std::move(o));
  return id;
}

void Mesh::queue_message(int peer, int tag, int64_t bytes, Outgoing o) {
  std::memcpy(o.header, &kMessageMagic, 4);
  std::memcpy(o.header + 4, &tag, 4);
  std::memcpy(o.header + 8, &bytes, 8);
  o.bytes = bytes;
  Peer& p = peers_[static_cast<size_t>(peer)];
  p.out.push_back(std::move(o));
  if (p.out.size() == 1 && !p.closed) write_some(peer);  // small messages leave at once
}

void Mesh::send_copy(const void* data, int64_t bytes, int peer, int tag) {
  check_peer(peer, false);
  Outgoing o;
  o.copy.assign(static_cast<const char*>(data), static_cast<const char*>(data) + bytes);
  o.data = o.copy.data();
  queue_message(peer, tag, bytes, std::move(o));
}

int Mesh::irecv_bytes(void* data, int64_t bytes, int peer, int tag) {
  const int id = new_op(true, peer, tag, static_cast<char*>(data), bytes);
  Peer& p = peers_[static_cast<size_t>(peer)];
  auto& arrived = p.arrived[tag];
  if (!arrived.empty()) {  // it came before we asked
    std::vector<char> msg = std::move(arrived.front());
    arrived.pop_front();
    deliver(peer, id, msg);
  } else {
    p.posted[tag].push_back(id);
  }
  return id;
}

void Mesh::deliver(int peer, int op_id, const std::vector<char>& msg) {
  Op& op = ops_.at(op_id);
  if (static_cast<int64_t>(msg.size()) != op.bytes)
    fail_peer(peer, fmt::format("sent a message of {} bytes where {} were expected (ranks "
                                "running different models, configs or builds?)",
                                msg.size(), op.bytes));
  if (!msg.empty()) std::memcpy(op.data, msg.data(), msg.size());
  op.done = true;
}

void Mesh::wait(int id) {
  auto it = ops_.find(id);
  if (it == ops_.end()) return;  // completed and waited for already
  progress_until([&] { return it->second.done; });
  ops_.erase(it);
}

void Mesh::wait_all() {
  progress_until([&] {
    return std::all_of(ops_.begin(), ops_.end(), [](const auto& kv) { return kv.second.done; });
  });
  ops_.clear();
  next_op_ = 0;
}

void Mesh::flush() {
  progress_until([&] {
    for (const Peer& p : peers_)
      for (const Outgoing& o : p.out)
        if (o.op < 0) return false;
    return true;
  });
}

bool Mesh::peer_busy(int peer) const {
  const Peer& p = peers_[static_cast<size_t>(peer)];
  if (!p.out.empty() || p.header_got > 0 || p.in_body) return true;
  for (const auto& [tag, q] : p.posted)
    if (!q.empty()) return true;
  return false;
}

void Mesh::fail_peer(int peer, const std::string& why) const {
  fail("{} (TCP {}): {} {}", name(rank_), activity_, name(peer), why);
}

template <typename Done>
void Mesh::progress_until(Done&& done) {
  auto last_move = Clock::now();
  std::vector<pollfd> fds;
  std::vector<int> who;
  for (;;) {
    if (done()) return;
    fds.clear();
    who.clear();
    for (int r = 0; r < world(); ++r) {
      if (r == rank_) continue;
      Peer& p = peers_[static_cast<size_t>(r)];
      if (p.closed) {
        if (peer_busy(r))
          fail_peer(r, "has closed its connection: it has ended or failed (see its log)");
        continue;
      }
      fds.push_back({p.fd, static_cast<short>(POLLIN | (p.out.empty() ? 0 : POLLOUT)), 0});
      who.push_back(r);
    }
    const double idle = std::chrono::duration<double>(Clock::now() - last_move).count();
    if (idle >= timeout_s_) {
      std::string stuck;
      for (int r = 0; r < world(); ++r)
        if (r != rank_ && peer_busy(r))
          stuck += (stuck.empty() ? "" : ", ") + name(r) +
                   (peers_[static_cast<size_t>(r)].out.empty() ? " (nothing received)"
                                                              : " (not accepting data)");
      fail("{} (TCP {}): no data moved for {:.0f} s between this rank and {}: a peer has "
           "probably died or hangs (raise parallel.timeout_s if steps are that slow)",
           name(rank_), activity_, timeout_s_, stuck.empty() ? "its peers" : stuck);
    }
    const int ms = std::max(1, static_cast<int>(std::min(1.0, timeout_s_ - idle) * 1000));
    const int n = ::poll(fds.data(), fds.size(), ms);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("{}: poll on the TCP communicator's connections failed: {}", name(rank_), std::strerror(errno));
    }
    bool moved = false;
    for (size_t i = 0; i < fds.size() && n > 0; ++i) {
      if (fds[i].revents & POLLOUT) moved |= write_some(who[i]);
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) moved |= read_some(who[i]);
    }
    if (moved) last_move = Clock::now();
  }
}

bool Mesh::write_some(int peer) {
  Peer& p = peers_[static_cast<size_t>(peer)];
  bool moved = false;
  while (!p.out.empty()) {
    Outgoing& o = p.out.front();
    iovec iov[2];
    int parts = 0;
    if (o.sent < 16) iov[parts++] = {o.header + o.sent, static_cast<size_t>(16 - o.sent)};
    const int64_t body_sent = std::max<int64_t>(0, o.sent - 16);
    if (o.bytes > body_sent)
      iov[parts++] = {const_cast<char*>(o.data) + body_sent, static_cast<size_t>(o.bytes - body_sent)};
    msghdr m{};
    m.msg_iov = iov;
    m.msg_iovlen = static_cast<size_t>(parts);
    const ssize_t k = ::sendmsg(p.fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return moved;
      p.closed = true;
      fail_peer(peer, fmt::format("has closed its connection ({}): it has ended or failed (see "
                                  "its log)", std::strerror(errno)));
    }
    moved = true;
    o.sent += k;
    if (o.sent == 16 + o.bytes) {
      if (o.op >= 0) ops_.at(o.op).done = true;
      p.out.pop_front();
    }
  }
  return moved;
}

bool Mesh::read_some(int peer) {
  Peer& p = peers_[static_cast<size_t>(peer)];
  bool moved = false;
  for (;;) {
    ssize_t k;
    if (!p.in_body) {
      k = ::recv(p.fd, p.header + p.header_got, static_cast<size_t>(16 - p.header_got), MSG_DONTWAIT);
    } else {
      k = ::recv(p.fd, p.dest + p.body_got, static_cast<size_t>(p.body_bytes - p.body_got), MSG_DONTWAIT);
    }
    if (k < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return moved;
    }
    if (k <= 0) {  // closed (0) or reset
      const bool busy = peer_busy(peer);
      p.closed = true;
      if (busy)
        fail_peer(peer, k == 0 ? "has closed its connection: it has ended or failed (see its log)"
                               : fmt::format("has closed its connection ({}): it has ended or "
                                             "failed (see its log)", std::strerror(errno)));
      return moved;
    }
    moved = true;
    if (!p.in_body) {
      p.header_got += static_cast<int>(k);
      if (p.header_got == 16) header_arrived(peer);
    } else {
      p.body_got += k;
      if (p.body_got == p.body_bytes) body_arrived(peer);
    }
  }
}

void Mesh::header_arrived(int peer) {
  Peer& p = peers_[static_cast<size_t>(peer)];
  uint32_t magic = 0;
  std::memcpy(&magic, p.header, 4);
  std::memcpy(&p.tag, p.header + 4, 4);
  std::memcpy(&p.body_bytes, p.header + 8, 8);
  if (magic != kMessageMagic || p.body_bytes < 0)
    fail_peer(peer, "sent bytes that are not an aiscale message (another program on this "
                    "connection, or a different aiscale build)");
  p.in_body = true;
  p.body_got = 0;
  auto& posted = p.posted[p.tag];
  if (p.arrived[p.tag].empty() && !posted.empty()) {  // straight into the receive's buffer
    const int id = posted.front();
    posted.pop_front();
    Op& op = ops_.at(id);
    if (op.bytes != p.body_bytes)
      fail_peer(peer, fmt::format("sent a message of {} bytes where {} were expected (ranks "
                                  "running different models, configs or builds?)",
                                  p.body_bytes, op.bytes));
    p.dest = op.data;
    p.dest_op = id;
  } else {  // nobody asked yet: kept aside
    p.held.assign(static_cast<size_t>(p.body_bytes), 0);
    p.dest = p.held.data();
    p.dest_op = -1;
  }
  if (p.body_bytes == 0) body_arrived(peer);
}

void Mesh::body_arrived(int peer) {
  Peer& p = peers_[static_cast<size_t>(peer)];
  p.in_body = false;
  p.header_got = 0;
  if (p.dest_op >= 0) {
    ops_.at(p.dest_op).done = true;
    return;
  }
  auto& arrived = p.arrived[p.tag];
  arrived.push_back(std::move(p.held));
  p.held = {};
  auto& posted = p.posted[p.tag];
  while (!arrived.empty() && !posted.empty()) {
    const int id = posted.front();
    posted.pop_front();
    std::vector<char> msg = std::move(arrived.front());
    arrived.pop_front();
    deliver(peer, id, msg);
  }
}

void Mesh::close_all() {
  for (Peer& p : peers_)
    if (p.fd >= 0) {
      ::shutdown(p.fd, SHUT_RDWR);
      ::close(p.fd);
      p.fd = -1;
      p.closed = true;
    }
}

}  // namespace aiscale::parallel::tcp
