// Asking Slurm how jobs stand: squeue for the queue (and jobs that ended a short while ago),
// scontrol show job for a job squeue no longer lists, sacct where accounting is kept.
#pragma once
#include <map>
#include <string>
#include <vector>

namespace aiscale::orchestrate {

struct JobState {
  std::string state;      // PENDING, RUNNING, COMPLETED, FAILED, TIMEOUT, NODE_FAIL, ...
  std::string reason;     // Slurm's reason ("Dependency", "None", ...)
  std::string exit_code;  // "status:signal" when known
  std::string source;     // "squeue", "scontrol", "sacct"
};

// Jobs that will not run again on their own.
bool is_terminal_state(const std::string& state);
// Terminal and not COMPLETED: the job died (TIMEOUT, NODE_FAIL, CANCELLED, OUT_OF_MEMORY,
// FAILED, PREEMPTED, BOOT_FAIL, DEADLINE).
bool is_died_state(const std::string& state);

// A pending job whose reason means it will never start on its own (PartitionNodeLimit,
// PartitionTimeLimit, BadConstraints, DependencyNeverSatisfied, InvalidAccount, ...).
bool is_hopeless_pending(const std::string& state, const std::string& reason);

// The states Slurm knows of `job_ids` ("123" or "123_4"); a job absent from the result is
// unknown to Slurm (purged without accounting). Throws Error when squeue cannot reach the
// controller, naming the command and its message.
std::map<std::string, JobState> query_jobs(const std::vector<std::string>& job_ids);

// Parsers, exposed for tests.
std::map<std::string, JobState> parse_squeue(const std::string& out);   // "%i|%T|%r" lines
JobState parse_scontrol_job(const std::string& out);                    // "scontrol show job"
std::map<std::string, JobState> parse_sacct(const std::string& out);    // -P JobID|State|ExitCode

}  // namespace aiscale::orchestrate
