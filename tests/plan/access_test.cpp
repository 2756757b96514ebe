// Access routes: the EuroHPC calls read from the catalogue (data/systems/access.toml),
// each with its source, and the choice of one by GPU-hours, duration and applicant.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "aiscale/core/error.h"
#include "aiscale/plan/catalog.h"
#include "aiscale/plan/planner.h"

namespace aiscale::plan {
namespace {

const Catalog& catalog() {
  static const Catalog cat = load_catalog(std::string(AISCALE_SOURCE_DIR) + "/data/systems");
  return cat;
}

const System& eurohpc() { return *catalog().find_system("leonardo"); }

constexpr double kHour = 3600, kDay = 86400;

TEST(PlanAccess, EveryCallIsInTheCatalogueWithItsSource) {
  std::vector<std::string> names;
  for (const auto& c : catalog().access) {
    names.push_back(c.name);
    EXPECT_FALSE(c.url.empty()) << c.id;
    EXPECT_EQ(c.url.rfind("http", 0), 0u) << c.id << ": " << c.url;
    EXPECT_EQ(c.seen.size(), 10u) << c.id << ": seen = " << c.seen;
    EXPECT_FALSE(c.audience.empty()) << c.id;
  }
  for (const char* want : {"Playground", "Fast Lane", "Large Scale", "Benchmark", "Development",
                           "Regular", "Extreme Scale"})
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
}

TEST(PlanAccess, ByGpuHours) {
  const auto& calls = catalog().access;
  EXPECT_EQ(access_route(calls, 100, 2 * kHour, eurohpc(), false).name, "Playground");
  EXPECT_EQ(access_route(calls, 5000, 2 * kDay, eurohpc(), false).name, "Playground");
  EXPECT_EQ(access_route(calls, 5001, 2 * kDay, eurohpc(), false, Applicant::experienced).name,
            "Fast Lane");
  EXPECT_EQ(access_route(calls, 50000, 10 * kDay, eurohpc(), false, Applicant::experienced).name,
            "Fast Lane");
  EXPECT_EQ(access_route(calls, 50001, 10 * kDay, eurohpc(), false).name, "Large Scale");
  EXPECT_EQ(access_route(calls, 100, kHour, *catalog().find_system("jade2"), false).name,
            "site allocation");
}

TEST(PlanAccess, ByDurationAndApplicant) {
  const auto& calls = catalog().access;
  // Small in GPU-hours but longer than the Playground's 3 months: Large Scale's periods
  // run to 12 months, yet its GPU-hours start above Fast Lane's cap, so no call holds it.
  const AccessRoute slow = access_route(calls, 4000, 200 * kDay, eurohpc(), false);
  EXPECT_EQ(slow.name, "none fits");
  // Longer than any published period.
  const AccessRoute years = access_route(calls, 1e6, 500 * kDay, eurohpc(), false);
  EXPECT_EQ(years.name, "none fits");
  EXPECT_NE(years.detail.find("12 months"), std::string::npos) << years.detail;
  // Fast Lane is for users familiar with HPC: a new user between 5,000 and 50,000 GPU-hours
  // has no AI Factory call below Large Scale.
  EXPECT_EQ(access_route(calls, 20000, 5 * kDay, eurohpc(), false, Applicant::new_user).name,
            "none fits");
  EXPECT_EQ(access_route(calls, 20000, 5 * kDay, eurohpc(), false, Applicant::experienced).name,
            "Fast Lane");
  // The JU's calls that also hold the run are listed; Extreme Scale only for large runs.
  const AccessRoute big = access_route(calls, 2e6, 60 * kDay, eurohpc(), false);
  EXPECT_EQ(big.name, "Large Scale");
  bool extreme = false;
  for (const auto& x : big.also) extreme |= x.rfind("Extreme Scale", 0) == 0;
  EXPECT_TRUE(extreme);
  // A limit a call does not publish is said to be unpublished, never invented.
  for (const auto& c : calls) {
    if (c.name == "Regular") {
      EXPECT_NE(c.limits().find("not published"), std::string::npos) << c.limits();
    }
  }
  // CPU partitions: the AI Factory calls are sized in GPU-hours.
  EXPECT_EQ(access_route(calls, 1000, kDay, eurohpc(), true).name, "CPU allocation");
}

TEST(PlanAccess, MalformedCallsAreExplained) {
  const std::string dir = ::testing::TempDir() + "/access_bad";
  std::filesystem::create_directories(dir);
  {
    std::ofstream f(dir + "/calls.toml");
    f << "[[access]]\nid = \"x\"\nname = \"X\"\nprogramme = \"EuroHPC JU\"\n";  // no url/seen
  }
  try {
    load_catalog(std::string(AISCALE_SOURCE_DIR) + "/data/systems", {dir + "/calls.toml"});
    FAIL() << "a call without its source was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("url"), std::string::npos) << e.what();
  }
}

TEST(PlanAccess, PlansPickTheCallFromHoursAndTime) {
  PlanRequest r;
  r.workload = make_workload("gpt2-124m");
  r.tokens = 1e9;
  const PlanResult res = plan(r, catalog().resolve("leonardo"), catalog(), Calibration{}, Assumptions{});
  ASSERT_EQ(res.ranked.size(), 1u);
  EXPECT_EQ(res.ranked[0].route.name, "Playground");
  EXPECT_EQ(res.ranked[0].route.call_id, "ai-playground");
}

}  // namespace
}  // namespace aiscale::plan
