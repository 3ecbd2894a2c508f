"""Build of the optional C extension ``evotensor.tree._speedups`` (everything else is in pyproject.toml).

``optional=True``: if there is no C compiler or no Python headers, the build prints a warning and
the install goes on; ``evotensor.tree`` then runs its pure-Python code (``evotensor.tree.SPEEDUPS``
is False).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "evotensor.tree._speedups",
            sources=["src/evotensor/tree/_speedups.c"],
            optional=True,
        )
    ]
)
