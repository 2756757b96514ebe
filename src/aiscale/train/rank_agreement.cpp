#include "aiscale/train/rank_agreement.h"

#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "aiscale/core/error.h"
#include "aiscale/core/split.h"

namespace aiscale::train {
namespace {

std::map<std::string, std::string> as_map(const RankFingerprint& f) {
  std::map<std::string, std::string> m;
  for (const auto& line : f.lines) {
    const auto eq = line.find(" = ");
    if (eq == std::string::npos) m[line] = "";
    else m[line.substr(0, eq)] = line.substr(eq + 3);
  }
  return m;
}

}  // namespace

std::string RankFingerprint::text() const {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

uint64_t RankFingerprint::hash() const {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text()) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::vector<std::string> fingerprint_differences(const RankFingerprint& reference,
                                                 const RankFingerprint& mine) {
  const auto a = as_map(reference), b = as_map(mine);
  std::vector<std::string> out;
  for (const auto& [key, value] : a) {
    auto it = b.find(key);
    if (it == b.end()) out.push_back(fmt::format("{}: rank 0 has {}, this rank none", key, value));
    else if (it->second != value)
      out.push_back(fmt::format("{}: rank 0 has {}, this rank {}", key, value, it->second));
  }
  for (const auto& [key, value] : b)
    if (!a.count(key)) out.push_back(fmt::format("{}: rank 0 has none, this rank {}", key, value));
  return out;
}

void check_ranks_agree(parallel::Communicator& comm, const RankFingerprint& mine) {
  if (comm.world() < 2) return;
  std::string text = mine.text();
  int64_t size = static_cast<int64_t>(text.size());
  comm.broadcast_bytes(&size, sizeof size, 0);
  std::string reference(static_cast<size_t>(size), '\0');
  if (comm.rank() == 0) reference = text;
  comm.broadcast_bytes(reference.data(), size, 0);
  RankFingerprint ref;
  for (std::string_view line : split(reference, '\n')) ref.lines.emplace_back(line);
  const auto diffs = fingerprint_differences(ref, mine);
  double disagreeing = diffs.empty() ? 0.0 : 1.0;
  comm.allreduce_sum(&disagreeing, 1);
  if (disagreeing == 0) return;
  if (!diffs.empty())
    fail("rank {} was started with another configuration than rank 0: {}; start every rank "
         "with the same --config, --set values and data", comm.rank(), fmt::join(diffs, "; "));
  fail("{} rank(s) were started with another configuration than rank 0 (their messages name "
       "the keys); start every rank with the same --config, --set values and data",
       static_cast<int>(disagreeing));
}

// The resolved configuration and the world, as "section.key = value" lines.
RankFingerprint config_fingerprint(const TrainConfig& c, const parallel::Communicator& comm) {
  RankFingerprint f;
  const std::string toml = to_toml(c);
  std::string section;
  for (std::string_view line : split(toml, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    if (line[0] == '[') {
      section = line.substr(1, line.size() - 2);
      continue;
    }
    f.lines.push_back(section + "." + std::string(line));
  }
  f.lines.push_back(fmt::format("world.size = {}", comm.world()));
  f.lines.push_back("world.backend = " + comm.backend());
  return f;
}

// The configuration, the data as each rank reads it, and the step it starts from.
RankFingerprint fingerprint(const TrainConfig& c, const BatchSource& train, const BatchSource* val,
                            const parallel::Communicator& comm, int64_t start_step) {
  RankFingerprint f = config_fingerprint(c, comm);
  f.lines.push_back("data.train (as read) = " + train.describe());
  if (val) f.lines.push_back("data.val (as read) = " + val->describe());
  f.lines.push_back(fmt::format("resume.step = {}", start_step));
  return f;
}

}  // namespace aiscale::train
