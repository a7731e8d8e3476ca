"""Build configuration beyond pyproject.toml: strom's one C extension, the native record codec.

``optional=True``: where there is no C compiler (or no Python headers) the build prints a
warning and strom installs without it, running on the pure-Python record walk that gives the
same answers (``strom.protocol.records``; ``python -c "import strom.protocol.records as r;
print(r.IMPLEMENTATION)"`` says which one is in use).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "strom.protocol._records_native",
            ["src/strom/protocol/_records_native.c"],
            optional=True,
        )
    ]
)
