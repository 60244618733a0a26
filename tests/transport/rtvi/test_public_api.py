import brisvox.transport.rtvi


def test_the_rtvi_package_exports_exactly_its_public_api() -> None:
    assert brisvox.transport.rtvi.__all__ == [
        "InboundAudio", "InboundFrame", "InboundMessage", "InboundText", "RtviCall", "RtviConfig", "WireError", "WireErrorKind",
        "decode_frame", "encode_audio", "encode_message", "run_rtvi_call",
    ]
