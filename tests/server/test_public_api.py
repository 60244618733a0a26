import brisvox
import brisvox.server


def test_the_public_api_of_server_is_exactly_this() -> None:
    assert sorted(brisvox.server.__all__) == [
        "AgentDefinition", "AgentFileError", "AtCapacity", "CallEndpoint",
        "Problem", "ProviderChoice", "Refusal", "ServerMetrics", "SessionCancel", "SessionEnded",
        "SessionManager", "SessionOutcome", "SessionRunner", "SessionSlot", "Settings", "SettingsError",
        "ShutdownOutcome", "ShutdownPolicy", "ShutdownReport", "ShuttingDown", "StopRequests", "ToolSet",
        "build_app", "drain_on_stop", "load_agent_file", "parse_agent_file",
    ]



def test_the_ui_relay_exports_exactly_this() -> None:
    import brisvox.server.ui_relay

    assert brisvox.server.ui_relay.__all__ == ["UiRelay", "bind_screen"]
