import struct

import pytest

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
