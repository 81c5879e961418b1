"""Builds the Cython kernels: pyx/<stem>.pyx becomes the extension idemcore._kernels.<stem>."""

from pathlib import Path

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

HERE = Path(__file__).parent
extensions = [
    Extension(
        f"idemcore._kernels.{source.stem}",
        [str(source.relative_to(HERE))],
        include_dirs=[numpy.get_include()],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        extra_compile_args=["-O3"],
    )
    for source in sorted((HERE / "pyx").glob("*.pyx"))
]

setup(ext_modules=cythonize(extensions, compiler_directives={"language_level": "3"}))
