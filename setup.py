"""The optional C extensions `wikiprep._speedups` and `shardkit._examples`; everything else about the package is
in pyproject.toml.

`optional=True`: where no C compiler is found the install still succeeds and wikiprep runs its
pure-Python paths, which write the same bytes, slower (README, "Speed"); shardkit's batch decoder
likewise gives the same arrays in Python.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("wikiprep._speedups", ["wikiprep/_speedups.c"], optional=True),
                   Extension("shardkit._examples", ["shardkit/_examples.c"], optional=True)])
