// TCP store: rank 0 serves a key-value table on a port; every rank (rank 0 too) is a
// client. Plain POSIX sockets, one thread per connection on the server (a job has at
// most a few thousand ranks, each with one connection during set-up).
//
// Wire format, both ways: a request is op (1 byte: 'S' set, 'G' get, 'A' add), key
// (u32 length + bytes), value (u32 length + bytes; add: the delta as decimal text); a
// reply is status (1 byte: 0 found/done, 1 missing) and a value (u32 length + bytes).
// Lengths are little-endian as on every host aiscale runs on.
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
#include "aiscale/parallel/tcp_socket.h"

namespace aiscale::parallel {
namespace {

using tcp::Clock;
using tcp::connect_until;
using tcp::host_port;
using tcp::listen_any;
using tcp::recv_all;
using tcp::send_all;
using tcp::set_io_timeout;
using tcp::set_no_delay;
constexpr uint32_t kMaxField = 64u << 20;  // refuse absurd lengths (not an aiscale peer)

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
  TcpStoreServer(int port, const std::string& port_origin) {
    int err = 0;
    listen_fd_ = listen_any(port, 1024, &port_, &err);
    if (listen_fd_ < 0) {
      const std::string origin = port_origin.empty()
                                     ? "choose another MASTER_PORT (or port in parallel.rendezvous)"
                                     : "the port is " + port_origin;
      fail("rank 0 cannot serve the TCP store on port {}: {}{}", port, std::strerror(err),
           err == EADDRINUSE ? ": another program (or an earlier run still ending) holds it; " + origin
                             : std::string());
    }
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
      set_no_delay(fd);
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
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::mutex mutex_;  // the table, the connections and their threads
  std::map<std::string, std::string> table_;
  std::vector<int> connections_;
  std::vector<std::thread> threads_;
  std::thread accept_thread_;
};

// ---- client ----

class TcpStore final : public Store {
 public:
  TcpStore(std::string host, int port, bool serve, double timeout_s, const std::string& port_origin)
      : Store(timeout_s), host_(std::move(host)), port_(port) {
    if (serve) {
      server_ = std::make_unique<TcpStoreServer>(port, port_origin);
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
    set_no_delay(fd_);
    // Every reply is bounded like the waits: a server that stops answering fails the rank.
    set_io_timeout(fd_, timeout_s);
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
  std::string address() const { return host_port(host_, port_); }

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

std::unique_ptr<Store> make_tcp_store(const std::string& host, int port, bool serve, double timeout_s,
                                      const std::string& port_origin) {
  if (port < 0 || port > 65535 || (port == 0 && !serve))
    fail("TCP store port {} is not a port to connect to: use 1..65535 (e.g. MASTER_PORT=29500)", port);
  return std::make_unique<TcpStore>(host, port, serve, timeout_s, port_origin);
}

int tcp_store_port(Store& store) {
  auto* tcp = dynamic_cast<TcpStore*>(&store);
  return tcp ? tcp->served_port() : -1;
}

}  // namespace aiscale::parallel
