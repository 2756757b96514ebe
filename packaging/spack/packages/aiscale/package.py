# Spack recipe of aiscale (docs/guide/installing-hpc.md#spack). Put this folder into a
# Spack repository of the site's (packages/aiscale/package.py); the source is a clone of the
# repository, given to Spack by `spack develop`:
#   spack env create -d aiscale-env && spack -e aiscale-env repo add SITE_REPO
#   spack -e aiscale-env add aiscale@0.1.0 +cuda cuda_arch=90 ^openmpi
#   spack -e aiscale-env develop -p /path/to/aiscale aiscale@0.1.0
#   spack -e aiscale-env install
# scripts/check_packaging.sh checks that every CMake option it passes is one the project
# declares, and configures the project with the options of the CPU variant.
from spack.package import *


class Aiscale(CMakePackage, CudaPackage):
    """Train GPT-2-style models and ResNets across the CPUs, GPUs and nodes of HPC machines,
    measure how well that scales, and choose the right machine and layout."""

    license("Apache-2.0")

    # The version of CMakeLists.txt's project(); its source comes from `spack develop`.
    version("0.1.0")

    # cuda (from CudaPackage): the CUDA backend, built for cuda_arch.
    variant("mpi", default=True, description="CPU ranks over MPI and the MPI rendezvous of GPU ranks")
    # ~nccl only drops the dependency: CMake still uses an NCCL it finds beside the CUDA
    # toolkit (CMakeLists.txt has no switch for it).
    variant("nccl", default=True, when="+cuda", description="NCCL for GPU ranks")
    variant("cudnn", default=True, when="+cuda", description="cuDNN 9's fused attention")
    variant("openblas", default=True,
            description="Build against Spack's OpenBLAS; off: an OpenBLAS the system provides")

    generator("ninja")

    depends_on("cxx", type="build")
    depends_on("c", type="build")
    depends_on("cmake@3.25:", type="build")
    depends_on("pkgconfig", type="build")
    depends_on("cli11")
    depends_on("nlohmann-json")
    depends_on("tomlplusplus")
    depends_on("fmt")
    depends_on("lmdb")
    depends_on("libjpeg-turbo")
    depends_on("libpng")
    depends_on("zlib-api")
    depends_on("sentencepiece")
    depends_on("openblas threads=pthreads", when="+openblas")
    depends_on("mpi", when="+mpi")
    depends_on("nccl", when="+nccl")
    depends_on("cudnn@9:", when="+cudnn")
    depends_on("googletest", type="test")

    # C++20 (std::format-free, but concepts and ranges): GCC 11 or newer.
    conflicts("%gcc@:10", msg="aiscale needs C++20: GCC 11 or newer")
    conflicts("+cuda cuda_arch=none", msg="name the GPUs' architecture: cuda_arch=90 (H100/H200), 80 (A100)")

    def cmake_args(self):
        spec = self.spec
        args = [
            self.define("AISCALE_CUDA", "ON" if spec.satisfies("+cuda") else "OFF"),
            self.define("BUILD_TESTING", self.run_tests),
            # Without +mpi the build must not pick up an MPI that happens to be on the path.
            self.define("CMAKE_DISABLE_FIND_PACKAGE_MPI", spec.satisfies("~mpi")),
        ]
        if spec.satisfies("+cuda"):
            args.append(self.define("CMAKE_CUDA_COMPILER", spec["cuda"].prefix.bin.nvcc))
            args.append(self.define("CMAKE_CUDA_ARCHITECTURES", spec.variants["cuda_arch"].value))
            args.append(self.define_from_variant("AISCALE_WITH_CUDNN", "cudnn"))
        return args
