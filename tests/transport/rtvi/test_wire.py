import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brisvox.transport.rtvi import frames_pb2
from brisvox.transport.rtvi.wire import (
    InboundAudio,
    InboundMessage,
    InboundText,
    WireError,
    WireErrorKind,
    decode_frame,
    encode_audio,
    encode_message,
)

PROTO_DIR = Path(frames_pb2.__file__).parent


def _density_client_audio(pcm: bytes, rate: int) -> bytes:
    """The hand-written encoder of bench/pipecat_density_client.py (the client Pipecat is measured with)."""
    path = Path(__file__).resolve().parents[3] / "bench" / "pipecat_density_client.py"
    spec = importlib.util.spec_from_file_location("pipecat_density_client", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.SR = rate
    data: bytes = module.encode_audio(pcm)
    return data


def test_the_density_clients_hand_encoded_audio_decodes_as_audio() -> None:
    pcm = bytes(range(256)) * 2
    assert decode_frame(_density_client_audio(pcm, 16000)) == InboundAudio(pcm, 16000)


def test_audio_is_encoded_with_pipecats_field_numbers() -> None:
    data = encode_audio(b"\x01\x00\x02\x00", 24000)
    # Frame.audio = field 2 (length-delimited); inside: audio=3, sample_rate=4, num_channels=5
    assert data[0] == 0x12
    assert b"\x1a\x04\x01\x00\x02\x00" in data and b"\x20\xc0\xbb\x01" in data and data.endswith(b"\x28\x01")
    assert decode_frame(data) == InboundAudio(b"\x01\x00\x02\x00", 24000)


def test_a_message_is_field_4_with_the_rtvi_label() -> None:
    data = encode_message({"type": "bot-ready", "id": "r1", "data": {"version": "1.0.0"}})
    assert data[0] == 0x22
    frame = frames_pb2.Frame.FromString(data)
    assert json.loads(frame.message.data) == {
        "label": "rtvi-ai", "type": "bot-ready", "id": "r1", "data": {"version": "1.0.0"}}
    assert decode_frame(data) == InboundMessage("bot-ready", "r1", {"version": "1.0.0"})


def test_text_and_transcription_frames_decode_as_text() -> None:
    text = frames_pb2.Frame(text=frames_pb2.TextFrame(text="hi"))
    tr = frames_pb2.Frame(transcription=frames_pb2.TranscriptionFrame(text="yo", user_id="u"))
    assert decode_frame(text.SerializeToString()) == InboundText("hi")
    assert decode_frame(tr.SerializeToString()) == InboundText("yo")


@pytest.mark.parametrize(("data", "kind"), [
    (b"\xff\xff\xff", WireErrorKind.NOT_PROTOBUF),
    (b"", WireErrorKind.EMPTY),
    (frames_pb2.Frame(audio=frames_pb2.AudioRawFrame(audio=b"\x00", sample_rate=16000)).SerializeToString(),
     WireErrorKind.BAD_AUDIO),
    (frames_pb2.Frame(audio=frames_pb2.AudioRawFrame(audio=b"\x00\x00")).SerializeToString(),
     WireErrorKind.BAD_AUDIO),
    (frames_pb2.Frame(audio=frames_pb2.AudioRawFrame(audio=b"\x00\x00", sample_rate=16000, num_channels=2))
     .SerializeToString(), WireErrorKind.BAD_AUDIO),
    (frames_pb2.Frame(message=frames_pb2.MessageFrame(data="not json")).SerializeToString(),
     WireErrorKind.BAD_MESSAGE),
    (frames_pb2.Frame(message=frames_pb2.MessageFrame(data="[1]")).SerializeToString(), WireErrorKind.BAD_MESSAGE),
    (frames_pb2.Frame(message=frames_pb2.MessageFrame(data="[" * 5000)).SerializeToString(),
     WireErrorKind.BAD_MESSAGE),
    (frames_pb2.Frame(message=frames_pb2.MessageFrame(data='{"type":"x","data":' + "[" * 20 + "]" * 20 + "}"))
     .SerializeToString(), WireErrorKind.BAD_MESSAGE),
])
def test_a_bad_frame_is_a_typed_error_naming_its_kind(data: bytes, kind: WireErrorKind) -> None:
    with pytest.raises(WireError) as info:
        decode_frame(data)
    assert info.value.kind is kind


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=512))
def test_fuzzed_bytes_decode_or_raise_a_wire_error(data: bytes) -> None:
    try:
        got = decode_frame(data)
    except WireError as exc:
        assert exc.message
    else:
        assert isinstance(got, InboundAudio | InboundMessage | InboundText)


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                     lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=4), kids, max_size=3),
                     max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=200), _json.map(json.dumps),
                 st.fixed_dictionaries({"type": st.text(max_size=10)}, optional={"id": _json, "data": _json})
                 .map(json.dumps)))
def test_fuzzed_message_payloads_decode_or_raise_a_wire_error(text: str) -> None:
    data = frames_pb2.Frame(message=frames_pb2.MessageFrame(data=text)).SerializeToString()
    try:
        got = decode_frame(data)
    except WireError as exc:
        assert exc.kind is WireErrorKind.BAD_MESSAGE
    else:
        assert isinstance(got, InboundMessage)


@pytest.mark.skipif(importlib.util.find_spec("grpc_tools") is None,
                    reason="grpcio-tools (the test extra) is not installed: cannot regenerate frames_pb2.py")
def test_the_generated_module_in_the_tree_is_what_protoc_makes_of_frames_proto(tmp_path: Path) -> None:
    shutil.copy(PROTO_DIR / "frames.proto", tmp_path / "frames.proto")
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{tmp_path}", f"--python_out={tmp_path}",
                    f"--pyi_out={tmp_path}", str(tmp_path / "frames.proto")], check=True)
    for name in ("frames_pb2.py", "frames_pb2.pyi"):
        assert (tmp_path / name).read_text() == (PROTO_DIR / name).read_text(), f"{name} is stale: make rtvi-proto"
