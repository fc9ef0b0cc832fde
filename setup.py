"""The optional C extension `wikiprep._speedups`; everything else about the package is in pyproject.toml.

`optional=True`: where no C compiler is found the install still succeeds and wikiprep runs its
pure-Python paths, which write the same bytes, slower (README, "Speed").
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("wikiprep._speedups", ["wikiprep/_speedups.c"], optional=True)])
