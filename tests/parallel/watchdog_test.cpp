// The watchdog wrapper (parallel/watchdog.h) passes every call to the communicator it
// watches: a wrapper that dropped one would send the call to Communicator's default, which
// fails (device point-to-point, used by GPU pipeline stages) or quietly takes a slower path
// (the fused sum of squares).
#include "aiscale/parallel/watchdog.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace aiscale::parallel {
namespace {

class Recording final : public Communicator {
 public:
  explicit Recording(std::vector<std::string>* calls) : calls_(calls) {}
  int rank() const override { return 0; }
  int world() const override { return 2; }
  std::string backend() const override { return "recording"; }
  bool on_device() const override { return true; }
  void allreduce_sum(float*, int64_t) override { add("allreduce_sum(float)"); }
  void allreduce_sum(double*, int64_t) override { add("allreduce_sum(double)"); }
  void broadcast(float*, int64_t, int) override { add("broadcast"); }
  void broadcast_bytes(void*, int64_t, int) override { add("broadcast_bytes"); }
  void barrier() override { add("barrier"); }
  void abort(int) override { add("abort"); }
  void allgather(const float*, float*, int64_t) override { add("allgather"); }
  void reduce_scatter_sum(const float*, float*, int64_t) override { add("reduce_scatter_sum"); }
  void allgather_async(const float*, float*, int64_t) override { add("allgather_async"); }
  void send(const float*, int64_t, int) override { add("send"); }
  void recv(float*, int64_t, int) override { add("recv"); }
  void allreduce_sum_async(float*, int64_t) override { add("allreduce_sum_async"); }
  void wait() override { add("wait"); }
  void* device_stream() override { return this; }
  void allreduce_sum_after(void*, int64_t, DType, void*) override { add("allreduce_sum_after"); }
  bool fuses_sum_squares() const override { return true; }
  void allreduce_sum_squares_after(void*, int64_t, DType, void*, double*) override {
    add("allreduce_sum_squares_after");
  }
  void reduce_scatter_sum_after(void*, int64_t, DType, void*) override { add("reduce_scatter_sum_after"); }
  void allgather_after(void*, int64_t, void*) override { add("allgather_after"); }
  bool allgather_push(void*, int64_t, void*, void*) override {
    add("allgather_push");
    return true;
  }
  void send_after(const void*, int64_t, int peer) override { add("send_after " + std::to_string(peer)); }
  void recv_after(void*, int64_t, int peer) override { add("recv_after " + std::to_string(peer)); }
  void record(void*) override { add("record"); }
  void group_begin() override { add("group_begin"); }
  void group_end() override { add("group_end"); }
  std::unique_ptr<Communicator> split(int, int) override {
    add("split");
    return std::make_unique<Recording>(calls_);
  }

 private:
  void add(const std::string& c) { calls_->push_back(c); }
  std::vector<std::string>* calls_;
};

TEST(Watchdog, PassesEveryCallToTheWatchedCommunicator) {
  std::vector<std::string> calls;
  auto w = with_watchdog(std::make_unique<Recording>(&calls), 60.0);
  EXPECT_EQ(w->backend(), "recording");
  EXPECT_TRUE(w->on_device());
  EXPECT_TRUE(w->fuses_sum_squares());
  float f[2] = {};
  double d[2] = {};
  w->allreduce_sum(f, 2);
  w->allreduce_sum(d, 2);
  w->broadcast(f, 2, 0);
  w->broadcast_bytes(f, 8, 0);
  w->barrier();
  w->allgather(f, f, 1);
  w->reduce_scatter_sum(f, f, 1);
  w->allgather_async(f, f, 1);
  w->send(f, 2, 1);
  w->recv(f, 2, 1);
  w->allreduce_sum_async(f, 2);
  w->wait();
  EXPECT_NE(w->device_stream(), nullptr);
  w->allreduce_sum_after(f, 2, DType::f32, nullptr);
  w->allreduce_sum_squares_after(f, 2, DType::f32, nullptr, d);
  w->reduce_scatter_sum_after(f, 1, DType::f32, nullptr);
  w->allgather_after(f, 4, nullptr);
  EXPECT_TRUE(w->allgather_push(f, 4, nullptr, nullptr));
  w->group_begin();
  w->send_after(f, 8, 1);
  w->recv_after(f, 8, 1);
  w->group_end();
  w->record(nullptr);
  auto sub = w->split(0, 0);
  ASSERT_NE(sub, nullptr);
  sub->send_after(f, 8, 1);  // the group is watched as well, and forwards as well
  const std::vector<std::string> want = {
      "allreduce_sum(float)", "allreduce_sum(double)", "broadcast", "broadcast_bytes", "barrier",
      "allgather", "reduce_scatter_sum", "allgather_async", "send", "recv",
      "allreduce_sum_async", "wait", "allreduce_sum_after", "allreduce_sum_squares_after",
      "reduce_scatter_sum_after", "allgather_after", "allgather_push", "group_begin",
      "send_after 1", "recv_after 1", "group_end", "record", "split", "send_after 1"};
  EXPECT_EQ(calls, want);
}

}  // namespace
}  // namespace aiscale::parallel
