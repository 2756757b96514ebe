// A GPU pipeline stage's plan (nn/models/gpt_cuda.cuh): host code in every build, checked
// without a GPU. The stage's layers are those a CPU stage holds, its passes the shared
// schedule's, and the stash holds as many micro-batches as the schedule keeps in flight.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "aiscale/core/error.h"
#include "aiscale/nn/models/gpt.h"
#include "aiscale/nn/models/gpt_cuda.cuh"
#include "aiscale/parallel/pipeline/schedule.h"

using namespace aiscale;
using namespace aiscale::nn;
namespace sched = aiscale::parallel::pipeline;

namespace {

GptConfig five_layers() {
  GptConfig c;
  c.n_layer = 5;
  c.n_head = 2;
  c.n_embd = 64;
  c.vocab_size = 256;
  c.block_size = 32;
  return c;
}

GptRunOptions options(int micro, const std::string& schedule) {
  GptRunOptions o;
  o.batch = 8;
  o.seq = 16;
  o.microbatches = micro;
  o.pipeline_schedule = schedule;
  return o;
}

}  // namespace

TEST(GptCudaPipelinePlan, StagesFollowTheSharedSplitAndSchedule) {
  const GptConfig c = five_layers();
  for (const std::string schedule : {"gpipe", "1f1b"}) {
    for (int stages : {2, 3, 5}) {
      int64_t next = 0;
      for (int s = 0; s < stages; ++s) {
        const auto plan = detail::gpt_cuda_pipeline_plan(c, options(8, schedule), stages, s);
        const sched::StageLayers layers = sched::stage_layers(5, stages, s);
        EXPECT_EQ(plan.layer_begin, layers.begin);
        EXPECT_EQ(plan.layer_end, layers.end);
        EXPECT_EQ(plan.layer_begin, next);
        next = plan.layer_end;
        EXPECT_EQ(plan.microbatches, 8);
        const sched::StageSchedule table = sched::schedule_by_name(schedule, stages, s, 8);
        ASSERT_EQ(plan.passes.size(), table.size());
        for (size_t i = 0; i < table.size(); ++i) {
          EXPECT_EQ(plan.passes[i].forward, table[i].kind == sched::PassKind::forward);
          EXPECT_EQ(plan.passes[i].microbatch, table[i].microbatch);
        }
        EXPECT_EQ(plan.slots, sched::max_in_flight(table));
        // A micro-batch's stash slot is free again (its backward ran) before the forward
        // that reuses it: slot m % slots.
        std::vector<int> holder(size_t(plan.slots), -1);
        for (const auto& p : plan.passes) {
          int& h = holder[size_t(p.microbatch % plan.slots)];
          if (p.forward) {
            EXPECT_EQ(h, -1) << schedule << ", stage " << s << " of " << stages
                             << ": micro-batch " << p.microbatch << " overwrites " << h;
            h = p.microbatch;
          } else {
            EXPECT_EQ(h, p.microbatch);
            h = -1;
          }
        }
      }
      EXPECT_EQ(next, 5);
    }
  }
  // 1F1B keeps fewer inputs than GPipe on the first stage.
  EXPECT_EQ(detail::gpt_cuda_pipeline_plan(c, options(8, "gpipe"), 2, 0).slots, 8);
  EXPECT_EQ(detail::gpt_cuda_pipeline_plan(c, options(8, "1f1b"), 2, 0).slots, 2);
  EXPECT_EQ(detail::gpt_cuda_pipeline_plan(c, options(8, "1f1b"), 2, 1).slots, 1);
}

TEST(GptCudaPipelinePlan, RefusesWhatCannotSplit) {
  const GptConfig c = five_layers();
  EXPECT_THROW(detail::gpt_cuda_pipeline_plan(c, options(3, "1f1b"), 2, 0), Error);  // 8 rows
  EXPECT_THROW(detail::gpt_cuda_pipeline_plan(c, options(8, "1f1b"), 6, 0), Error);  // 5 layers
  EXPECT_THROW(detail::gpt_cuda_pipeline_plan(c, options(8, "zigzag"), 2, 0), Error);
}
