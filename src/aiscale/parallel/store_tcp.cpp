// TCP store: rank 0 serves a key-value table on a port; every rank (rank 0 too) is a
// client. Plain POSIX sockets, one thread per connection on the server (a job has at
// most a few thousand ranks, each with one connection during set-up).
//
// Wire format, both ways: a request is op (1 byte: 'S' set, 'G' get, 'A' add), key
// (u32 length + bytes), value (u32 length + bytes; add: the delta as decimal text); a
// reply is status (1 byte: 0 found/done, 1 missing) and a value (u32 length + bytes).
// Lengths are little-endian as on every host aiscale runs on.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "aiscale/core/error.h"
#include "aiscale/core/log.h"
#include "aiscale/parallel/store.h"

namespace aiscale::parallel {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kMaxField = 64u << 20;  // refuse absurd lengths (not an aiscale peer)

// Whole-buffer send/receive; false when the peer closed or the socket failed.
bool send_all(int fd, const void* data, size_t n) {
  auto* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}
bool recv_all(int fd, void* data, size_t n) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t k = ::recv(fd, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}
bool send_field(int fd, std::string_view s) {
  const uint32_t n = static_cast<uint32_t>(s.size());
  return send_all(fd, &n, 4) && send_all(fd, s.data(), s.size());
}
bool recv_field(int fd, std::string& s) {
  uint32_t n = 0;
  if (!recv_all(fd, &n, 4) || n > kMaxField) return false;
  s.resize(n);
  return recv_all(fd, s.data(), n);
}

int64_t parse_counter(const std::string& text, bool& ok) {
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  ok = !text.empty() && *end == '\0';
  return v;
}

// ---- server ----

class TcpStoreServer {
 public:
  explicit TcpStoreServer(int port) {
    listen_fd_ = ::socket(AF_INET6, SOCK_STREAM, 0);
    if (listen_fd_ >= 0) {
      int off = 0;  // dual stack: IPv4 clients too
      ::setsockopt(listen_fd_, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
    } else {
      listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
      ipv4_ = true;
    }
    if (listen_fd_ < 0) fail("TCP store: cannot create a socket: {}", std::strerror(errno));
    int on = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    int rc;
    if (ipv4_) {
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_ANY);
      a.sin_port = htons(static_cast<uint16_t>(port));
      rc = ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    } else {
      sockaddr_in6 a{};
      a.sin6_family = AF_INET6;
      a.sin6_addr = in6addr_any;
      a.sin6_port = htons(static_cast<uint16_t>(port));
      rc = ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    }
    if (rc != 0 || ::listen(listen_fd_, 1024) != 0) {
      const int err = errno;
      ::close(listen_fd_);
      fail("rank 0 cannot serve the TCP store on port {}: {}{}", port, std::strerror(err),
           err == EADDRINUSE ? ": another program (or an earlier run still ending) holds it; "
                               "choose another MASTER_PORT (or port in parallel.rendezvous)"
                             : "");
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof bound;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
    port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                              : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    accept_thread_ = std::thread([this] { accept_loop(); });
  }

  ~TcpStoreServer() {
    stopping_ = true;
    accept_thread_.join();
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (int fd : connections_) ::shutdown(fd, SHUT_RDWR);  // wakes their recv
      threads.swap(threads_);
    }
    for (auto& t : threads) t.join();
    ::close(listen_fd_);
  }

  int port() const { return port_; }

 private:
  void accept_loop() {
    while (!stopping_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) continue;
      int on = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
      std::lock_guard<std::mutex> lock(mutex_);
      connections_.push_back(fd);
      threads_.emplace_back([this, fd] { serve(fd); });
    }
  }

  void serve(int fd) {
    for (;;) {
      char op = 0;
      std::string key, value;
      if (!recv_all(fd, &op, 1) || !recv_field(fd, key) || !recv_field(fd, value)) break;
      char status = 0;
      std::string reply;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (op == 'S') {
          table_[key] = value;
        } else if (op == 'G') {
          auto it = table_.find(key);
          if (it == table_.end()) status = 1;
          else reply = it->second;
        } else if (op == 'A') {
          bool ok_delta = false, ok_old = true;
          const int64_t delta = parse_counter(value, ok_delta);
          auto it = table_.find(key);
          const int64_t old = it == table_.end() ? 0 : parse_counter(it->second, ok_old);
          if (!ok_delta || !ok_old) {
            status = 2;
            reply = it == table_.end() ? value : it->second;
          } else {
            reply = table_[key] = std::to_string(old + delta);
          }
        } else {
          break;  // not an aiscale client: drop the connection
        }
      }
      if (!send_all(fd, &status, 1) || !send_field(fd, reply)) break;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    connections_.erase(std::find(connections_.begin(), connections_.end(), fd));
    ::close(fd);
  }

  int listen_fd_ = -1;
  bool ipv4_ = false;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::mutex mutex_;  // the table, the connections and their threads
  std::map<std::string, std::string> table_;
  std::vector<int> connections_;
  std::vector<std::thread> threads_;
  std::thread accept_thread_;
};

