import brisvox.transport


def test_the_transport_package_exports_exactly_its_public_api() -> None:
    assert brisvox.transport.__all__ == [
        "CallEnds", "CallFailure", "CallInfo", "CallLink", "CallRates", "CallerAudio", "Channel", "Clear", "CommandSender",
        "Dtmf", "FailureKind", "Heard", "ItemPolicy", "LoopbackClient", "LoopbackConfig", "LoopbackTransport", "Mark",
        "MarkCleared", "MarkPlayed", "Overflow", "PlaybackLead", "PlaybackPosition", "SendAudio",
        "SessionConfig", "Started", "Stop", "StopReason", "Stopped", "Transport", "TransportCommand",
        "TransportError", "TransportEvent", "TransportSession", "call_pair",
    ]
