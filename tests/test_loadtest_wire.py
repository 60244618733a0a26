"""The load client's wire: its frames and handshake against websockets' own server protocol,
the server-frame parser and the audio reader (fuzzed, and against protobuf's parser)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from websockets.frames import Frame, Opcode
from websockets.http11 import Request
from websockets.server import ServerProtocol

from brisvox.loadtest_wire import (
    Kind,
    ServerBytesError,
    ServerFrames,
    client_frame,
    frame_audio,
    handshake_request,
    parse_handshake,
)
from brisvox.transport.rtvi import frames_pb2
from brisvox.transport.rtvi.wire import encode_audio, encode_message

KEY = "dGhlIHNhbXBsZSBub25jZQ=="


def _server_after_handshake() -> tuple[ServerProtocol, bytes]:
    """websockets' server protocol fed our opening request; (it, the response bytes it wrote)."""
    server = ServerProtocol()
    server.receive_data(handshake_request("127.0.0.1:8765", "/rtvi", KEY))
    [request] = server.events_received()
    assert isinstance(request, Request) and request.path == "/rtvi"
    server.send_response(server.accept(request))
    return server, b"".join(server.data_to_send())


def test_websockets_accepts_our_handshake_and_we_accept_its_answer() -> None:
    _, response = _server_after_handshake()
    head, _, _ = response.partition(b"\r\n\r\n")
    parse_handshake(head, KEY)
    with pytest.raises(ServerBytesError, match="does not answer our key"):
        parse_handshake(head, "AAAAAAAAAAAAAAAAAAAAAA==")
    with pytest.raises(ServerBytesError, match="refused the WebSocket upgrade"):
        parse_handshake(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0", KEY)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=70_000), st.binary(min_size=4, max_size=4))
def test_a_masked_client_frame_reaches_websockets_as_the_same_bytes(payload: bytes, mask: bytes) -> None:
    server, _ = _server_after_handshake()
    server.receive_data(client_frame(Kind.BINARY, payload, mask))
    [frame] = server.events_received()
    assert isinstance(frame, Frame) and frame.opcode is Opcode.BINARY and frame.data == payload and frame.fin


def _server_bytes(frames: list[Frame]) -> bytes:
    return b"".join(frame.serialize(mask=False) for frame in frames)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([Opcode.BINARY, Opcode.TEXT, Opcode.PING]), st.binary(max_size=300)),
                max_size=8), st.lists(st.integers(min_value=1, max_value=400), max_size=10))
def test_server_frames_are_read_whole_whatever_the_socket_split(messages: list[tuple[Opcode, bytes]],
                                                               cuts: list[int]) -> None:
    frames = [Frame(op, data[:125] if op is Opcode.PING else data) for op, data in messages]
    wire = _server_bytes(frames)
    parser, got, pos = ServerFrames(), [], 0
    for cut in [*cuts, len(wire)]:
        got += parser.feed(wire[pos : pos + cut])
        pos += cut
    got += parser.feed(wire[pos:])
    assert [(int(m.kind), bytes(m.payload)) for m in got] == [(int(f.opcode), f.data) for f in frames]


def test_a_fragmented_message_is_joined_and_control_frames_pass_between_its_fragments() -> None:
    wire = _server_bytes([Frame(Opcode.BINARY, b"ab", fin=False), Frame(Opcode.PING, b"p"),
                          Frame(Opcode.CONT, b"cd", fin=False), Frame(Opcode.CONT, b"ef")])
    got = ServerFrames().feed(wire)
    assert [(m.kind, bytes(m.payload)) for m in got] == [(Kind.PING, b"p"), (Kind.BINARY, b"abcdef")]


@pytest.mark.parametrize(("wire", "rule"), [
    (b"\x82\x81abcdx", "masked"),
    (b"\xc2\x00", "reserved bits"),
    (b"\x83\x00", "unknown opcode"),
    (b"\x09\x00", "fragmented or longer than 125"),
    (b"\x89\x7e\x00\x7e" + bytes(126), "fragmented or longer than 125"),
    (b"\x80\x00", "continuation frame with no message"),
    (b"\x02\x01a\x82\x01b", "inside a fragmented one"),
    (b"\x82\x7f" + (1 << 40).to_bytes(8, "big"), "more than"),
])
def test_a_server_frame_that_breaks_the_protocol_is_refused_by_name(wire: bytes, rule: str) -> None:
    with pytest.raises(ServerBytesError, match=rule):
        ServerFrames().feed(wire)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.binary(max_size=200), max_size=6))
def test_fuzz_any_server_bytes_give_messages_or_a_named_protocol_error(chunks: list[bytes]) -> None:
    parser = ServerFrames()
    try:
        for chunk in chunks:
            for message in parser.feed(chunk):
                assert isinstance(message.kind, Kind) and message.kind is not Kind.CONTINUATION
    except ServerBytesError:
        return


def _pb_audio(data: bytes) -> tuple[bytes, int] | None:
    frame = frames_pb2.Frame()
    frame.ParseFromString(data)
    if frame.WhichOneof("frame") != "audio":
        return None
    return frame.audio.audio, frame.audio.sample_rate


_one_frame = st.one_of(
    st.builds(encode_audio, st.binary(max_size=64), st.integers(min_value=0, max_value=2**32 - 1)),
    st.builds(lambda t: encode_message({"type": t}), st.text(max_size=20)),
    st.builds(lambda t: frames_pb2.Frame(text=frames_pb2.TextFrame(text=t)).SerializeToString(), st.text(max_size=10)),
    st.builds(lambda a: frames_pb2.Frame(audio=frames_pb2.AudioRawFrame(audio=a, pts=7)).SerializeToString(),
              st.binary(max_size=16)),
    st.builds(lambda r: frames_pb2.Frame(audio=frames_pb2.AudioRawFrame(sample_rate=r)).SerializeToString(),
              st.integers(min_value=1, max_value=48000)),
)


@settings(max_examples=500, deadline=None)
@given(st.lists(_one_frame, min_size=1, max_size=4))
def test_frame_audio_agrees_with_protobuf_on_frames_and_their_merges(parts: list[bytes]) -> None:
    data = b"".join(parts)  # concatenated messages are one merged message to protobuf
    got = frame_audio(memoryview(data))
    assert (None if got is None else (bytes(got[0]), got[1])) == _pb_audio(data)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=300))
def test_fuzz_frame_audio_gives_audio_nothing_or_a_named_error(data: bytes) -> None:
    try:
        got = frame_audio(memoryview(data))
    except ServerBytesError:
        return
    assert got is None or (isinstance(got[0], memoryview) and got[1] >= 0)
