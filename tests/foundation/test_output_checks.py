"""Output paths are checked before anything is measured, and measurements survive a records file that fails after
measuring (device full): they go to a rescue file and the error says where."""
from __future__ import annotations

import errno
import json

import pytest

from benchmarks import cli
from benchmarks.errors import InputError, check_output_dir, check_output_file, one_line


def test_output_file_checks_name_the_problem(tmp_path) -> None:
    check_output_file(tmp_path / "new" / "deeper" / "r.jsonl", "output.records")  # folders the writer creates
    (tmp_path / "f").write_text("x")
    for path, message in [(tmp_path, "is a directory"), (tmp_path / "f" / "r.jsonl", "is a file, not a folder")]:
        with pytest.raises(InputError, match=message):
            check_output_file(path, "output.records")
    with pytest.raises(InputError, match="does not exist"):
        check_output_file(tmp_path / "no" / "p.json", "--out", create_folders=False)
    with pytest.raises(InputError, match="is a file, not a folder"):
        check_output_dir(tmp_path / "f" / "report", "--out")
    assert not (tmp_path / "new").exists()


def test_a_full_device_is_refused_before_measuring(tmp_path, monkeypatch) -> None:
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage(10, 10, 0))
    with pytest.raises(InputError, match="0 bytes free"):
        check_output_file(tmp_path / "r.jsonl", "output.records")


def test_one_line_collapses_hydra_messages() -> None:
    from benchmarks.compose import compose_config

    with pytest.raises(Exception) as info:
        compose_config(["workload=nosuch"])
    line = one_line(info.value)
    assert "\n" not in line and "Could not find 'workload/nosuch'" in line and "smoke" in line
    assert "search path" not in line.lower()


@pytest.mark.slow
def test_records_that_cannot_be_appended_after_measuring_are_rescued(tmp_path, monkeypatch, capsys) -> None:
    import benchmarks.run as run

    def full(path, records):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(run, "append_records", full)
    monkeypatch.chdir(tmp_path)
    rc = cli.main(["run", "workload=smoke", "backend=torch", "workload.num_batches=1", "workload.batch_size=32",
                   "bench.repeats=1", "bench.warmup=0", "bench.model=false", "bench.ceilings=false",
                   "bench.overhead=false", "output.progress=false", f"output.records={tmp_path / 'r.jsonl'}"])
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert rc == 1 and len(err) == 1 and "No space left on device" in err[0], err
    rescue = err[0].split("written to ")[1].split(" instead")[0]
    kinds = [json.loads(x)["kind"] for x in open(rescue)]
    assert kinds == ["generation", "lookup"]
