// The Slurm job options shared by `aiscale slurm script|submit` and `aiscale scale
// --scheduler slurm`: resources, site preset, launch.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "aiscale/orchestrate/slurm_script.h"
#include "aiscale/plan/catalog.h"

namespace aiscale::cli {

struct JobOptions {
  orchestrate::ScriptRequest req;
  std::string catalog_dir;
  std::vector<std::string> system_files;
  bool exclusive = true, exclusive_given = false;
  bool no_site_prelude = false;
};

// Adds the options to `c`; `study`: for study points (nodes, ranks, output and chdir come
// from each point).
void add_job_options(CLI::App* c, JobOptions& o, bool study);

// Fills the request's defaults that depend on the environment; returns the catalogue
// when a preset is asked for (null otherwise).
std::unique_ptr<plan::Catalog> prepare_job_options(JobOptions& o);

}  // namespace aiscale::cli
