#include "aiscale/orchestrate/slurm_jobs.h"

#include <algorithm>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "aiscale/core/error.h"
#include "aiscale/orchestrate/process.h"

namespace aiscale::orchestrate {
namespace {

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t\r\n"), b = s.find_last_not_of(" \t\r\n");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, sep)) out.push_back(part);
  if (!s.empty() && s.back() == sep) out.emplace_back();
  return out;
}

// "CANCELLED by 0" -> "CANCELLED"; "OUT_OF_ME+" (sacct truncation) is avoided by -P.
std::string first_word(const std::string& s) {
  std::string t = trim(s);
  return t.substr(0, t.find(' '));
}

std::string value_of(const std::string& text, const std::string& key) {
  // scontrol prints "Key=Value" tokens separated by spaces and newlines.
  size_t pos = 0;
  while ((pos = text.find(key + "=", pos)) != std::string::npos) {
    if (pos == 0 || text[pos - 1] == ' ' || text[pos - 1] == '\n') {
      size_t start = pos + key.size() + 1;
      size_t end = text.find_first_of(" \n", start);
      return text.substr(start, end == std::string::npos ? std::string::npos : end - start);
    }
    pos += key.size();
  }
  return "";
}

bool accounting_enabled() {
  ProcessResult r = run_process({"scontrol", "show", "config"});
  if (!r.ok()) return false;
  std::string v = value_of(r.out, "AccountingStorageType");
  if (v.empty()) {
    // "AccountingStorageType   = accounting_storage/none"
    size_t pos = r.out.find("AccountingStorageType");
    if (pos == std::string::npos) return false;
    size_t eq = r.out.find('=', pos), nl = r.out.find('\n', pos);
    if (eq == std::string::npos || eq > nl) return false;
    v = trim(r.out.substr(eq + 1, nl - eq - 1));
  }
  return !v.empty() && v.find("none") == std::string::npos;
}

// The '|'-separated fields of each line of `out` (the --parsable2 form of squeue and sacct).
std::vector<std::vector<std::string>> pipe_rows(const std::string& out) {
  std::vector<std::vector<std::string>> rows;
  std::stringstream ss(out);
  std::string line;
  while (std::getline(ss, line)) rows.push_back(split(trim(line), '|'));
  return rows;
}

}  // namespace

bool is_terminal_state(const std::string& s) {
  static const std::set<std::string> terminal = {
      "COMPLETED", "FAILED",    "TIMEOUT",  "NODE_FAIL", "CANCELLED", "OUT_OF_MEMORY",
      "PREEMPTED", "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT", "REVOKED", "LOST"};
  return terminal.count(s) > 0;
}

bool is_died_state(const std::string& s) { return is_terminal_state(s) && s != "COMPLETED"; }

bool is_hopeless_pending(const std::string& state, const std::string& reason) {
  static const std::set<std::string> hopeless = {
      "PartitionNodeLimit", "PartitionTimeLimit", "PartitionConfig", "BadConstraints",
      "DependencyNeverSatisfied", "InvalidAccount", "InvalidQOS", "PartitionDown",
      "PartitionInactive", "ReqNodeNotAvail"};
  return state == "PENDING" && hopeless.count(reason.substr(0, reason.find(','))) > 0;
}

std::map<std::string, JobState> parse_squeue(const std::string& out) {
  std::map<std::string, JobState> jobs;
  for (const auto& f : pipe_rows(out))
    if (f.size() >= 2 && !f[0].empty())
      jobs[f[0]] = {first_word(f[1]), f.size() > 2 ? trim(f[2]) : "", "", "squeue"};
  return jobs;
}

JobState parse_scontrol_job(const std::string& out) {
  JobState s;
  s.state = first_word(value_of(out, "JobState"));
  s.reason = value_of(out, "Reason");
  s.exit_code = value_of(out, "ExitCode");
  s.source = "scontrol";
  return s;
}

std::map<std::string, JobState> parse_sacct(const std::string& out) {
  std::map<std::string, JobState> jobs;
  for (const auto& f : pipe_rows(out))  // the job, not its steps (ID.batch, ID.0)
    if (f.size() >= 3 && !f[0].empty() && f[0].find('.') == std::string::npos)
      jobs[f[0]] = {first_word(f[1]), "", trim(f[2]), "sacct"};
  return jobs;
}

std::map<std::string, JobState> query_jobs(const std::vector<std::string>& ids) {
  std::map<std::string, JobState> found;
  if (ids.empty()) return found;
  // One squeue for everything of this user, one line per array task (-r).
  ProcessResult q = run_process({"squeue", "--me", "--noheader", "--array", "--states=all",
                                 "--format=%i|%T|%r"});
  if (q.exit_code == 127)
    fail("squeue is not installed or not on PATH: run this where Slurm's client commands are "
         "(a login node), or install Debian's slurm-client");
  if (!q.ok())
    fail("squeue could not ask the Slurm controller: {}: check that slurmctld runs and "
         "SLURM_CONF points at its slurm.conf", trim(q.err + q.out));
  auto queued = parse_squeue(q.out);
  std::vector<std::string> missing;
  for (const auto& id : ids) {
    auto it = queued.find(id);
    if (it != queued.end()) found[id] = it->second;
    else missing.push_back(id);
  }
  // Ended jobs drop out of squeue; scontrol still knows them for MinJobAge (and gives
  // the exit code, which squeue does not).
  std::vector<std::string> unknown;
  for (const auto& id : missing) {
    ProcessResult s = run_process({"scontrol", "show", "job", id});
    JobState js = s.ok() ? parse_scontrol_job(s.out) : JobState{};
    if (!js.state.empty()) found[id] = js;
    else unknown.push_back(id);
  }
  for (auto& [id, js] : found)
    if (is_terminal_state(js.state) && js.exit_code.empty()) {
      ProcessResult s = run_process({"scontrol", "show", "job", id});
      if (s.ok()) js.exit_code = parse_scontrol_job(s.out).exit_code;
    }
  if (!unknown.empty() && accounting_enabled()) {
    std::string list;
    for (const auto& id : unknown) list += (list.empty() ? "" : ",") + id;
    ProcessResult a = run_process({"sacct", "--noheader", "--parsable2", "--allocations",
                                   "--jobs=" + list, "--format=JobID,State,ExitCode"});
    if (a.ok())
      for (auto& [id, js] : parse_sacct(a.out))
        if (std::find(unknown.begin(), unknown.end(), id) != unknown.end()) found[id] = js;
  }
  return found;
}

}  // namespace aiscale::orchestrate
