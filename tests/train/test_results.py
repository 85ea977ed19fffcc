"""seqlab.results: concurrent sittings keep every run and every other key; a corrupted file is named, never overwritten."""
import json
import multiprocessing

import pytest

from seqlab import results


def _key(r):
    return (r["id"],)


def _sitting(args):
    path, name, n = args
    for i in range(n):
        results.merge(path, key=_key, runs=[{"id": f"{name}-{i}"}], fields={"command": name}, wall_s=1.0)


def test_four_sittings_side_by_side_keep_every_run_and_every_key(tmp_path):
    path = tmp_path / "grid.json"
    results.merge(path, key=_key, controls=[{"id": "control-mqar"}], fields={"note": "kept"})
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        pool.map(_sitting, [(str(path), f"s{k}", 10) for k in range(4)])
    data = json.loads(path.read_text())
    assert sorted(r["id"] for r in data["runs"]) == sorted(f"s{k}-{i}" for k in range(4) for i in range(10))
    assert data["controls"] == [{"id": "control-mqar"}] and data["note"] == "kept" and data["wall_s"] == 40.0
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_a_record_already_there_is_not_added_twice(tmp_path):
    path = tmp_path / "grid.json"
    results.merge(path, key=_key, runs=[{"id": "a"}])
    data = results.merge(path, key=_key, runs=[{"id": "a", "other": 1}, {"id": "b"}])
    assert data["runs"] == [{"id": "a"}, {"id": "b"}]


def test_amend_adds_fields_to_recorded_runs_and_never_overwrites_one(tmp_path):
    path = tmp_path / "grid.json"
    results.merge(path, key=_key, runs=[{"id": "a", "x": 1}, {"id": "b"}], fields={"note": "kept"})
    changed = results.amend(path, key=_key, fields={("a",): {"x": 2, "y": 3}, ("b",): {"y": 4}, ("c",): {"y": 5}})
    data = json.loads(path.read_text())
    assert changed == 2 and data["runs"] == [{"id": "a", "x": 1, "y": 3}, {"id": "b", "y": 4}] and data["note"] == "kept"
    assert results.amend(path, key=_key, fields={("a",): {"y": 9}}) == 0


def test_a_corrupted_file_is_named_and_left_as_it_was(tmp_path):
    path = tmp_path / "grid.json"
    path.write_text('{"runs": [{"id" "a"}]')
    before = path.read_bytes()
    with pytest.raises(results.ResultsError, match=r"grid\.json: not a valid results file .* left as it is"):
        results.merge(path, key=_key, runs=[{"id": "b"}])
    assert path.read_bytes() == before
    path.write_text("[1, 2]")
    with pytest.raises(results.ResultsError, match="not a results file"):
        results.read(path)
    assert results.read(tmp_path / "none.json") == {"runs": [], "controls": []}
