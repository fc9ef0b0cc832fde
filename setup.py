"""The optional C extensions `wikiprep._speedups` and `shardkit._examples`; everything else about the package is
in pyproject.toml.

`optional=True`: where no C compiler is found the install still succeeds and wikiprep runs its
pure-Python paths, which write the same bytes, slower (docs/performance.md); shardkit's batch decoder
likewise gives the same arrays in Python.
"""

from setuptools import Extension, setup

# Both include shardkit/crc32c.h (the CRC of the TFRecord framing); `depends` rebuilds them when it changes.
_CRC32C = ["shardkit/crc32c.h"]
setup(ext_modules=[Extension("wikiprep._speedups", ["wikiprep/_speedups.c"], depends=_CRC32C, optional=True),
                   Extension("shardkit._examples", ["shardkit/_examples.c"], depends=_CRC32C, optional=True)])
