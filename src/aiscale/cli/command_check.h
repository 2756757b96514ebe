// Whether an aiscale command written into a job (a Slurm script, a study point) is one this
// aiscale runs: parsed with the same definitions as the command line, before the job waits
// in a queue or a study spends time on other points, instead of failing when it starts.
#pragma once
#include <string>
#include <vector>

namespace aiscale::cli {

// "" when `argv` (the arguments after `aiscale`) parses: a known subcommand, known options,
// values their checks accept. Otherwise one sentence: the unknown subcommand (with the
// known ones) or the parser's message. Nothing runs. Paths are not checked for existence:
// the command may run elsewhere (a cluster, another working directory).
std::string aiscale_command_error(const std::vector<std::string>& argv);

// The names of aiscale's subcommands ("train", "bench", ...).
std::vector<std::string> aiscale_subcommands();

}  // namespace aiscale::cli
