import brisvox.transport.rtvi


def test_the_rtvi_package_exports_exactly_its_public_api() -> None:
    assert brisvox.transport.rtvi.__all__ == [
        "Action", "AppEvent", "CallUi", "InboundAudio", "InboundFrame", "InboundMessage", "InboundText", "RtviCall",
        "RtviConfig", "UiContract", "UiError", "UiErrorKind", "UiEventError", "WireError",
        "WireErrorKind", "decode_frame", "encode_audio", "encode_message", "run_rtvi_call",
        "typescript_types",
    ]
