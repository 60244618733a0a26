import brisvox.core


def test_the_public_api_of_core_is_exactly_this() -> None:
    assert sorted(brisvox.core.__all__) == [
        "BrisvoxError",
        "Channel",
        "ChannelClosed",
        "Clock",
        "ConfigError",
        "DeadlineExceeded",
        "Direction",
        "EpochPolicy",
        "Frame",
        "Inbox",
        "InvalidInput",
        "Links",
        "Overflow",
        "OverflowPolicies",
        "Pipeline",
        "PipelineError",
        "Processor",
        "ProcessorContext",
        "ProcessorFailed",
        "QueueConfig",
        "RunningPipeline",
        "Secret",
        "SimClock",
        "StopTimeout",
        "SystemClock",
        "TaskScope",
        "VirtualTimeLoop",
        "run_virtual",
        "wait_for_task_baseline",
    ]
    for name in brisvox.core.__all__:
        assert getattr(brisvox.core, name) is not None
