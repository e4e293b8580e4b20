"""Builds wtx._wtx (python/src/, pybind11) with CMake for the interpreter running pip.

    pip install --no-build-isolation .

The CMake build folder is $WTX_CMAKE_BUILD_DIR when set (an existing build of this clone: only
what changed is rebuilt), else build/pip-<python tag> in the clone. $CMAKE_ARGS adds options
(e.g. -DCMAKE_CUDA_COMPILER=... or -DWTX_CUDA=OFF). Everything else is plain setuptools
(pyproject.toml): the pure-Python files of python/wtx/, the .pyi stubs and py.typed.
"""

import os
import shlex
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))


def _cached(build_dir, name):
    """A variable of build_dir's CMakeCache.txt, or None."""
    try:
        with open(os.path.join(build_dir, "CMakeCache.txt")) as f:
            for line in f:
                if line.startswith(name + ":"):
                    return line.split("=", 1)[1].strip()
    except OSError:
        return None
    return None


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        tag = sysconfig.get_config_var("SOABI") or "py%d%d" % sys.version_info[:2]
        build_dir = os.environ.get("WTX_CMAKE_BUILD_DIR") or os.path.join(HERE, "build",
                                                                           "pip-" + tag)
        os.makedirs(build_dir, exist_ok=True)
        configure = ["cmake", "-S", HERE, "-B", build_dir, "-DWTX_PYTHON=ON"]
        cached = _cached(build_dir, "Python3_EXECUTABLE")
        if cached is None:
            configure.append("-DCMAKE_BUILD_TYPE=Release")
        # A virtual environment's python is the same interpreter as the one it was made from:
        # an existing build for that interpreter is kept (no reconfigure, no rebuild).
        if cached is None or os.path.realpath(cached) != os.path.realpath(sys.executable):
            configure.append("-DPython3_EXECUTABLE=" + sys.executable)
        configure += shlex.split(os.environ.get("CMAKE_ARGS", ""))
        subprocess.check_call(configure)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 2)
        # The installable build of the extension: no fault injection (cmake/wtx_python.cmake).
        subprocess.check_call(["cmake", "--build", build_dir, "--target",
                               "wtx_python_installable", "--parallel", jobs])
        built = os.path.join(build_dir, "python-installable", "wtx")
        sos = [f for f in os.listdir(built) if f.startswith("_wtx") and f.endswith(".so")]
        if len(sos) != 1:
            raise RuntimeError("expected one _wtx*.so in %s, found %s" % (built, sos))
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(os.path.join(built, sos[0]), dest)


setup(ext_modules=[CMakeExtension("wtx._wtx")], cmdclass={"build_ext": CMakeBuild})
