import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.protocol.framing import FrameDecoder, FrameTooLargeError


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def test_frames_split_across_reads_come_out_whole_and_in_order() -> None:
    data = frame(b"first") + frame(b"") + frame(b"third one")
    decoder = FrameDecoder(max_size=1024)
    out: list[bytes] = []
    for i in range(len(data)):
        out += decoder.feed(data[i : i + 1])
    assert out == [b"first", b"", b"third one"]
    assert decoder.buffered == 0


def test_many_frames_in_one_read() -> None:
    decoder = FrameDecoder(max_size=1024)
    assert decoder.feed(frame(b"a") + frame(b"bc") + frame(b"d")[:3]) == [b"a", b"bc"]
    assert decoder.feed(frame(b"d")[3:]) == [b"d"]


@pytest.mark.parametrize("size", [1025, 2**31 - 1, -1])
def test_oversize_or_negative_size_is_refused_before_buffering(size: int) -> None:
    decoder = FrameDecoder(max_size=1024)
    with pytest.raises(FrameTooLargeError):
        decoder.feed(struct.pack(">i", size) + b"xx")


@pytest.mark.parametrize("cut", [0, 1, 3, 4, 5, 11])
def test_one_frame_per_read_and_every_split_point(cut: int) -> None:
    """Whole frames one per read (the decoder's shortcut) mixed with frames split anywhere,
    including right after the size prefix (nothing buffered, the payload still owed)."""
    # the second payload starts with what looks like a size prefix of the rest of it
    first, second, third = frame(b"payload-one"), frame(struct.pack(">i", 3) + b"two"), frame(b"3")
    decoder = FrameDecoder(max_size=1024)
    out = decoder.feed(first)
    out += decoder.feed(second[:cut])
    out += decoder.feed(second[cut:])
    out += decoder.feed(third)
    assert out == [b"payload-one", struct.pack(">i", 3) + b"two", b"3"]
    assert decoder.buffered == 0
    assert decoder.feed(frame(b"x" * 1020)) == [b"x" * 1020]
    with pytest.raises(FrameTooLargeError):
        decoder.feed(frame(b"x" * 1025))


def test_a_large_frame_over_many_reads_is_collected_and_joined() -> None:
    """A frame arriving over many reads (a 1 MB Produce request over uvloop's 256 kB reads):
    collected piece by piece, the frame after it still found in the last piece."""
    big = bytes(range(256)) * 4096  # 1 MiB
    data = frame(big) + frame(b"next") + frame(b"and")[:5]
    decoder = FrameDecoder(max_size=2 << 20)
    out: list[bytes] = []
    for i in range(0, len(data), 256_000):
        out += decoder.feed(data[i : i + 256_000])
        if not out:
            assert decoder.buffered == min(i + 256_000, len(data)) - 4
    assert out == [big, b"next"]
    assert decoder.buffered == 1
    assert decoder.feed(b"nd") == [b"and"]
    assert decoder.buffered == 0


@given(payloads=st.lists(st.binary(max_size=3000), max_size=8),
       cuts=st.lists(st.integers(min_value=0, max_value=30_000), max_size=12),
       kind=st.sampled_from([bytes, bytearray, memoryview]))  # fmt: skip
@settings(max_examples=300, deadline=None)
def test_any_split_of_any_frames_gives_the_frames(payloads: list[bytes], cuts: list[int],
                                                   kind: type) -> None:  # fmt: skip
    """Whatever the reads' boundaries and the buffer type a caller passes (bytes are held while
    a large frame is collected; a mutable buffer is copied, then overwritten here to prove
    it), the frames come out whole and in order."""
    data = b"".join(frame(p) for p in payloads)
    points = sorted({c for c in cuts if c < len(data)} | {0, len(data)})
    decoder = FrameDecoder(max_size=4096)
    out: list[bytes] = []
    for a, b in zip(points, points[1:], strict=False):
        piece = bytearray(data[a:b])
        arg = bytes(piece) if kind is bytes else piece if kind is bytearray else memoryview(piece)
        out += decoder.feed(arg)
        piece[:] = b"\xee" * len(piece)  # the caller reuses its buffer
    assert out == payloads
    assert decoder.buffered == 0
