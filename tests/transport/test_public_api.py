import brisvox.transport


def test_the_transport_package_exports_exactly_its_public_api() -> None:
    assert brisvox.transport.__all__ == [
        "CallEnds", "CallFailure", "CallInfo", "CallLink", "CallRates", "CallerAudio", "Clear", "CommandSender",
        "Dtmf", "FailureKind", "Heard", "LoopbackClient", "LoopbackConfig", "LoopbackTransport", "Mark",
        "MarkCleared", "MarkPlayed", "PlaybackLead", "PlaybackPosition", "SendAudio",
        "SessionConfig", "Started", "Stop", "StopReason", "Stopped", "Transport", "TransportCommand",
        "TransportError", "TransportEvent", "TransportSession", "call_pair",
    ]


def test_the_telephony_and_twilio_packages_export_exactly_their_public_api() -> None:
    import brisvox.transport.telephony
    import brisvox.transport.twilio

    assert brisvox.transport.telephony.__all__ == [
        "DEFAULT_MAX_MARKS", "CarrierProtocolError", "Echo", "FaultKind", "MarkBook", "MarkKind", "UpgradeRefusal",
        "b64decode", "b64encode", "decode_media", "lenient_int", "secret_equal",
    ]
    assert brisvox.transport.twilio.__all__ == [
        "OutboundEncoder", "TwilioConfig", "TwilioStats", "parse_message", "run_call",
        "signature", "signature_valid",
    ]


def test_the_telnyx_package_exports_exactly_its_public_api() -> None:
    import brisvox.transport.telnyx

    assert brisvox.transport.telnyx.__all__ == [
        "AUTH_HEADER", "CallRegistry", "Codec", "DtmfOrder", "HangupHook", "OutboundEncoder", "Reorder",
        "TelnyxConfig", "TelnyxStats", "parse_message", "run_call",
    ]


def test_the_webrtc_package_exports_exactly_its_public_api() -> None:
    import brisvox.transport.webrtc

    assert brisvox.transport.webrtc.__all__ == [
        "EndReason", "OfferRejected", "WebRtcCall", "WebRtcConfig", "WebRtcStats", "answer_offer", "host_addresses",
    ]
