import brisvox.engine


def test_the_engine_package_exports_exactly_its_public_api() -> None:
    assert sorted(brisvox.engine.__all__) == [
        "CallFailed", "CallObserver", "CallReport", "ClipCache", "EngineConfig", "EngineEvent", "FillerClip",
        "FillerClipStore", "LlmConfig", "PlayoutBook", "Providers", "SpeculationMode", "SummaryConfig", "Timeouts",
        "render_clips",
        "run_call", "run_s2s_call",
    ]
    for name in brisvox.engine.__all__:
        assert getattr(brisvox.engine, name) is not None
