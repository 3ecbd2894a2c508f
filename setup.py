"""Build of the optional compiled parts (everything else is in pyproject.toml).

* ``evotensor.tree._speedups`` (C): the hot paths of ``Tree``.
* ``evotensor.gp._native`` (C++17): the native CPU evaluator of GP forests, an XLA FFI handler. It
  needs jaxlib's FFI headers at build time (``jaxlib`` is a build requirement in pyproject.toml; the
  Makefile pins it to the runtime version through ``PIP_CONSTRAINT``) and records the jaxlib version
  it was built against, which ``evotensor.gp.native`` checks at import.

Both are ``optional=True``: without a compiler (or without the headers), the build prints a warning
and the install goes on; ``evotensor.tree`` then runs its pure-Python code (``evotensor.tree.SPEEDUPS``
is False) and GP evaluation its plain-JAX path (``evotensor.gp.native.AVAILABLE`` is False).
"""

import importlib.metadata
import importlib.util
import os

from setuptools import Extension, setup


def _jaxlib_include():
    """jaxlib's header directory and version, or (None, None) if jaxlib is not importable here."""
    spec = importlib.util.find_spec("jaxlib")
    if spec is None or not spec.submodule_search_locations:
        return None, None
    include = os.path.join(list(spec.submodule_search_locations)[0], "include")
    if not os.path.isfile(os.path.join(include, "xla", "ffi", "api", "ffi.h")):
        return None, None
    return include, importlib.metadata.version("jaxlib")


extensions = [
    Extension("evotensor.tree._speedups", sources=["src/evotensor/tree/_speedups.c"], optional=True)
]
include, jaxlib_version = _jaxlib_include()
if include is not None:
    extensions.append(
        Extension(
            "evotensor.gp._native",
            sources=["src/evotensor/gp/_native.cc"],
            include_dirs=[include],
            language="c++",
            # -fno-trapping-math lets GCC vectorize loops with float compares; results are unchanged
            extra_compile_args=[
                "-std=c++17",
                "-O3",
                "-fno-trapping-math",
                "-Wno-attributes",
                "-Wno-return-type",
            ],
            define_macros=[("EVOTENSOR_JAXLIB_VERSION", f'"{jaxlib_version}"')],
            optional=True,
        )
    )

setup(ext_modules=extensions)
