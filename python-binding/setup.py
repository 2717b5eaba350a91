"""Builds hvd._core for `pip install ./python-binding` against an installed
libhvd, found with pkg-config (hvd.pc, installed by `make install`). The
package metadata is in pyproject.toml; this file only adds what pkg-config
says: the compiler and linker flags, libhvd's directory as the extension's
run path (so a libhvd outside the linker's default path is found at import),
and hvd's version. hvd.tensorflow's op library is not built here: it comes
from configure --with-tensorflow (docs/TENSORFLOW.md)."""

import os
import shlex
import subprocess
import sys

import setuptools
from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))

# older setuptools ignore pyproject.toml's [project] and would build a
# package without a name: possible with --no-build-isolation
if int(setuptools.__version__.split(".")[0]) < 61:
    sys.exit(f"hvd: setuptools >= 61 is needed to build (this Python has {setuptools.__version__}): "
             "pip install 'setuptools>=61' wheel, or drop --no-build-isolation")


def pkg_config(*args):
    """pkg-config's answer about hvd, or a clear error and exit."""
    cmd = [os.environ.get("PKG_CONFIG", "pkg-config"), *args, "hvd"]
    try:
        out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    except FileNotFoundError:
        sys.exit("hvd: pkg-config is not installed; it finds libhvd for the build (apt-get install pkg-config)")
    except subprocess.CalledProcessError as e:
        sys.exit("hvd: pkg-config cannot find libhvd (hvd.pc): build and install hvd first (make install), "
                 "or set PKG_CONFIG_PATH to the directory holding hvd.pc, e.g. "
                 "PKG_CONFIG_PATH=/usr/local/lib/pkgconfig. pkg-config said: " + e.stderr.strip())
    return out.stdout.strip()


cflags = shlex.split(pkg_config("--cflags"))
libs = shlex.split(pkg_config("--libs"))
libdir = pkg_config("--variable=libdir")

core = Extension(
    "hvd._core",
    sources=[os.path.relpath(os.path.join(HERE, f), HERE) for f in ("hvdmodule.c", "handle.c", "prepared.c", "kept.c", "c10_counts.c", "reuse_pick.c")],
    extra_compile_args=cflags + ["-std=gnu11", "-fno-strict-aliasing"],
    extra_link_args=libs,
    runtime_library_dirs=[libdir] if libdir else [],
)

setup(version=pkg_config("--modversion"), ext_modules=[core])
