// Access routes: the EuroHPC access calls (the Joint Undertaking's Benchmark, Development,
// Regular and Extreme Scale calls, and the AI Factories' Playground, Fast Lane and Large
// Scale) by their published limits, read from the catalogue ([[access]] in
// data/systems/access.toml, every figure with its URL and the date it was seen), and the
// choice of one for a run from its GPU-hours, its duration and who applies.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace aiscale::plan {

struct System;

// Who applies (--applicant): a new user, SME or start-up (the Playground's audience), or
// a user familiar with HPC (Fast Lane's and the peer-reviewed calls').
enum class Applicant { new_user, experienced };
Applicant parse_applicant(std::string_view text);  // "new", "experienced"
std::string_view to_string(Applicant a);

struct AccessCall {
  std::string id;          // "ai-playground"
  std::string name;        // "Playground"
  std::string programme;   // "EuroHPC AI Factories" or "EuroHPC JU"
  std::string audience;    // who it is for, as published
  std::string purpose;     // "training" (production runs) or "preparation" (testing, porting)
  bool new_users = true;   // open to new users, SMEs and start-ups without HPC experience
  bool experienced = true; // open to experienced HPC users
  // GPU-hours a project may get; nullopt: not published (the call's terms change per call).
  std::optional<double> max_gpu_hours;
  double min_gpu_hours = 0;            // more than this (Large Scale: above Fast Lane's cap)
  std::optional<double> max_months;    // allocation period; nullopt: not published
  std::string period;                  // "1-3 months", as published
  std::string turnaround;              // "~2 working days", "cut-offs, peer review"
  std::string url;                     // where the figures were read
  std::string seen;                    // date seen, YYYY-MM-DD
  std::string notes;

  // "up to 5,000 GPU-hours, 1-3 months; ..." with "not published" where it is.
  std::string limits() const;
};

struct AccessRoute {
  std::string name;    // "Playground", "Fast Lane", "Large Scale", "site allocation", ...
  std::string detail;  // limits, timing and source
  std::string call_id; // the [[access]] id, or "" for site/CPU allocations
  std::vector<std::string> also;  // other calls that fit (e.g. Benchmark first, Regular)
};

// The call for a run of `gpu_hours` lasting `seconds` on a system: on a EuroHPC system's GPU
// partition the first AI Factory call (in catalogue order) whose published GPU-hour limit
// and allocation period hold the run and whose audience includes the applicant; the
// Joint Undertaking's calls that also fit go to `also`. Other systems: the site's own
// allocation; CPU partitions: the AI Factory calls are sized in GPU-hours, so the JU calls.
AccessRoute access_route(const std::vector<AccessCall>& calls, double gpu_hours, double seconds,
                         const System& system, bool cpu_partition,
                         Applicant who = Applicant::new_user);

}  // namespace aiscale::plan
