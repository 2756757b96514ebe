// Rendezvous stores: file and TCP, with several threads and processes on one machine.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "aiscale/parallel/rendezvous.h"
#include "aiscale/parallel/store.h"
#include "../support/error_of.h"
#include "../support/run_support.h"

using namespace aiscale::parallel;
using aiscale::testsupport::error_of;
using aiscale::testsupport::temp_dir;
namespace fs = std::filesystem;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// `ranks` threads, each with its own store from `make(rank)`: every rank sets its key,
// counts itself in, waits for the others' keys and checks them.
template <typename Make>
void exchange_between_threads(int ranks, Make&& make) {
  std::vector<std::thread> threads;
  std::atomic<int> good{0};
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      auto store = make(r);
      store->set("rank/" + std::to_string(r), std::string("value of ") + std::to_string(r));
      store->add("joined", 1);
      store->barrier("barrier", ranks);
      int ok = 0;
      for (int p = 0; p < ranks; ++p)
        ok += store->get("rank/" + std::to_string(p)) == "value of " + std::to_string(p);
      ok += store->get("joined") == std::to_string(ranks);
      if (ok == ranks + 1) ++good;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(good.load(), ranks);
}

}  // namespace

TEST(FileStore, ThreadsExchangeValuesAndCount) {
  const auto dir = temp_dir("store-file").string();
  exchange_between_threads(6, [&](int) { return make_file_store(dir, 10); });
  auto store = make_file_store(dir, 10);
  EXPECT_EQ(store->add("joined", 10), 16);
  EXPECT_TRUE(store->check({"rank/0", "rank/5"}));
  EXPECT_FALSE(store->check({"rank/6"}));
  // A key's file never leaves the folder, whatever the key holds.
  store->set("../escape/\x01key", "x");
  EXPECT_EQ(store->get("../escape/\x01key"), "x");
  EXPECT_FALSE(fs::exists(fs::path(dir).parent_path() / "escape"));
}

TEST(FileStore, TimeoutNamesTheKeyAndTheStore) {
  const auto dir = temp_dir("store-file-timeout").string();
  auto store = make_file_store(dir, 0.2);
  const auto start = std::chrono::steady_clock::now();
  std::string e = error_of([&] { store->get("never"); });
  EXPECT_GE(seconds_since(start), 0.2);
  EXPECT_LT(seconds_since(start), 3.0);
  EXPECT_NE(e.find("key 'never' in the file store " + dir), std::string::npos) << e;
  EXPECT_NE(e.find("same rendezvous"), std::string::npos) << e;
  e = error_of([&] { store->barrier("b", 2); });
  EXPECT_NE(e.find("all 2 participants of barrier 'b' (1 arrived)"), std::string::npos) << e;
  e = error_of([&] { make_file_store(dir + "/missing", 1)->set("k", "v"); });
  EXPECT_NE(e.find("does not exist"), std::string::npos) << e;
  store->set("text", "hello");
  e = error_of([&] { store->add("text", 1); });
  EXPECT_NE(e.find("not a counter"), std::string::npos) << e;
}

TEST(FileStore, ProcessesCountWithoutLosingAnAdd) {
  const auto dir = temp_dir("store-file-fork").string();
  constexpr int kProcs = 4, kAdds = 8;
  std::vector<pid_t> children;
  for (int p = 0; p < kProcs; ++p) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      int rc = 0;
      try {
        auto store = make_file_store(dir, 10);
        for (int i = 0; i < kAdds; ++i) store->add("count", 1);
      } catch (...) {
        rc = 1;
      }
      ::_exit(rc);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  EXPECT_EQ(make_file_store(dir, 1)->get("count"), std::to_string(kProcs * kAdds));
}

TEST(PrefixStore, KeysOfDifferentPrefixesNeverMeet) {
  const auto dir = temp_dir("store-prefix").string();
  auto base = make_file_store(dir, 1);
  PrefixStore a(*base, "tensor/"), b(*base, "pipeline/");
  a.set("id", "A");
  b.set("id", "B");
  EXPECT_EQ(a.get("id"), "A");
  EXPECT_EQ(b.get("id"), "B");
  EXPECT_EQ(base->get("tensor/id"), "A");
  EXPECT_NE(a.where().find("keys tensor/*"), std::string::npos);
}

TEST(TcpStore, ThreadsExchangeValuesThroughRankZerosServer) {
  auto server = make_tcp_store("127.0.0.1", 0, /*serve=*/true, 10);
  const int port = tcp_store_port(*server);
  ASSERT_GT(port, 0);
  EXPECT_EQ(server->where(), "TCP store 127.0.0.1:" + std::to_string(port));
  exchange_between_threads(8, [&](int) { return make_tcp_store("localhost", port, false, 10); });
  EXPECT_EQ(server->add("joined", -8), 0);
  // Binary values go through unchanged.
  std::string blob;
  for (int i = 0; i < 256; ++i) blob += static_cast<char>(i);
  server->set("blob", blob);
  EXPECT_EQ(make_tcp_store("127.0.0.1", port, false, 5)->get("blob"), blob);
}

