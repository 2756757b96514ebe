// Running the Slurm client commands (sbatch, squeue, scontrol, sacct, scancel) without a
// shell: argv in, exit status and output out.
#pragma once
#include <string>
#include <vector>

namespace aiscale::orchestrate {

struct ProcessResult {
  int exit_code = -1;   // exit status; 128 + signal; 127 when the program was not found
  std::string out, err;
  bool ok() const { return exit_code == 0; }
};

// Runs argv[0] (looked up on PATH) with its arguments and waits for it; stdin is /dev/null.
// Never throws for a failing program: the caller decides what its failure means.
ProcessResult run_process(const std::vector<std::string>& argv);

// Whether `program` is on PATH.
bool program_on_path(const std::string& program);

}  // namespace aiscale::orchestrate
