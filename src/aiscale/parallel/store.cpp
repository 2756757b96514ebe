// The waiting side of every Store (polling with back-off against a deadline) and the
// store carried by an existing communicator.
#include "aiscale/parallel/store.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "aiscale/core/error.h"
#include "aiscale/parallel/comm.h"

namespace aiscale::parallel {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Polls `ready` from 1 ms up to 100 ms between tries until it is true or timeout_s passed;
// returns whether it became true.
template <typename Ready>
bool poll_until(Ready&& ready, double timeout_s) {
  const auto start = Clock::now();
  double pause = 0.001;
  for (;;) {
    if (ready()) return true;
    const double waited = seconds_since(start);
    if (waited >= timeout_s) return false;
    std::this_thread::sleep_for(std::chrono::duration<double>(std::min(pause, timeout_s - waited)));
    pause = std::min(pause * 2, 0.1);
  }
}

[[noreturn]] void timed_out(const Store& store, const std::string& what, double timeout_s) {
  fail("waited {:.1f} s for {} in the {}: the rank that sets it has not started, has failed, "
       "or was given another rendezvous; check that every rank was started with the same "
       "rendezvous settings (raise parallel.timeout_s if ranks start that far apart)",
       timeout_s, what, store.where());
}

}  // namespace

std::string Store::get(const std::string& key, double timeout_s) {
  std::optional<std::string> value;
  if (!poll_until([&] { return (value = try_get(key)).has_value(); }, timeout_s))
    timed_out(*this, "key '" + key + "'", timeout_s);
  return *value;
}

bool Store::check(const std::vector<std::string>& keys) {
  return std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return try_get(k).has_value(); });
}

void Store::wait(const std::vector<std::string>& keys, double timeout_s) {
  const auto start = Clock::now();
  for (const auto& key : keys) {
    const double left = std::max(0.0, timeout_s - seconds_since(start));
    if (!poll_until([&] { return try_get(key).has_value(); }, left))
      timed_out(*this, "key '" + key + "'", timeout_s);
  }
}

void Store::barrier(const std::string& key, int count) {
  add(key, 1);
  int64_t arrived = 0;
  auto all_here = [&] {
    auto v = try_get(key);
    arrived = v ? std::stoll(*v) : 0;
    return arrived >= count;
  };
  if (!poll_until(all_here, timeout_s_))
    timed_out(*this, fmt::format("all {} participants of barrier '{}' ({} arrived)", count, key, arrived),
              timeout_s_);
}

std::unique_ptr<Store> make_store_over(Communicator& comm, double timeout_s) {
  // Rank 0's address as "host port", padded to a fixed size for broadcast_bytes.
  char address[256] = {};
  std::unique_ptr<Store> store;
  if (comm.rank() == 0) {
    store = make_tcp_store("127.0.0.1", 0, /*serve=*/true, timeout_s);
    char host[200] = {};
    if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "localhost");
    std::snprintf(address, sizeof address, "%s %d", host, tcp_store_port(*store));
  }
  comm.broadcast_bytes(address, sizeof address, 0);
  if (comm.rank() != 0) {
    char host[256] = {};
    int port = 0;
    if (std::sscanf(address, "%255s %d", host, &port) != 2)
      fail("the store address broadcast by rank 0 is malformed ('{}')", address);
    store = make_tcp_store(host, port, /*serve=*/false, timeout_s);
  }
  return store;
}

}  // namespace aiscale::parallel
