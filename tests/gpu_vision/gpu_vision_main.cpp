// Entry of the GPU vision checks: skipped (77) where no GPU is visible.
#include <gtest/gtest.h>

#include <cstdio>

#include "aiscale/parallel/bootstrap.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (aiscale::parallel::cuda_visible_gpus() == 0) {
    std::printf("no GPU visible: skipped\n");
    return 77;
  }
  return RUN_ALL_TESTS();
}
