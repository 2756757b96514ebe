// What `aiscale plan` prints: the catalogue, ranked plans and scaling curves, as text
// tables for people and JSON for machines.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "aiscale/plan/planner.h"

namespace aiscale::plan {

std::string systems_text(const Catalog& cat);
nlohmann::json systems_json(const Catalog& cat);

// The compact ranked table (under 120 columns) and the best plan's summary; `explain` adds
// the workload, the breakdowns, the figures with their sources and the assumptions.
std::string plan_text(const PlanRequest& r, const PlanResult& res, const Calibration& cal,
                      const Assumptions& a, bool explain = false);
nlohmann::json plan_json(const PlanRequest& r, const PlanResult& res, const Calibration& cal,
                         const Assumptions& a);

std::string scaling_text(const PlanRequest& r, const ScalingCurve& c, const Calibration& cal,
                         const Assumptions& a);
nlohmann::json scaling_json(const PlanRequest& r, const ScalingCurve& c, const Calibration& cal,
                            const Assumptions& a);

// A plain-text table: the header, then rows; columns after `left_columns` align right.
std::string text_table(const std::vector<std::vector<std::string>>& rows, size_t left_columns);

}  // namespace aiscale::plan
