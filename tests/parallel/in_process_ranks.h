// Ranks as threads of one test process: point-to-point messages through shared queues,
// as PeerLinks (the all-reduce algorithms' interface) and as a Communicator with
// send/recv/allgather (AdaSum and compression), so that the algorithms are checked
// on any rank count without MPI.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>
#include <vector>

#include "aiscale/parallel/algorithms/peer_links.h"
#include "aiscale/parallel/comm.h"

namespace aiscale::testsupport {

// The queues of messages between the ranks, by (from, to, tag).
class Fabric {
 public:
  void put(int from, int to, int tag, std::vector<float> msg) {
    {
      std::lock_guard<std::mutex> lock(m_);
      queues_[{from, to, tag}].push_back(std::move(msg));
    }
    cv_.notify_all();
  }
  std::vector<float> take(int from, int to, int tag) {
    std::unique_lock<std::mutex> lock(m_);
    auto& q = queues_[{from, to, tag}];
    cv_.wait(lock, [&] { return !q.empty(); });
    std::vector<float> msg = std::move(q.front());
    q.pop_front();
    return msg;
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  std::map<std::tuple<int, int, int>, std::deque<std::vector<float>>> queues_;
};

// Sends are copied at once (buffered); receives complete in the order they were posted
// per peer and tag, as MPI's do.
class ThreadLinks final : public parallel::algorithms::PeerLinks {
 public:
  ThreadLinks(Fabric& f, int rank, int world) : f_(f), rank_(rank), world_(world) {}
  int rank() const override { return rank_; }
  int world() const override { return world_; }
  int isend(const float* data, int64_t n, int peer, int tag) override {
    EXPECT_TRUE(peer >= 0 && peer < world_ && peer != rank_) << "send to " << peer;
    f_.put(rank_, peer, tag, std::vector<float>(data, data + n));
    ops_.push_back({nullptr, n, peer, tag, true});
    return static_cast<int>(ops_.size()) - 1;
  }
  int irecv(float* data, int64_t n, int peer, int tag) override {
    EXPECT_TRUE(peer >= 0 && peer < world_ && peer != rank_) << "receive from " << peer;
    ops_.push_back({data, n, peer, tag, false});
    return static_cast<int>(ops_.size()) - 1;
  }
  void wait(int id) override {
    Op& op = ops_.at(static_cast<size_t>(id));
    if (op.done) return;
    for (int i = 0; i < id; ++i) {  // earlier receives of the same peer and tag match first
      Op& e = ops_[static_cast<size_t>(i)];
      if (!e.done && e.peer == op.peer && e.tag == op.tag) wait(i);
    }
    std::vector<float> msg = f_.take(op.peer, rank_, op.tag);
    EXPECT_EQ(static_cast<int64_t>(msg.size()), op.n) << "message size from " << op.peer;
    std::copy(msg.begin(), msg.begin() + std::min<int64_t>(op.n, static_cast<int64_t>(msg.size())), op.data);
    op.done = true;
  }
  void wait_all() override {
    for (size_t i = 0; i < ops_.size(); ++i) wait(static_cast<int>(i));
    ops_.clear();
  }

 private:
  struct Op {
    float* data;
    int64_t n;
    int peer, tag;
    bool done;
  };
  Fabric& f_;
  int rank_, world_;
  std::vector<Op> ops_;
};

// Only what AdaSum and the compressed exchange use: send/recv, all-gather, barrier.
class ThreadComm final : public parallel::Communicator {
 public:
  ThreadComm(Fabric& f, int rank, int world) : f_(f), rank_(rank), world_(world) {}
  int rank() const override { return rank_; }
  int world() const override { return world_; }
  std::string backend() const override { return "threads"; }
  void allreduce_sum(float* data, int64_t n) override {
    std::vector<float> all(static_cast<size_t>(n * world_));
    allgather(data, all.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      float s = 0;
      for (int r = 0; r < world_; ++r) s += all[static_cast<size_t>(r * n + i)];
      data[i] = s;
    }
  }
  void allreduce_sum(double*, int64_t) override { ADD_FAILURE() << "not used"; }
  void broadcast(float*, int64_t, int) override { ADD_FAILURE() << "not used"; }
  void broadcast_bytes(void*, int64_t, int) override { ADD_FAILURE() << "not used"; }
  void barrier() override {}
  void abort(int) override { ADD_FAILURE() << "abort"; }
  void send(const float* data, int64_t n, int peer) override {
    f_.put(rank_, peer, 1, std::vector<float>(data, data + n));
  }
  void recv(float* data, int64_t n, int peer) override {
    std::vector<float> msg = f_.take(peer, rank_, 1);
    ASSERT_EQ(static_cast<int64_t>(msg.size()), n);
    std::copy(msg.begin(), msg.end(), data);
  }
  // Copies bytes, as MPI's all-gather does.
  void allgather(const float* in, float* out, int64_t count) override {
    for (int r = 0; r < world_; ++r)
      if (r != rank_) f_.put(rank_, r, 2, std::vector<float>(in, in + count));
    std::memcpy(out + rank_ * count, in, static_cast<size_t>(count) * 4);
    for (int r = 0; r < world_; ++r)
      if (r != rank_) {
        std::vector<float> msg = f_.take(r, rank_, 2);
        std::memcpy(out + r * count, msg.data(), static_cast<size_t>(count) * 4);
      }
  }

 private:
  Fabric& f_;
  int rank_, world_;
};

// Runs body(rank) on `world` threads and joins them.
inline void run_ranks(int world, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back(body, r);
  for (auto& t : threads) t.join();
}

}  // namespace aiscale::testsupport
