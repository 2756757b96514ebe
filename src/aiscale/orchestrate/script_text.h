// Text that goes into a generated sbatch script, checked before the script is written: a
// value is either a word of a fixed grammar, or quoted where it reaches a shell line, and
// never holds a control character (a newline in a job name or an argument would start a
// line of its own, which the job runs as a command). Each check names the option (or the
// preset key) the value came from and the fix.
#pragma once
#include <string>

namespace aiscale::orchestrate {

// The value as it may be shown in a message: control characters as \n, \t, \xNN.
std::string printable(const std::string& value);

// No control character (U+0000-U+001F, U+007F). Shell lines the user writes (--prelude)
// get only this check: they are shell by design, one line each.
void check_script_text(const std::string& value, const std::string& what);

// A value of an #SBATCH line (job name, partition, account, QOS, output, chdir): sbatch
// reads it up to the first blank, so besides control characters no blank, quote,
// backslash or '#'.
void check_sbatch_value(const std::string& value, const std::string& what);

// A name in shell syntax: an environment variable (letters, digits, '_', not a digit first).
void check_env_name(const std::string& name, const std::string& what);

// One word of letters, digits and "._-" (an srun --mpi plugin, a GRES name): it is written
// unquoted inside a quoted default.
void check_word(const std::string& value, const std::string& what);

}  // namespace aiscale::orchestrate
