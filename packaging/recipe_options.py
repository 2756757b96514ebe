#!/usr/bin/env python3
"""The CMake options of the Spack and EasyBuild recipes, for their checks in CI
(scripts/check_packaging.sh), without Spack or EasyBuild installed.

  recipe_options.py args spack|easybuild cpu|cuda   the -D options the recipe passes
  recipe_options.py check CMakeLists.txt             every option of every recipe and
                                                     variant is one the project declares

Spack's package.py is run against a small stand-in of `spack.package` that records what
cmake_args() returns for a given set of variants; an easyconfig is run as the Python it
is and its configopts split like a shell would.
"""
import os
import re
import shlex
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
SPACK_RECIPE = os.path.join(HERE, "spack", "packages", "aiscale", "package.py")
EASYCONFIGS = {
    "cpu": os.path.join(HERE, "easybuild", "aiscale-0.1.0-gompi-2024a.eb"),
    "cuda": os.path.join(HERE, "easybuild", "aiscale-0.1.0-gompi-2024a-CUDA-12.6.0.eb"),
}
# The variants of each build: Spack's defaults with and without +cuda.
VARIANTS = {
    "cpu": {"cuda": False, "mpi": True, "openblas": True, "cuda_arch": "none"},
    "cuda": {"cuda": True, "mpi": True, "openblas": True, "nccl": True, "cudnn": True,
             "cuda_arch": "90"},
}
# CMake's own variables a recipe may set; anything else must be declared by the project.
CMAKE_VARIABLES = {"BUILD_TESTING", "CMAKE_BUILD_TYPE", "CMAKE_CUDA_COMPILER",
                   "CMAKE_CUDA_ARCHITECTURES", "CMAKE_INSTALL_PREFIX"}


class _Prefix(str):
    def __getattr__(self, name):
        return _Prefix(os.path.join(self, name))


class _Spec:
    """What cmake_args() asks of a spec: satisfies('+v' / '~v'), variants, spec['dep']."""

    def __init__(self, variants):
        self._variants = variants
        self.variants = {k: types.SimpleNamespace(value=v) for k, v in variants.items()}

    def satisfies(self, constraint):
        for word in constraint.split():
            m = re.fullmatch(r"([+~])(\w+)", word)
            if not m:
                raise ValueError(f"recipe_options.py: constraint '{word}' is not +variant or ~variant")
            if bool(self._variants.get(m.group(2), False)) != (m.group(1) == "+"):
                return False
        return True

    def __getitem__(self, dependency):
        return types.SimpleNamespace(prefix=_Prefix(f"/spack/opt/{dependency}"))


def _cmake_value(value):
    if isinstance(value, bool):
        return "BOOL", "ON" if value else "OFF"
    if isinstance(value, (list, tuple)):
        return "STRING", ";".join(str(v) for v in value)
    return "STRING", str(value)


def _spack_module():
    """A stand-in of spack.package: the directives record nothing, define() formats like Spack."""
    module = types.ModuleType("spack.package")

    class CMakePackage:
        run_tests = False

        def define(self, name, value):
            kind, text = _cmake_value(value)
            return f"-D{name}:{kind}={text}"

        def define_from_variant(self, name, variant):
            return self.define(name, self.spec.variants[variant].value)

    def directive(*args, **kwargs):
        return None

    module.CMakePackage = CMakePackage
    module.CudaPackage = type("CudaPackage", (), {})
    for name in ("version", "variant", "depends_on", "conflicts", "generator", "license",
                 "maintainers", "requires", "patch", "provides"):
        setattr(module, name, directive)
    module.__all__ = [n for n in dir(module) if not n.startswith("_")]
    return module


def spack_args(build):
    spack = types.ModuleType("spack")
    spack.package = _spack_module()
    sys.modules["spack"], sys.modules["spack.package"] = spack, spack.package
    namespace = {}
    with open(SPACK_RECIPE) as f:
        exec(compile(f.read(), SPACK_RECIPE, "exec"), namespace)
    package = namespace["Aiscale"]()
    package.spec = _Spec(VARIANTS[build])
    return [str(a) for a in package.cmake_args()]


def easybuild_args(build):
    namespace = {"SYSTEM": {"name": "system", "version": "system"}}
    with open(EASYCONFIGS[build]) as f:
        exec(compile(f.read(), EASYCONFIGS[build], "exec"), namespace)
    if namespace.get("easyblock") != "CMakeMake":
        sys.exit(f"recipe_options.py: {EASYCONFIGS[build]}: easyblock must be 'CMakeMake'")
    # EasyBuild's templates stand for values it knows at build time; give them examples.
    opts = namespace["configopts"] % {"cuda_cc_cmake": "90;80"}
    return shlex.split(opts)


def option_name(arg):
    m = re.fullmatch(r"-D([A-Za-z_][A-Za-z0-9_]*)(:[A-Z]+)?=.*", arg)
    if not m:
        sys.exit(f"recipe_options.py: '{arg}' is not a -DNAME=VALUE option")
    return m.group(1)


def declared_options(cmakelists):
    """option(NAME ...) and set(NAME ... CACHE ...) of the project, and the packages it finds."""
    text = open(cmakelists).read()
    names = set(re.findall(r"^\s*option\(\s*(\w+)", text, re.M))
    names |= set(re.findall(r"^\s*set\(\s*(\w+)[^)]*\bCACHE\b", text, re.M))
    found = set(re.findall(r"^\s*find_package\(\s*(\w+)", text, re.M))
    return names, found


def check(cmakelists):
    names, found = declared_options(cmakelists)
    bad = []
    for recipe, fn in (("spack", spack_args), ("easybuild", easybuild_args)):
        for build in ("cpu", "cuda"):
            for arg in fn(build):
                name = option_name(arg)
                m = re.fullmatch(r"CMAKE_DISABLE_FIND_PACKAGE_(\w+)", name)
                ok = (name in names or name in CMAKE_VARIABLES or (m and m.group(1) in found))
                if not ok:
                    bad.append(f"{recipe} {build}: {arg}")
            print(f"recipe_options: {recipe} {build}: {' '.join(fn(build))}")
    if bad:
        sys.exit("recipe_options.py: options that " + cmakelists + " does not declare "
                 "(option() or a CACHE variable) and that are not CMake's own:\n  " +
                 "\n  ".join(bad))
    print(f"recipe_options: every option is declared by {cmakelists} or is CMake's own")


def main(argv):
    if len(argv) == 3 and argv[0] == "args" and argv[1] in ("spack", "easybuild") and argv[2] in VARIANTS:
        print("\n".join((spack_args if argv[1] == "spack" else easybuild_args)(argv[2])))
    elif len(argv) == 2 and argv[0] == "check":
        check(argv[1])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
