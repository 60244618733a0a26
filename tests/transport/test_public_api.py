import brisvox.transport


def test_the_transport_package_exports_exactly_its_public_api() -> None:
    assert brisvox.transport.__all__ == [
        "CallEnds", "CallFailure", "CallInfo", "CallLink", "CallRates", "CallerAudio", "Clear", "CommandSender",
        "Dtmf", "FailureKind", "Heard", "LoopbackClient", "LoopbackConfig", "LoopbackTransport", "Mark",
        "MarkCleared", "MarkPlayed", "PlaybackLead", "PlaybackPosition", "SendAudio",
        "SessionConfig", "Started", "Stop", "StopReason", "Stopped", "Transport", "TransportCommand",
        "TransportError", "TransportEvent", "TransportSession", "call_pair",
    ]
