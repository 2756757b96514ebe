// The op table's pieces without a run: collectives on the communicator's GPU stream are
// overlapped rows (listed apart, not in the rows' total), their trace events carry the
// bucket, element type and collective; the spread of the ranks' tables names the ranks
// with the smallest and largest total of each op.
#include <gtest/gtest.h>

#include "aiscale/profile/op_table.h"
#include "aiscale/profile/op_table_ranks.h"
#include "aiscale/train/trace_writer.h"

using namespace aiscale::profile;

namespace {

Span span(std::string name, SpanKind kind, int track, double start_us, double dur_us,
          double bytes = 0) {
  Span s;
  s.name = std::move(name);
  s.kind = kind;
  s.track = track;
  s.start_us = start_us;
  s.dur_us = dur_us;
  s.bytes = bytes;
  return s;
}

// One profiled step of 1 ms: 900 us of model-stream ops, 400 us of bucket all-reduce
// beside them (2 buckets of 1 MB, 200 us each: 5 GB/s).
OpProfiler one_step() {
  OpProfiler p(0, 0, 1);
  p.begin_step(0);
  p.end_step(0, 1e-3);
  p.add_resolved(span("matmul_backward", SpanKind::op, kGpuTrack, 0, 600));
  p.add_resolved(span("layernorm_backward", SpanKind::op, kGpuTrack, 600, 300));
  for (int k = 0; k < 2; ++k) {
    Span b = span("allreduce_bucket", SpanKind::comm, kGpuCommTrack, 100 + 300 * k, 200, 1e6);
    b.bucket = k;
    b.dtype = "bf16";
    b.collective = "allreduce";
    p.add_resolved(b);
  }
  return p;
}

TEST(OpTableOverlap, CommunicatorStreamRowsAreApartFromTheTotal) {
  const OpTable t = make_op_table(one_step());
  EXPECT_NEAR(t.rows_total_s(), 900e-6, 1e-12);
  EXPECT_NEAR(t.overlapped_total_s(), 400e-6, 1e-12);
  EXPECT_NEAR(t.coverage(), 0.9, 1e-9);
  const OpRow* bucket = nullptr;
  for (const OpRow& r : t.rows)
    if (r.name == "allreduce_bucket") bucket = &r;
  ASSERT_NE(bucket, nullptr);
  EXPECT_TRUE(bucket->overlapped);
  EXPECT_EQ(bucket->kind, "comm");
  EXPECT_EQ(bucket->where, "gpu");
  EXPECT_EQ(bucket->calls, 2);
  EXPECT_NEAR(bucket->gbytes_per_s(), 5.0, 1e-9);
  const auto j = op_table_json(t);
  EXPECT_NEAR(j["overlapped_total_s"].get<double>(), 400e-6, 1e-12);
  // Back from JSON, as the other ranks' tables travel.
  const OpTable back = op_table_from_json(j);
  EXPECT_NEAR(back.rows_total_s(), t.rows_total_s(), 1e-12);
  EXPECT_NEAR(back.overlapped_total_s(), t.overlapped_total_s(), 1e-12);
  const std::string md = op_table_markdown(t);
  const size_t apart = md.find("Overlapped:");
  ASSERT_NE(apart, std::string::npos) << md;
  EXPECT_GT(md.find("| allreduce_bucket |"), apart) << md;
  EXPECT_LT(md.find("| matmul_backward |"), apart) << md;
  EXPECT_NE(md.find("5.0 GB/s"), std::string::npos) << md;
}

TEST(OpTableOverlap, TraceEventsCarryTheBucketAndCollective) {
  OpProfiler p = one_step();
  p.name_track(kGpuCommTrack, "GPU: communicator stream");
  const auto events = aiscale::train::trace_events(p, "node0");
  int buckets = 0;
  bool named = false;
  for (const auto& e : events) {
    if (e["ph"] == "M" && e["tid"] == kGpuCommTrack) named = e["args"]["name"] == "GPU: communicator stream";
    if (e["ph"] != "X" || e["name"] != "allreduce_bucket") continue;
    EXPECT_EQ(e["tid"], kGpuCommTrack);
    EXPECT_EQ(e["args"]["bucket"], buckets);
    EXPECT_EQ(e["args"]["dtype"], "bf16");
    EXPECT_EQ(e["args"]["collective"], "allreduce");
    EXPECT_DOUBLE_EQ(e["args"]["bytes"].get<double>(), 1e6);
    EXPECT_NEAR(e["args"]["gb_per_s"].get<double>(), 5.0, 1e-9);
    ++buckets;
  }
  EXPECT_TRUE(named);
  EXPECT_EQ(buckets, 2);
}

OpTable table(int rank, double step_s, std::vector<std::pair<std::string, double>> rows) {
  OpTable t;
  t.rank = rank;
  t.steps = 1;
  t.step_time_s = step_s;
  for (auto& [name, total] : rows) {
    OpRow r;
    r.name = name;
    r.kind = "op";
    r.where = "host";
    r.calls = 1;
    r.total_s = total;
    t.rows.push_back(r);
  }
  return t;
}

TEST(RankSpread, NamesTheRanksWithTheSmallestAndLargestTotal) {
  const RankSpread s = rank_spread({table(0, 1.0, {{"matmul", 0.5}, {"next_batch", 0.1}}),
                                    table(1, 1.4, {{"matmul", 0.5}, {"next_batch", 0.4}}),
                                    table(2, 1.1, {{"matmul", 0.6}})});
  EXPECT_EQ(s.ranks, 3);
  EXPECT_DOUBLE_EQ(s.min_step_time_s, 1.0);
  EXPECT_EQ(s.min_step_rank, 0);
  EXPECT_DOUBLE_EQ(s.max_step_time_s, 1.4);
  EXPECT_EQ(s.max_step_rank, 1);
  ASSERT_EQ(s.rows.size(), 2u);
  EXPECT_EQ(s.rows[0].name, "matmul");  // the largest maximum first
  EXPECT_EQ(s.rows[0].max_rank, 2);
  EXPECT_DOUBLE_EQ(s.rows[0].min_total_s, 0.5);
  EXPECT_NEAR(s.rows[0].spread(), 0.2, 1e-12);
  // Rank 2 never loads data here: it counts as 0 and has the smallest total.
  EXPECT_EQ(s.rows[1].name, "next_batch");
  EXPECT_EQ(s.rows[1].ranks_with, 2);
  EXPECT_EQ(s.rows[1].min_rank, 2);
  EXPECT_DOUBLE_EQ(s.rows[1].min_total_s, 0.0);
  EXPECT_EQ(s.rows[1].max_rank, 1);
  const auto j = rank_spread_json(s);
  EXPECT_EQ(j["rows"][1]["max_rank"], 1);
  EXPECT_EQ(j["step_time_s"]["max_rank"], 1);
  const std::string md = rank_spread_markdown(s);
  EXPECT_NE(md.find("Across 3 rank(s): 1000.000 ms per profiled step on rank 0 to 1400.000 ms on rank 1"),
            std::string::npos) << md;
  EXPECT_NE(md.find("| matmul | op | host | 3 | 500.000 | 0 | 600.000 | 2 | 1.20x |"), std::string::npos) << md;
  EXPECT_NE(md.find("| next_batch | op | host | 2 | 0.000 | 2 | 400.000 | 1 | - |"), std::string::npos) << md;
}

}  // namespace
