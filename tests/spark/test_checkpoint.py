"""The job claims a new checkpoint with its state layout and refuses one of another."""

from __future__ import annotations

from pathlib import Path

import pytest

from enmesh_spark import telemetry
from enmesh_spark.telemetry import CHECKPOINT_LAYOUT, CheckpointLayoutError, claim_checkpoint


def test_a_new_checkpoint_is_marked_and_then_resumed(tmp_path: Path) -> None:
    checkpoint = tmp_path / "_checkpoint"
    claim_checkpoint(checkpoint)
    assert (checkpoint / "enmesh-layout").read_text().strip() == str(CHECKPOINT_LAYOUT)
    (checkpoint / "offsets").mkdir()  # Spark has run a batch
    claim_checkpoint(checkpoint)


@pytest.mark.parametrize("marker", [None, "1"])
def test_a_checkpoint_of_another_layout_is_refused_and_kept(
    tmp_path: Path, marker: str | None
) -> None:
    checkpoint = tmp_path / "_checkpoint"
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "offsets" / "0").write_text("v1")
    if marker:
        (checkpoint / "enmesh-layout").write_text(marker)
    with pytest.raises(
        CheckpointLayoutError, match=f"{checkpoint} .*layout 1.*move the checkpoint"
    ):
        claim_checkpoint(checkpoint)
    assert (checkpoint / "offsets" / "0").read_text() == "v1"
    assert (checkpoint / "enmesh-layout").exists() == bool(marker)


def test_the_job_refuses_another_layout_before_starting_spark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "_checkpoint" / "offsets").mkdir(parents=True)  # layout 1: no marker

    def no_spark(*args: object) -> None:
        raise AssertionError("Spark started for a checkpoint the job refuses")

    monkeypatch.setattr(telemetry, "session", no_spark)
    password = tmp_path / "password"
    password.write_text("secret")
    argv = ["--url", "amqp://127.0.0.1:1", "--user", "backend@iot", "--password-file",
            str(password), "--out", str(tmp_path)]  # fmt: skip
    assert telemetry.main(argv) == 2
    assert "layout 1" in capsys.readouterr().err
