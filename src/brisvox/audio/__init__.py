"""brisvox.audio: PCM16 helpers, G.711 codecs, a streaming resampler and WAV files."""

from brisvox.audio.codec import AudioEncoding, decode_to_pcm16, encode_from_pcm16
from brisvox.audio.g711 import alaw_decode, alaw_encode, ulaw_decode, ulaw_encode
from brisvox.audio.pcm import (
    array_to_pcm16,
    duration_of,
    first_audible,
    float_to_pcm16,
    pcm16_to_array,
    pcm16_to_float,
    sample_count,
    samples_for,
    silence,
)
from brisvox.audio.resample import ResampleQuality, ResampleStream, resample
from brisvox.audio.wav import WavAudio, read_wav, wav_bytes, write_wav

__all__ = [
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
