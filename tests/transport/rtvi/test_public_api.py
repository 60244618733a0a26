import brisvox.transport.rtvi


def test_the_rtvi_package_exports_exactly_its_public_api() -> None:
    assert brisvox.transport.rtvi.__all__ == [
        "Action", "AppEvent", "CallUi", "InboundAudio", "InboundFrame", "InboundMessage", "InboundText", "RtviCall",
        "RtviConfig", "UiContract", "UiError", "UiErrorKind", "UiEventError", "WireError",
        "WireErrorKind", "decode_frame", "encode_audio", "encode_message", "run_rtvi_call",
        "typescript_types",
    ]


def test_the_ui_module_exports_exactly_its_public_api() -> None:
    import brisvox.transport.rtvi.ui as ui

    assert ui.__all__ == [
        "MAX_OPEN_NONCES", "MAX_SERVER_MESSAGE_BYTES", "Action", "AppEvent", "AppEventHandler", "CallUi", "UiAnswer",
        "UiContract", "UiError", "UiErrorKind", "UiEventError", "default_note", "server_message_data", "ui_name",
    ]


def test_a_tools_screen_takes_ui_actions_and_server_messages() -> None:
    from brisvox.agent.tools import ToolCallContext
    from brisvox.agent.ui import UiChannel

    assert {n for n in vars(UiChannel) if not n.startswith("_")} == {"dispatch", "send_message"}
    assert callable(ToolCallContext.dispatch) and callable(ToolCallContext.send_server_message)
