// The keys that the training config (config.cpp: GPT and Llama runs) and the image
// classifier's config (vision_config.cpp) share, defined once for both: each config type
// has members of these names, and the key's name, range and meaning are the same in both.
#pragma once
#include <cstdint>
#include <limits>
#include <vector>

#include "aiscale/core/config_schema.h"
#include "aiscale/core/validate.h"

namespace aiscale::train {

template <class C>
void add_common_train_keys(std::vector<config::Key<C>>& k) {
  k.push_back(config::integer_key<C>("train.seed", &C::seed, "seed for initialisation and shuffling", 0,
                                     std::numeric_limits<int64_t>::max()));
  k.push_back(config::integer_key<C>("train.threads", &C::threads, "CPU threads; 0 = all cores", 0,
                                     validate::kMaxThreads));
  k.push_back(config::integer_key<C>("train.log_every", &C::log_every, "steps between metrics lines", 1,
                                     int64_t{1} << 40));
}

template <class C>
config::Key<C> timeout_key() {
  return config::real_key<C>("parallel.timeout_s", &C::timeout_s,
                             "a collective stalled this long ends the rank (dead peer)", 1.0, 2592000.0);
}

template <class C>
void add_common_run_keys(std::vector<config::Key<C>>& k) {
  k.push_back(config::string_key<C>("run.dir", &C::run_dir, "parent folder of run directories"));
  k.push_back(config::string_key<C>("run.name", &C::run_name,
                                    "run directory name; empty = <preset>-<date>-<time>"));
  k.push_back(config::integer_key<C>("run.checkpoint_every", &C::checkpoint_every,
                                     "steps between checkpoints; 0 = only at the end", 0, int64_t{1} << 40));
  k.push_back(config::integer_key<C>("run.keep_checkpoints", &C::keep_checkpoints,
                                     "checkpoints kept (oldest removed)", 1, 1000000));
}

}  // namespace aiscale::train
