// Rendezvous store: a small key-value table that every rank of a job can reach before any
// communicator exists. Ranks publish what the others need to connect (an NCCL unique id,
// a server address) and wait for it; the same code serves mpirun, Slurm, torchrun-style
// launchers and Kubernetes, whichever store the job can reach:
//   file: one file per key in a folder every node shares (NFS, Lustre, GPFS);
//   TCP:  a server on rank 0 (MASTER_ADDR:MASTER_PORT), a client on every rank;
//   MPI:  a TCP store whose address travels over an existing communicator (MPI ranks
//         that need a store for a later, non-MPI transport).
// Every wait is bounded by the store's timeout and fails with a message naming the store,
// the key and the likely fix, so a rank never waits for a peer that will never come.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace aiscale::parallel {

class Communicator;

class Store {
 public:
  explicit Store(double timeout_s) : timeout_s_(timeout_s) {}
  virtual ~Store() = default;
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Sets (or replaces) key's value.
  virtual void set(const std::string& key, std::string_view value) = 0;
  // Key's value now, or nullopt when nobody has set it yet.
  virtual std::optional<std::string> try_get(const std::string& key) = 0;
  // Adds delta to the integer held by key (missing: 0) atomically across ranks; returns
  // the new value. A key used with add holds its value as decimal text.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // What a message says of this store: "file store /shared/rdv", "TCP store node01:29500".
  virtual std::string where() const = 0;

  // Key's value, waiting for it up to timeout_s() (or the given timeout); throws Error
  // naming the key and the store after that.
  std::string get(const std::string& key) { return get(key, timeout_s_); }
  std::string get(const std::string& key, double timeout_s);
  // Waits until every key is set.
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout_s_); }
  void wait(const std::vector<std::string>& keys, double timeout_s);
  // Whether every key is set now.
  bool check(const std::vector<std::string>& keys);
  // Every one of `count` participants calls this once with the same key: returns when
  // all have (add, then wait for the total).
  void barrier(const std::string& key, int count);

  double timeout_s() const { return timeout_s_; }
  void set_timeout(double timeout_s) { timeout_s_ = timeout_s; }

 private:
  double timeout_s_;
};

// A view of `base` whose keys all start with `prefix` (e.g. "nccl/tensor/"), so that
// independent users of one store never meet. `base` must outlive it.
class PrefixStore final : public Store {
 public:
  PrefixStore(Store& base, std::string prefix)
      : Store(base.timeout_s()), base_(base), prefix_(std::move(prefix)) {}
  void set(const std::string& key, std::string_view value) override { base_.set(prefix_ + key, value); }
  std::optional<std::string> try_get(const std::string& key) override { return base_.try_get(prefix_ + key); }
  int64_t add(const std::string& key, int64_t delta) override { return base_.add(prefix_ + key, delta); }
  std::string where() const override { return base_.where() + " (keys " + prefix_ + "*)"; }

 private:
  Store& base_;
  std::string prefix_;
};

// File store in `folder`, which must exist on a filesystem every rank shares (a waiting
// rank polls until it appears). Keys may hold any characters: a key's file name escapes
// all but [A-Za-z0-9._-]. store_file.cpp.
std::unique_ptr<Store> make_file_store(const std::string& folder, double timeout_s);

// TCP store at host:port. The rank with `serve` = true starts the server (listening on
// every interface at `port`; 0 picks a free port, see tcp_store_port) and is a client of
// it like every other rank. A client retries the connection until timeout_s (rank 0 may
// start later). `port_origin` says, for the error of a port that is taken, where the port
// comes from and how to choose another ("MASTER_PORT=29500: choose another ..."); "" names
// MASTER_PORT and parallel.rendezvous. store_tcp.cpp.
std::unique_ptr<Store> make_tcp_store(const std::string& host, int port, bool serve,
                                      double timeout_s, const std::string& port_origin = "");
// The port a TCP store's server listens on (useful after asking for port 0); -1 when
// `store` is not a TCP store that serves.
int tcp_store_port(Store& store);

// Collective over `comm`'s ranks: rank 0 serves a TCP store on a free port and the
// address (this host's name and the port) reaches the others by broadcast_bytes. For
// ranks that already share a communicator (MPI) and need a store for something else.
std::unique_ptr<Store> make_store_over(Communicator& comm, double timeout_s);

}  // namespace aiscale::parallel
