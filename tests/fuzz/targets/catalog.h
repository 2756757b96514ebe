// The systems catalogue (plan/catalog.h), Slurm presets included: the input is one more
// catalogue file beside the source tree's accelerators.toml and cpus.toml (read after
// them, so it may also override their entries); then every name is resolved and the
// catalogue listed, as `aiscale plan systems` does.
#pragma once
#include "../fuzz_support.h"
#include "aiscale/plan/catalog.h"
#include "aiscale/plan/report.h"

namespace aiscale::fuzz {

inline int fuzz_catalog(const uint8_t* data, size_t size) {
  static const std::filesystem::path dir = [] {
    const std::filesystem::path d = scratch_dir() / "systems";
    std::filesystem::create_directories(d);
    const std::filesystem::path source = std::filesystem::path(AISCALE_SOURCE_DIR) / "data/systems";
    for (const char* name : {"accelerators.toml", "cpus.toml"})
      std::filesystem::copy_file(source / name, d / name,
                                 std::filesystem::copy_options::overwrite_existing);
    return d;
  }();
  write_bytes(dir / "zz-fuzz.toml", as_text(data, size));
  return expect_user_errors([&] {
    const plan::Catalog cat = plan::load_catalog(dir.string());
    for (const plan::System& s : cat.systems) {
      (void)cat.resolve(s.id);
      for (const plan::Partition& p : s.partitions) (void)p.max_gpus();
    }
    (void)cat.gpu_targets();
    (void)plan::systems_text(cat);
    (void)plan::systems_json(cat);
  });
}

}  // namespace aiscale::fuzz
