"""G.711 mu-law and A-law, vectorized with numpy, bit-exact with the ITU-T G.191 reference code.

Encoding is a lookup in a 65,536-entry table indexed by the 16-bit sample; decoding a
lookup in a 256-entry table.  Both tables are computed once, at import, by vectorized
versions of the ITU algorithms (``ulaw_compress`` / ``alaw_compress`` and their
``expand`` counterparts in the G.191 software tools library).

One detail matters when comparing with other implementations: the ITU reference takes
the one's complement of a negative sample before quantizing, so ``x`` and ``-x - 1`` share
a code.  The Sun ``g711.c`` that Python's ``audioop.lin2ulaw`` uses negates instead, which
moves 508 negative mu-law decision boundaries by one LSB.  A-law and both decoders agree
with ``audioop`` everywhere.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from brisvox.audio.pcm import PCM16_DTYPE, pcm16_to_array

__all__ = [
    "alaw_decode",
    "alaw_encode",
    "ulaw_decode",
    "ulaw_encode",
]

Uint8Array = npt.NDArray[np.uint8]
Int16Array = npt.NDArray[np.int16]


def _segment_of(values: npt.NDArray[np.int32], first_limit: int) -> npt.NDArray[np.int32]:
    """Segment number: 1 + the bit length of ``values >> log2(first_limit)`` (0 for small values)."""
    seg = np.zeros_like(values)
    shifted = values // first_limit
    while np.any(shifted):
        seg += shifted != 0
        shifted = shifted >> 1
    return seg


def _build_ulaw_encode() -> Uint8Array:
    lin = np.arange(-32768, 32768, dtype=np.int32)
    neg = lin < 0
    absno = np.where(neg, (~lin) >> 2, lin >> 2) + 33
    absno = np.minimum(absno, 0x1FFF)
    segno = 1 + _segment_of(absno, 64)
    high = 8 - segno
    low = 0xF - ((absno >> segno) & 0xF)
    code = (high << 4) | low
    code = np.where(neg, code, code | 0x80)
    table = code.astype(np.uint8)
    # Index by the sample's bit pattern as an unsigned 16-bit number.
    return np.roll(table, -32768)


def _build_ulaw_decode() -> Int16Array:
    log = np.arange(256, dtype=np.int32)
    sign = np.where(log < 0x80, -1, 1)
    mantissa = ~log
    exponent = (mantissa >> 4) & 0x7
    segment = exponent + 1
    mantissa &= 0xF
    step = 4 << segment
    lin: npt.NDArray[np.int32] = sign * ((0x80 << exponent) + step * mantissa + step // 2 - 4 * 33)
    return lin.astype(PCM16_DTYPE)


def _build_alaw_encode() -> Uint8Array:
    lin = np.arange(-32768, 32768, dtype=np.int32)
    neg = lin < 0
    ix = np.where(neg, (~lin) >> 4, lin >> 4)
    # Segment: how many halvings bring ix down to <= 31 (for ix > 15).
    big = ix > 15
    exp = np.ones_like(ix)
    m = ix.copy()
    while np.any(big & (m > 31)):
        over = big & (m > 31)
        m = np.where(over, m >> 1, m)
        exp = np.where(over, exp + 1, exp)
    code = np.where(big, (m - 16) + (exp << 4), ix)
    code = np.where(neg, code, code | 0x80)
    table = (code ^ 0x55).astype(np.uint8)
    return np.roll(table, -32768)


def _build_alaw_decode() -> Int16Array:
    log = np.arange(256, dtype=np.int32)
    ix = log ^ 0x55
    sign_pos = ix & 0x80
    ix &= 0x7F
    iexp = ix >> 4
    mant = ix & 0xF
    mant = np.where(iexp > 0, mant + 16, mant)
    mant = (mant << 4) + 0x8
    mant = np.where(iexp > 1, mant << np.maximum(iexp - 1, 0), mant)
    lin = np.where(sign_pos != 0, mant, -mant)
    return lin.astype(PCM16_DTYPE)


_ULAW_ENC = _build_ulaw_encode()
_ULAW_DEC = _build_ulaw_decode()
_ALAW_ENC = _build_alaw_encode()
_ALAW_DEC = _build_alaw_decode()


def _encode(pcm: bytes | bytearray | memoryview | Int16Array, table: Uint8Array) -> bytes:
    samples = pcm16_to_array(pcm) if not isinstance(pcm, np.ndarray) else pcm.astype(PCM16_DTYPE, copy=False)
    return table[samples.view(np.uint16)].tobytes()


def _decode(data: bytes | bytearray | memoryview, table: Int16Array) -> bytes:
    codes = np.frombuffer(data, dtype=np.uint8)
    return table[codes].tobytes()


def ulaw_encode(pcm: bytes | bytearray | memoryview | Int16Array) -> bytes:
    """Mu-law bytes (one per sample) of PCM16 audio."""
    return _encode(pcm, _ULAW_ENC)


def ulaw_decode(data: bytes | bytearray | memoryview) -> bytes:
    """PCM16 bytes of mu-law audio."""
    return _decode(data, _ULAW_DEC)


def alaw_encode(pcm: bytes | bytearray | memoryview | Int16Array) -> bytes:
    """A-law bytes (one per sample) of PCM16 audio."""
    return _encode(pcm, _ALAW_ENC)


def alaw_decode(data: bytes | bytearray | memoryview) -> bytes:
    """PCM16 bytes of A-law audio."""
    return _decode(data, _ALAW_DEC)
