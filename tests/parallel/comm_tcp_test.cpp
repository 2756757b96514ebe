// The TCP communicator on ranks that are threads of this process, each with its own
// connections: every collective on odd sizes and several rank counts (the same bits on
// every rank), point-to-point both ways at once, sub-groups, and the failures: a peer that
// closed, a peer that stalls, a rank that never joins, messages of the wrong size.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "aiscale/core/error.h"
#include "aiscale/parallel/comm_tcp.h"
#include "aiscale/parallel/job_store.h"
#include "aiscale/parallel/store.h"
#include "../support/error_of.h"
#include "../support/run_support.h"
#include "in_process_ranks.h"

using namespace aiscale;
using namespace aiscale::parallel;
using aiscale::testsupport::error_of;
using aiscale::testsupport::run_ranks;
namespace fs = std::filesystem;

namespace {

using Body = std::function<void(Communicator&, int rank)>;

// `world` ranks on threads, meeting through one TCP store; returns each rank's error ("" if
// none). A rank's body may throw: its communicator is then destroyed, as a failing rank's.
std::vector<std::string> tcp_ranks(int world, const Body& body, TcpOptions o = {},
                                   const std::vector<int>& absent = {}) {
  auto server = make_tcp_store("127.0.0.1", 0, /*serve=*/true, 20);
  const int port = tcp_store_port(*server);
  std::vector<std::string> errors(static_cast<size_t>(world));
  run_ranks(world, [&](int r) {
    if (std::find(absent.begin(), absent.end(), r) != absent.end()) return;
    errors[static_cast<size_t>(r)] = error_of([&] {
      std::shared_ptr<Store> store = make_tcp_store("127.0.0.1", port, false, 20);
      auto comm = make_tcp_communicator(store, "test/", r, world, o);
      ASSERT_EQ(comm->rank(), r);
      ASSERT_EQ(comm->world(), world);
      ASSERT_EQ(comm->backend(), "tcp");
      body(*comm, r);
    });
  });
  return errors;
}

void expect_no_errors(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// Rank r's value i: small integers, so that any order of addition gives the exact sum.
float exact_value(int64_t i, int r) { return static_cast<float>((i * 7 + r * 3) % 23) - 11.0f; }

// Collects each rank's result to compare them bit for bit.
struct Results {
  std::mutex m;
  std::vector<std::vector<float>> of_rank;
  explicit Results(int world) : of_rank(static_cast<size_t>(world)) {}
  void put(int r, const std::vector<float>& v) {
    std::lock_guard<std::mutex> lock(m);
    of_rank[static_cast<size_t>(r)] = v;
  }
  void expect_alike() {
    for (size_t r = 1; r < of_rank.size(); ++r) {
      ASSERT_EQ(of_rank[r].size(), of_rank[0].size());
      EXPECT_EQ(std::memcmp(of_rank[r].data(), of_rank[0].data(), of_rank[0].size() * 4), 0)
          << "rank " << r << " differs from rank 0";
    }
  }
};

}  // namespace

// Small (every rank sums in rank order) and large (ring) float buffers, odd sizes, on 2 to
// 5 ranks: exact integer sums, and random values summed to the same bits on every rank.
TEST(TcpCommunicator, AllreduceSumsAlikeOnEveryRank) {
  for (int world : {2, 3, 5}) {
    const std::vector<int64_t> sizes = {0, 1, 7, 1001, 300007};  // the last takes the ring
    Results random(world);
    expect_no_errors(tcp_ranks(world, [&](Communicator& c, int r) {
      for (int64_t n : sizes) {
        std::vector<float> v(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = exact_value(i, r);
        c.allreduce_sum(v.data(), n);
        for (int64_t i = 0; i < n; ++i) {
          float want = 0;
          for (int q = 0; q < world; ++q) want += exact_value(i, q);
          ASSERT_EQ(v[static_cast<size_t>(i)], want) << "n " << n << " i " << i << " world " << world;
        }
      }
      std::mt19937 gen(static_cast<unsigned>(r + 1));
      std::uniform_real_distribution<float> u(-1, 1);
      std::vector<float> v(300007);
      for (float& x : v) x = u(gen);
      const std::vector<float> mine = v;
      c.allreduce_sum(v.data(), static_cast<int64_t>(v.size()));
      random.put(r, v);
      // Against double-precision sums of every rank's values.
      std::vector<double> want(mine.begin(), mine.end());
      for (int q = 0; q < world; ++q) {
        if (q == r) continue;
        std::mt19937 g(static_cast<unsigned>(q + 1));
        for (double& w : want) w += u(g);
      }
      for (size_t i = 0; i < v.size(); i += 997) ASSERT_NEAR(v[i], want[i], 1e-5) << i;
    }));
    random.expect_alike();
  }
}

TEST(TcpCommunicator, DoubleSumsSmallAndLarge) {
  expect_no_errors(tcp_ranks(3, [&](Communicator& c, int r) {
    for (int64_t n : {int64_t{1}, int64_t{5}, int64_t{200003}}) {  // the last is scattered
      std::vector<double> v(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = 0.25 * static_cast<double>(i + r);
      c.allreduce_sum(v.data(), n);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(v[static_cast<size_t>(i)], 0.25 * static_cast<double>(3 * i + 3)) << i;
    }
  }));
}

TEST(TcpCommunicator, BroadcastFromEveryRoot) {
  for (int world : {2, 3, 6}) {
    expect_no_errors(tcp_ranks(world, [&](Communicator& c, int r) {
      for (int root = 0; root < world; ++root)
        for (int64_t n : {int64_t{1}, int64_t{13}, int64_t{1} << 20}) {
          std::vector<float> v(static_cast<size_t>(n), static_cast<float>(r == root ? -1 : r));
          if (r == root)
            for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i % 1000 + root);
          c.broadcast(v.data(), n, root);
          for (int64_t i = 0; i < n; ++i)
            ASSERT_EQ(v[static_cast<size_t>(i)], static_cast<float>(i % 1000 + root)) << root << " " << i;
        }
      char text[11] = {};
      if (r == world - 1) std::memcpy(text, "from last!", 10);
      c.broadcast_bytes(text, sizeof text, world - 1);
      EXPECT_STREQ(text, "from last!");
      c.barrier();
    }));
  }
}

TEST(TcpCommunicator, AllgatherAndReduceScatterOddCounts) {
  const int world = 3;
  expect_no_errors(tcp_ranks(world, [&](Communicator& c, int r) {
    for (int64_t count : {int64_t{1}, int64_t{7}, int64_t{100003}}) {
      std::vector<float> in(static_cast<size_t>(count)), out(static_cast<size_t>(count * world));
      for (int64_t i = 0; i < count; ++i) in[static_cast<size_t>(i)] = static_cast<float>(r * 1000 + i % 500);
      c.allgather(in.data(), out.data(), count);
      for (int q = 0; q < world; ++q)
        for (int64_t i = 0; i < count; ++i)
          ASSERT_EQ(out[static_cast<size_t>(q * count + i)], static_cast<float>(q * 1000 + i % 500));
      std::vector<float> all(static_cast<size_t>(count * world)), part(static_cast<size_t>(count));
      for (int64_t i = 0; i < count * world; ++i) all[static_cast<size_t>(i)] = exact_value(i, r);
      c.reduce_scatter_sum(all.data(), part.data(), count);
      for (int64_t i = 0; i < count; ++i) {
        float want = 0;
        for (int q = 0; q < world; ++q) want += exact_value(r * count + i, q);
        ASSERT_EQ(part[static_cast<size_t>(i)], want);
      }
    }
  }));
}

// Two stages sending each other 16 MiB at once (more than the sockets hold) do not wait
// for each other; messages between two ranks arrive in order.
TEST(TcpCommunicator, SendAndReceiveBothWaysAtOnce) {
  expect_no_errors(tcp_ranks(2, [&](Communicator& c, int r) {
    const int peer = 1 - r;
    const int64_t n = int64_t{4} << 20;
    std::vector<float> out(static_cast<size_t>(n)), in(static_cast<size_t>(n));
    for (int k = 0; k < 3; ++k) {
      std::fill(out.begin(), out.end(), static_cast<float>(r * 10 + k));
      c.send(out.data(), n, peer);
      std::fill(out.begin(), out.end(), -1.0f);  // the send holds its own copy
    }
    for (int k = 0; k < 3; ++k) {
      c.recv(in.data(), n, peer);
      ASSERT_EQ(in.front(), static_cast<float>(peer * 10 + k));
      ASSERT_EQ(in.back(), static_cast<float>(peer * 10 + k));
    }
    c.wait();
    // A message sent before a collective does not mix with the collective's.
    float one = static_cast<float>(r + 5);
    c.send(&one, 1, peer);
    double d = 1;
    c.allreduce_sum(&d, 1);
    EXPECT_EQ(d, 2.0);
    float got = 0;
    c.recv(&got, 1, peer);
    EXPECT_EQ(got, static_cast<float>(peer + 5));
  }));
}

// Groups by colour, ranked by key (ties by rank), a rank in none, a split of a split, and
// collectives inside each group.
TEST(TcpCommunicator, SplitIntoGroups) {
  const int world = 5;
  expect_no_errors(tcp_ranks(world, [&](Communicator& c, int r) {
    // Ranks 0, 2, 4 (keys reversed) and 1, 3.
    auto g = c.split(r % 2, -r);
    ASSERT_TRUE(g);
    const int size = r % 2 == 0 ? 3 : 2;
    ASSERT_EQ(g->world(), size);
    EXPECT_EQ(g->rank(), r % 2 == 0 ? (4 - r) / 2 : (3 - r) / 2);
    EXPECT_EQ(g->backend(), "tcp");
    float v = static_cast<float>(r);
    g->allreduce_sum(&v, 1);
    EXPECT_EQ(v, r % 2 == 0 ? 6.0f : 4.0f);
    // Rank 4 joins no group; the others form one, split again into halves.
    auto h = c.split(r == 4 ? Communicator::kNoGroup : 7, 0);
    if (r == 4) {
      EXPECT_EQ(h, nullptr);
      return;
    }
    ASSERT_TRUE(h);
    ASSERT_EQ(h->world(), 4);
    auto q = h->split(h->rank() / 2, h->rank());
    ASSERT_EQ(q->world(), 2);
    double d = r;
    q->allreduce_sum(&d, 1);
    EXPECT_EQ(d, r < 2 ? 1.0 : 5.0);
    std::vector<float> all(2);
    const float mine = static_cast<float>(r);
    q->allgather(&mine, all.data(), 1);
    EXPECT_EQ(all[0], r < 2 ? 0.0f : 2.0f);
    EXPECT_EQ(all[1], r < 2 ? 1.0f : 3.0f);
    q->barrier();
  }));
}

// parallel.allreduce = ring and hierarchical (2 simulated nodes of 2) run over TCP too.
TEST(TcpCommunicator, RingAndHierarchicalAlgorithms) {
  for (auto algorithm : {algorithms::AllreduceAlgorithm::ring, algorithms::AllreduceAlgorithm::hierarchical}) {
    TcpOptions o;
    o.setting.algorithm = algorithm;
    o.setting.ranks_per_node = 2;
    o.setting.chunk_floats = 1000;
    expect_no_errors(tcp_ranks(4, [&](Communicator& c, int r) {
      for (int64_t n : {int64_t{3}, int64_t{12345}}) {
        std::vector<float> v(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = exact_value(i, r);
        c.allreduce_sum(v.data(), n);
        for (int64_t i = 0; i < n; ++i) {
          float want = 0;
          for (int q = 0; q < 4; ++q) want += exact_value(i, q);
          ASSERT_EQ(v[static_cast<size_t>(i)], want);
        }
      }
      auto g = c.split(r / 2, r);  // a group keeps its ranks' nodes
      float one = 1;
      g->allreduce_sum(&one, 1);
      EXPECT_EQ(one, 2.0f);
    }, o));
  }
}

// A peer that ends (its process died: its connections close) is named by the ranks that
// wait for it, at once rather than after the timeout.
TEST(TcpCommunicator, ClosedPeerIsNamed) {
  TcpOptions o;
  o.timeout_s = 20;
  const auto start = std::chrono::steady_clock::now();
  auto errors = tcp_ranks(3, [&](Communicator& c, int r) {
    if (r == 2) return;  // leaves: its communicator is destroyed
    std::vector<float> v(1000, 1.0f);
    for (int k = 0; k < 3; ++k) c.allreduce_sum(v.data(), 1000);
  }, o);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Rank 2's absence is found first by rank 0 or rank 1 (or both); one that fails first
  // closes its connections too, so the other may find that instead.
  for (int r : {0, 1}) {
    EXPECT_NE(errors[static_cast<size_t>(r)].find("(TCP all-reduce): rank "), std::string::npos)
        << errors[static_cast<size_t>(r)];
    EXPECT_NE(errors[static_cast<size_t>(r)].find("has closed its connection"), std::string::npos)
        << errors[static_cast<size_t>(r)];
  }
  EXPECT_TRUE(errors[0].find("rank 2 has closed") != std::string::npos ||
              errors[1].find("rank 2 has closed") != std::string::npos) << errors[0] << "\n" << errors[1];
  EXPECT_EQ(errors[2], "");
  EXPECT_LT(seconds, 10.0);
}

// A peer that stalls without dying fails the rank waiting for it within the timeout,
// naming it.
TEST(TcpCommunicator, StalledPeerIsNamedWithinTheTimeout) {
  TcpOptions o;
  o.timeout_s = 1;
  double waited = 0;
  auto errors = tcp_ranks(2, [&](Communicator& c, int r) {
    if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(4000));
    const auto start = std::chrono::steady_clock::now();
    try {
      c.barrier();
    } catch (const Error&) {
      if (r == 0) waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      throw;
    }
    // Rank 1's barrier took rank 0's signal, sent before rank 0 gave up; the next collective
    // finds rank 0 gone.
    double d = 1;
    c.allreduce_sum(&d, 1);
  }, o);
  EXPECT_NE(errors[0].find("rank 0 (TCP barrier): no data moved for 1 s between this rank and rank 1"),
            std::string::npos) << errors[0];
  EXPECT_GE(waited, 0.9);
  EXPECT_LT(waited, 3.0);
  // By the time rank 1 comes, rank 0 has gone.
  EXPECT_NE(errors[1].find("rank 0 has closed its connection"), std::string::npos) << errors[1];
}

// A rank that never starts: the others stop after the timeout, naming it.
TEST(TcpCommunicator, AbsentRankIsNamedAtSetUp) {
  TcpOptions o;
  o.timeout_s = 1;
  auto errors = tcp_ranks(3, [](Communicator&, int) {}, o, /*absent=*/{2});
  for (int r : {0, 1})
    EXPECT_NE(errors[static_cast<size_t>(r)].find("for rank 2 to connect to the TCP communicator"),
              std::string::npos) << errors[static_cast<size_t>(r)];
}

// Ranks that disagree on a buffer's size (other models) are told so, naming the peer.
TEST(TcpCommunicator, MessageOfTheWrongSizeIsNamed) {
  auto errors = tcp_ranks(2, [](Communicator& c, int r) {
    std::vector<float> v(r == 0 ? 10 : 12, 1.0f);
    c.allreduce_sum(v.data(), static_cast<int64_t>(v.size()));
  });
  // Whichever rank reads the other's message first says so (the other then finds it gone).
  const bool zero_saw = errors[0].find("rank 1 sent a message of 48 bytes where 40 were expected") !=
                        std::string::npos;
  const bool one_saw = errors[1].find("rank 0 sent a message of 40 bytes where 48 were expected") !=
                       std::string::npos;
  EXPECT_TRUE(zero_saw || one_saw) << errors[0] << "\n" << errors[1];
  EXPECT_NE(errors[0], "");
  EXPECT_NE(errors[1], "");
}

// parallel.rendezvous = "file:...": rank 0 serves the store on a free port and writes its
// address to the file; the others read it, and rank 0 removes the file once all joined.
TEST(TcpCommunicator, MeetThroughARendezvousFile) {
  const auto dir = testsupport::temp_dir("tcp-file-rendezvous");
  const Rendezvous rv = parse_rendezvous("file:" + (dir / "rdv").string());
  const int world = 3;
  std::vector<std::string> errors(world);
  run_ranks(world, [&](int r) {
    errors[static_cast<size_t>(r)] = error_of([&] {
      LaunchEnv env;
      env.source = "slurm";
      env.rank = r;
      env.world = world;
      JobStore js = open_job_store(rv, env, 20);
      TcpOptions o;
      o.advertise = js.advertise;
      auto comm = make_tcp_communicator(js.store, js.prefix + "tcp/", r, world, o);
      if (!js.rendezvous_file.empty()) fs::remove(js.rendezvous_file);
      double v = r + 1;
      comm->allreduce_sum(&v, 1);
      EXPECT_EQ(v, 6.0);
    });
  });
  expect_no_errors(errors);
  EXPECT_FALSE(fs::exists(dir / "rdv"));
  // Without a rendezvous, srun's ranks have no way to meet: the message says what to set.
  LaunchEnv env;
  env.source = "slurm";
  env.rank = 1;
  env.world = 2;
  const std::string e = error_of([&] { open_job_store(parse_rendezvous("auto"), env, 1); });
  EXPECT_NE(e.find("by srun as rank 1 of 2"), std::string::npos) << e;
  EXPECT_NE(e.find("parallel.rendezvous = \"file:/shared/path\""), std::string::npos) << e;
  // Under mpirun "tcp" needs a rendezvous too (or MPI).
  env.source = "openmpi";
  const std::string m = error_of([&] { open_job_store(parse_rendezvous("auto"), env, 1); });
  EXPECT_NE(m.find("started by an MPI launcher (openmpi)"), std::string::npos) << m;
  EXPECT_NE(m.find("parallel.communicator = \"mpi\""), std::string::npos) << m;
  fs::remove_all(dir);
}
