# Finds nvcc and chooses the GPU architectures, before enable_language(CUDA).
#
# nvcc is, in this order: CMAKE_CUDA_COMPILER (or the CUDACXX environment variable, which
# CMake reads itself); <CUDAToolkit_ROOT>/bin/nvcc (the cache variable or the environment
# variable, as FindCUDAToolkit reads it); nvcc on PATH; /usr/local/cuda/bin/nvcc, the
# toolkit's standard prefix. Leaves CMAKE_CUDA_COMPILER empty when none is found.
#
# CMAKE_CUDA_ARCHITECTURES, when the user gives none: 80 (A100) and 90 (H100/H200), plus 100
# (B200) where this nvcc knows it (CUDA 12.8 and later). The kernels need nothing of the
# arch-specific 90a/100a features (no wgmma or TMA: the Hopper-only attention engines come
# from cuDNN), so the portable targets are enough, and 90 also embeds PTX for newer GPUs.
if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
  set(aiscale_cuda_roots)
  foreach(root "${CUDAToolkit_ROOT}" "$ENV{CUDAToolkit_ROOT}")
    if(NOT root STREQUAL "")
      list(APPEND aiscale_cuda_roots "${root}/bin")
    endif()
  endforeach()
  if(aiscale_cuda_roots)
    find_program(AISCALE_NVCC nvcc PATHS ${aiscale_cuda_roots} NO_DEFAULT_PATH)
  endif()
  find_program(AISCALE_NVCC nvcc)  # PATH
  find_program(AISCALE_NVCC nvcc PATHS /usr/local/cuda/bin NO_DEFAULT_PATH)
  if(AISCALE_NVCC)
    set(CMAKE_CUDA_COMPILER "${AISCALE_NVCC}" CACHE FILEPATH "The CUDA compiler (nvcc)")
  endif()
endif()
include(CheckLanguage)
check_language(CUDA)

if(CMAKE_CUDA_COMPILER AND NOT DEFINED CMAKE_CUDA_ARCHITECTURES AND
   NOT DEFINED ENV{CUDAARCHS})
  set(aiscale_archs 80 90)
  execute_process(COMMAND "${CMAKE_CUDA_COMPILER}" --list-gpu-arch
    OUTPUT_VARIABLE aiscale_nvcc_archs RESULT_VARIABLE rc ERROR_QUIET)
  if(rc EQUAL 0 AND aiscale_nvcc_archs MATCHES "compute_100")
    list(APPEND aiscale_archs 100)
  endif()
  set(CMAKE_CUDA_ARCHITECTURES "${aiscale_archs}" CACHE STRING
      "GPU architectures to compile for (default: 80;90, and 100 where nvcc knows it)")
endif()
message(STATUS "aiscale: CUDA compiler '${CMAKE_CUDA_COMPILER}', architectures '${CMAKE_CUDA_ARCHITECTURES}'")
