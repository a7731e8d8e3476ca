"""Not hypothesis: ``import hypothesis`` fails in the processes the tests start.

``tests/conftest.py`` puts this directory first on the PYTHONPATH that the processes started
by the tests inherit (brokers, CLI runs, Connect workers, Spark's Python workers), never on the
path of a test process itself. kio imports hypothesis whenever it is importable, to register
strategies for its types, and hypothesis brings pytest and trio.testing along: about half a
second of CPU in every broker start and every CLI run, for nothing, as none of them uses
hypothesis. With this first on the path, kio's ``try: import hypothesis.strategies`` /
``except ImportError`` goes the way it goes where strom runs in production, without
hypothesis.
"""

raise ImportError("hypothesis is kept out of the processes strom's tests start (tests/child_site)")
