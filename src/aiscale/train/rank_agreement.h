// Start-up agreement across ranks: every rank must run the same resolved configuration on
// the same data in the same world layout, or a data-parallel job computes a wrong global
// batch (or hangs in a collective of another size). Checked once, before step 1: the ranks
// that differ stop at once, naming the keys.
#pragma once
#include <string>
#include <vector>

#include "aiscale/parallel/comm.h"
#include "aiscale/train/config.h"
#include "aiscale/train/trainer.h"

namespace aiscale::train {

// "key = value" lines that must match on every rank.
struct RankFingerprint {
  std::vector<std::string> lines;
  std::string text() const;
  uint64_t hash() const;  // FNV-1a 64 of text(), printed in the log
};

// The lines of `mine` that differ from `reference`, as "key: rank 0 has A, this rank B".
std::vector<std::string> fingerprint_differences(const RankFingerprint& reference,
                                                 const RankFingerprint& mine);

// Collective: rank 0's fingerprint goes to every rank; each compares; if any rank differs,
// every rank throws Error (the differing ranks naming the keys and values).
void check_ranks_agree(parallel::Communicator& comm, const RankFingerprint& mine);

// The resolved configuration and the world, as "section.key = value" lines (checked right
// after the communicator is built, before any group is split).
RankFingerprint config_fingerprint(const TrainConfig& c, const parallel::Communicator& comm);
// That, the data as each rank reads it, and the step it starts from (checked before step 1).
RankFingerprint fingerprint(const TrainConfig& c, const BatchSource& train, const BatchSource* val,
                            const parallel::Communicator& comm, int64_t start_step);

}  // namespace aiscale::train
