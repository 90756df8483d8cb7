"""The values FP8's settings may take (FP8_BACKEND, FP8_RECIPE, FP8_CASTS), in a module that imports nothing:
the one part of `training.fp8` the shared config code (`training.common.config`) reads to check them. What
the values do, and which backend `auto` picks on a machine, is the package's (`training.fp8`), above common.
(Importing it runs the package's `__init__`, torch and all, as any submodule's import does: the layering is
of the code, the import order is Python's.)
"""

BACKENDS = ("auto", "te", "torchao", "native")  # FP8_BACKEND
RECIPES = ("tensorwise", "rowwise")  # FP8_RECIPE (torchao)
CASTS = ("auto", "pytorch")  # FP8_CASTS (native)
AMAX_ALGOS = ("most_recent", "max")  # FP8_AMAX_ALGO (delayed scaling: native, te)
