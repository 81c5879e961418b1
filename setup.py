"""Builds the Cython kernels: idemcore/kernels/<stem>.pyx becomes the extension idemcore.kernels.<stem>.

Each .pyx sits beside its pure-Python twin and its .pyi stub; pyx/ holds the
Cython declarations they share (kernel codes, sequence arithmetic).
"""

from pathlib import Path

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

HERE = Path(__file__).parent
extensions = [
    Extension(
        f"idemcore.kernels.{source.stem}",
        [str(source.relative_to(HERE))],
        include_dirs=[numpy.get_include()],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        extra_compile_args=["-O3"],
    )
    for source in sorted((HERE / "idemcore" / "kernels").glob("*.pyx"))
]

setup(ext_modules=cythonize(extensions, include_path=[str(HERE / "pyx")],
                            compiler_directives={"language_level": "3"}))