// ---- client ----

// Connects to host:port before `deadline`, retrying while nobody listens yet; -1 on timeout
// with the last reason in `why`.
int connect_until(const std::string& host, int port, Clock::time_point deadline, std::string& why) {
  double pause = 0.01;
  for (;;) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const int gai = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
    if (gai != 0) {
      why = std::string("cannot resolve the host name: ") + ::gai_strerror(gai);
    } else {
      for (addrinfo* a = found; a; a = a->ai_next) {
        const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK, a->ai_protocol);
        if (fd < 0) continue;
        int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
        if (rc != 0 && errno == EINPROGRESS) {
          const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
          pollfd p{fd, POLLOUT, 0};
          int err = ETIMEDOUT;
          if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(left.count(), 1))) == 1) {
            socklen_t len = sizeof err;
            ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
          }
          rc = err == 0 ? 0 : -1;
          errno = err;
        }
        if (rc == 0) {
          ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
          ::freeaddrinfo(found);
          return fd;
        }
        why = std::strerror(errno);
        ::close(fd);
      }
      ::freeaddrinfo(found);
    }
    if (Clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(std::chrono::duration<double>(pause));
    pause = std::min(pause * 2, 0.5);
  }
}

class TcpStore final : public Store {
 public:
  TcpStore(std::string host, int port, bool serve, double timeout_s)
      : Store(timeout_s), host_(std::move(host)), port_(port) {
    if (serve) {
      server_ = std::make_unique<TcpStoreServer>(port);
      port_ = server_->port();
    }
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(timeout_s));
    std::string why;
    fd_ = connect_until(serve ? "localhost" : host_, port_, deadline, why);
    if (fd_ < 0)
      fail("could not reach the TCP store at {} within {:.0f} s ({}): check that rank 0 is "
           "running, that MASTER_ADDR (or the host in parallel.rendezvous) names rank 0's host "
           "as this node sees it, and that MASTER_PORT is open between the nodes (firewall)",
           address(), timeout_s, why);
    int on = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
    // Every reply is bounded like the waits: a server that stops answering fails the rank.
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(timeout_s);
    tv.tv_usec = static_cast<suseconds_t>((timeout_s - static_cast<double>(tv.tv_sec)) * 1e6);
    if (tv.tv_sec == 0 && tv.tv_usec == 0) tv.tv_usec = 1000;
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  }
  ~TcpStore() override {
    if (fd_ >= 0) ::close(fd_);
    server_.reset();
  }

  void set(const std::string& key, std::string_view value) override { request('S', key, value); }
  std::optional<std::string> try_get(const std::string& key) override {
    std::string value;
    if (request('G', key, "", &value) == 1) return std::nullopt;
    return value;
  }
  int64_t add(const std::string& key, int64_t delta) override {
    std::string value;
    if (request('A', key, std::to_string(delta), &value) == 2)
      fail("TCP store key '{}' at {} holds '{}', not a counter: one key serves either set or add",
           key, address(), value);
    bool ok = false;
    return parse_counter(value, ok);
  }
  std::string where() const override { return "TCP store " + address(); }
  int served_port() const { return server_ ? port_ : -1; }

 private:
  std::string address() const {
    const bool v6 = host_.find(':') != std::string::npos;
    return (v6 ? "[" + host_ + "]" : host_) + ":" + std::to_string(port_);
  }

  char request(char op, const std::string& key, std::string_view value, std::string* reply = nullptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    char status = 0;
    std::string data;
    errno = 0;
    if (!send_all(fd_, &op, 1) || !send_field(fd_, key) || !send_field(fd_, value) ||
        !recv_all(fd_, &status, 1) || !recv_field(fd_, data)) {
      const bool timed_out = errno == EAGAIN || errno == EWOULDBLOCK;
      fail("the TCP store at {} {} while this rank asked for key '{}': {}", address(),
           timed_out ? "did not answer within the timeout" : "closed the connection", key,
           "rank 0 (which serves it) has probably ended or hangs; see its log");
    }
    if (reply) *reply = std::move(data);
    return status;
  }

  std::string host_;
  int port_;
  std::unique_ptr<TcpStoreServer> server_;  // rank 0 only
  int fd_ = -1;
  std::mutex mutex_;  // one request at a time on the connection
};

}  // namespace

std::unique_ptr<Store> make_tcp_store(const std::string& host, int port, bool serve, double timeout_s) {
  if (port < 0 || port > 65535 || (port == 0 && !serve))
    fail("TCP store port {} is not a port to connect to: use 1..65535 (e.g. MASTER_PORT=29500)", port);
  return std::make_unique<TcpStore>(host, port, serve, timeout_s);
}

int tcp_store_port(Store& store) {
  auto* tcp = dynamic_cast<TcpStore*>(&store);
  return tcp ? tcp->served_port() : -1;
}

}  // namespace aiscale::parallel
