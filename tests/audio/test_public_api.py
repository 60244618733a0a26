import brisvox.audio


def test_the_audio_package_exports_exactly_its_public_api() -> None:
    assert sorted(brisvox.audio.__all__) == [
        "AudioEncoding",
        "ResampleQuality",
        "ResampleStream",
        "WavAudio",
        "alaw_decode",
        "alaw_encode",
        "array_to_pcm16",
        "decode_to_pcm16",
        "duration_of",
        "encode_from_pcm16",
        "first_audible",
        "float_to_pcm16",
        "pcm16_to_array",
        "pcm16_to_float",
        "read_wav",
        "resample",
        "sample_count",
        "samples_for",
        "silence",
        "ulaw_decode",
        "ulaw_encode",
        "wav_bytes",
        "write_wav",
    ]