TEST(TcpStore, ClientWaitsForAServerThatStartsLater) {
  // Find a free port, release it, and start the server on it after the client.
  int port = 0;
  {
    auto probe = make_tcp_store("127.0.0.1", 0, true, 5);
    port = tcp_store_port(*probe);
  }
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    auto server = make_tcp_store("127.0.0.1", port, true, 10);
    server->set("id", "from rank 0");
    server->barrier("done", 2);
  });
  auto client = make_tcp_store("127.0.0.1", port, false, 10);
  EXPECT_EQ(client->get("id"), "from rank 0");
  client->barrier("done", 2);
  late.join();
}

TEST(TcpStore, NoServerNamesTheAddressAndTheFix) {
  int port = 0;
  {
    auto probe = make_tcp_store("127.0.0.1", 0, true, 5);
    port = tcp_store_port(*probe);
  }
  const auto start = std::chrono::steady_clock::now();
  std::string e = error_of([&] { make_tcp_store("127.0.0.1", port, false, 0.3); });
  EXPECT_GE(seconds_since(start), 0.3);
  EXPECT_LT(seconds_since(start), 5.0);
  EXPECT_NE(e.find("could not reach the TCP store at 127.0.0.1:" + std::to_string(port)), std::string::npos) << e;
  EXPECT_NE(e.find("MASTER_ADDR"), std::string::npos) << e;
  e = error_of([&] { make_tcp_store("no-such-host.invalid", 29500, false, 0.2); });
  EXPECT_NE(e.find("no-such-host.invalid:29500"), std::string::npos) << e;
  EXPECT_NE(e.find("resolve"), std::string::npos) << e;
  e = error_of([&] { make_tcp_store("127.0.0.1", 0, false, 1); });
  EXPECT_NE(e.find("port 0"), std::string::npos) << e;
}

TEST(TcpStore, ADeadServerFailsTheClientPromptly) {
  auto server = make_tcp_store("127.0.0.1", 0, true, 10);
  const int port = tcp_store_port(*server);
  auto client = make_tcp_store("127.0.0.1", port, false, 30);
  client->set("k", "v");
  server.reset();  // rank 0 ends
  const auto start = std::chrono::steady_clock::now();
  std::string e = error_of([&] { client->get("k2"); });
  EXPECT_LT(seconds_since(start), 5.0);
  EXPECT_NE(e.find("TCP store at 127.0.0.1:" + std::to_string(port)), std::string::npos) << e;
  EXPECT_NE(e.find("closed the connection"), std::string::npos) << e;
  EXPECT_NE(e.find("rank 0"), std::string::npos) << e;
}

TEST(TcpStore, PortInUseNamesThePortAndTheFix) {
  auto first = make_tcp_store("127.0.0.1", 0, true, 5);
  const int port = tcp_store_port(*first);
  std::string e = error_of([&] { make_tcp_store("127.0.0.1", port, true, 1); });
  EXPECT_NE(e.find("port " + std::to_string(port)), std::string::npos) << e;
  EXPECT_NE(e.find("choose another MASTER_PORT"), std::string::npos) << e;
}

TEST(TcpStore, ForkedRanksMeetAndCount) {
  auto server = make_tcp_store("127.0.0.1", 0, true, 10);
  const int port = tcp_store_port(*server);
  constexpr int kRanks = 3;
  std::vector<pid_t> children;
  for (int r = 1; r <= kRanks; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      int rc = 1;
      try {
        auto store = make_tcp_store("127.0.0.1", port, false, 10);
        store->set("hello/" + std::to_string(r), "hi");
        store->add("count", r);
        rc = store->get("go") == "yes" ? 0 : 2;
      } catch (...) {
      }
      ::_exit(rc);
    }
    children.push_back(pid);
  }
  server->wait({"hello/1", "hello/2", "hello/3"});
  server->set("go", "yes");
  for (pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  EXPECT_EQ(server->get("count"), "6");
}

// The NCCL id exchange of a torchrun-style launch: rank 0 publishes, the others wait.
TEST(TcpStore, CarriesTheRendezvousBlob) {
  auto server = make_tcp_store("127.0.0.1", 0, true, 10);
  auto client = make_tcp_store("127.0.0.1", tcp_store_port(*server), false, 10);
  std::string blob(128, '\0');
  for (int i = 0; i < 128; ++i) blob[size_t(i)] = static_cast<char>(i * 7);
  RendezvousWait w;
  w.timeout_s = 5;
  std::thread reader([&] { EXPECT_EQ(rendezvous_wait(*client, "nccl", 2, 1, w), blob); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  rendezvous_publish(*server, "nccl", blob, 2);
  reader.join();
  std::string e = error_of([&] { rendezvous_wait(*client, "nccl", 4, 1, w); });
  EXPECT_NE(e.find("rendezvous key 'nccl' in the TCP store"), std::string::npos) << e;
  EXPECT_NE(e.find("2 ranks, this one has 4"), std::string::npos) << e;
}
