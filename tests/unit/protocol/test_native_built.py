"""The test run must have the native record codec: CI installs strom where a C compiler is
present (README's command), and a silently missing extension would leave every "native" run
of the record-walk tests on the Python fallback. (Not skipped when it is missing: that is the
failure this test exists for.)"""

from __future__ import annotations

from strom.protocol import records


def test_the_native_codec_is_built() -> None:
    assert records.NATIVE_AVAILABLE, (
        "strom.protocol._records_native was not built: pip install -e . with gcc and the "
        "Python headers present"
    )
