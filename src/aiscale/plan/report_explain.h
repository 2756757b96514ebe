// The --explain texts of `aiscale plan` and `plan scaling` that say where the model's numbers
// come from: the machine figures with their sources, the calibration, the assumptions.
// Internal to report_text.cpp and report_explain.cpp.
#pragma once
#include <string>

#include "aiscale/plan/planner.h"

namespace aiscale::plan {

// One figure: what, its value, measured or datasheet, its source (one line).
std::string figure_line(const char* what, const Figure& f, const std::string& value);
// The machine figures of a target (utilisation, bandwidths, spread, copy-engine slowdown).
std::string figures_text(const MachineFigures& m, const std::string& label, GradTransport t);
// The calibration given, then the model's assumptions, with the optimizer offload's and the
// FP8 step's where the request has them.
std::string model_terms_text(const PlanRequest& r, const Calibration& cal, const Assumptions& a,
                             GradTransport t);

}  // namespace aiscale::plan
