import brisvox.inference


def test_the_inference_package_exports_exactly_its_public_api() -> None:
    assert sorted(brisvox.inference.__all__) == [
        "EnergyScorer",
        "InferenceError",
        "InferenceFailed",
        "InferencePool",
        "Lane",
        "ModelError",
        "ModelFile",
        "ModelHashMismatch",
        "ModelNotFound",
        "PoolClosed",
        "PoolConfig",
        "PoolFull",
        "PoolRefused",
        "PoolStats",
        "SileroModel",
        "SileroScorer",
        "VadEvent",
        "VadParams",
        "VadTracker",
        "VoiceActivityDetector",
        "WheelMember",
        "WindowScorer",
        "fetch_models",
        "model_dir",
        "model_path",
        "register_model",
        "require_model",
        "start_turn_executor",
    ]
