// A run resumed in another layout or batch than its checkpoint's (train/session.cpp):
// - keys of the old layout that the new one cannot take (parallel.microbatches without
//   pipeline stages, parallel.sequence_parallel without tensor ranks, ...) are reset to
//   what it takes, each with a note naming the key, the old and new value and why;
//   a key the command line sets (--set) is never reset, so a contradiction there is still
//   refused by the config checks;
// - what the checkpoint's layout and tokens per step become is said in notes: the data
//   continues from the checkpoint's sample in the same order (DataPosition counts samples),
//   whatever the number of data-parallel ranks, the batch size or the accumulation;
// - another train.seq_len, which makes other samples, is refused.
#pragma once
#include <string>
#include <vector>

#include "aiscale/train/checkpoint.h"
#include "aiscale/train/config.h"
#include "aiscale/train/parallel_layout.h"

namespace aiscale::train {

// Resets, in a resumed run's configuration, the keys that only made sense for the layout
// it ran in and that `set_keys` (the --set overrides) do not name; `world` is the job's
// rank count. Returns one note per key: "parallel.microbatches = 4 -> 1: ...".
std::vector<std::string> reset_old_layout_keys(TrainConfig& c, int world,
                                               const std::vector<std::string>& set_keys);

// load_train_config with reset_old_layout_keys before the checks; the notes into `notes`.
TrainConfig load_resumed_config(const std::string& path, const std::vector<std::string>& overrides,
                                int world, std::vector<std::string>* notes);

// Between checkpoint `s` (folder `where`) and the run `c` in layout `l` that resumes it:
// notes on another layout, another number of tokens per step (the data continuing from
// the same sample in the same order), another seed and a converted older position.
// Throws Error for another train.seq_len.
std::vector<std::string> resume_notes(const CheckpointState& s, const TrainConfig& c,
                                      const ParallelLayout& l, const std::string& where);

}  // namespace aiscale::train
