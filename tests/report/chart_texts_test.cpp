// The report's chart titles and captions live in src/aiscale/report/charts.md: one for each
// chart the report draws, and none for a chart it does not.
#include <gtest/gtest.h>

#include "aiscale/core/error.h"
#include "aiscale/report/chart_texts.h"

namespace aiscale {
namespace {

TEST(ChartTexts, EveryChartHasItsTitleAndCaptionAndNoneMore) {
  const std::vector<std::string> drawn = {
      "efficiency", "speedup", "throughput", "training", "cdf", "prediction", "loss", "split",
      "power", "clock", "tune_time", "tune_best", "tune_curves", "tune_importance"};
  EXPECT_EQ(report::chart_text_ids(), drawn);
  for (const std::string& id : drawn) {
    SCOPED_TRACE(id);
    EXPECT_FALSE(report::chart_text(id).title.empty());
    EXPECT_FALSE(report::chart_text(id).caption.empty());
  }
  EXPECT_EQ(report::chart_text("loss").caption, "Training (and validation, where measured) loss per step.");
  EXPECT_THROW(report::chart_text("no-such-chart"), Error);
}

}  // namespace
}  // namespace aiscale
