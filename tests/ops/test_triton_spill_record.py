"""The spill record (``tests/ops/triton_spills_record.json``, ``seqlab.kernels.aot.usage_with_record``) answers
for every configuration the kernels may launch, and a change to a kernel's source reaches its key: the spill test
then compiles that kernel's configurations again and no other. Nothing here compiles a kernel (the compiler is
replaced by a stand-in); ``tests/ops/test_triton_spills.py`` compiles what the record lacks."""
import importlib

import pytest

from seqlab.kernels import HAVE_TRITON, aot

pytestmark = pytest.mark.skipif(not HAVE_TRITON, reason="Triton ships for Linux only")

from test_triton_spills import RECORD, REFRESH, spill_jobs  # noqa: E402  (tests/ops is on the path)

CHANGED = "chunk_dv_kernel"


@pytest.fixture(scope="module")
def jobs():
    return spill_jobs()


@pytest.fixture(scope="module")
def digests(jobs):
    """Every kernel's source hash as the compiling process sees it (one process, a few seconds)."""
    return aot.kernel_digests((j["module"], j["kernel"]) for j in jobs)


def digests_here(jobs) -> dict:
    """The kernels' source hashes computed in this process, where ``aot.jit_source`` can be replaced."""
    memo = {}
    return {(m, k): aot.jit_digest(getattr(importlib.import_module(m), k), memo)
            for m, k in {(j["module"], j["kernel"]) for j in jobs}}


def one_character_changed(name: str, monkeypatch) -> None:
    """``aot.jit_source`` gives the source of the ``@triton.jit`` function ``name`` with one character changed."""
    source = aot.jit_source

    def changed(fn):
        text = source(fn)
        if fn.__name__ != name:
            return text
        i = len(text) // 2
        return text[:i] + ("#" if text[i] != "#" else "%") + text[i + 1:]

    monkeypatch.setattr(aot, "jit_source", changed)


def changed_kernels(jobs, before: dict, after: dict) -> set[str]:
    version = aot.installed_triton_version()
    old, new = aot.job_keys(jobs, version, before), aot.job_keys(jobs, version, after)
    assert len(set(new)) == len(jobs)
    return {j["kernel"] for j, a, b in zip(jobs, old, new) if a != b}


@pytest.mark.parametrize("version", aot.covered_triton_versions())
def test_the_record_holds_every_configuration_the_kernels_may_launch(jobs, digests, version):
    record = aot.load_record(RECORD)
    keys = aot.job_keys(jobs, version, digests)
    missing = [j for j, k in zip(jobs, keys) if k not in record]
    assert not missing, (f"Triton {version}: {len(missing)} of {len(jobs)} configurations not in {RECORD.name}:\n"
                         f"{aot.describe_jobs(missing)}\nRefresh it with {aot.RECORD_MODE_VARIABLE}=write "
                         f"{REFRESH} and commit it.")
    assert {record[k]["kernel"] for k in keys} == {j["kernel"] for j in jobs}


def test_one_character_of_a_kernel_changes_the_keys_of_its_configurations_alone(jobs, monkeypatch):
    before = digests_here(jobs)
    one_character_changed(CHANGED, monkeypatch)
    assert changed_kernels(jobs, before, digests_here(jobs)) == {CHANGED}


def test_a_changed_helper_changes_the_keys_of_every_kernel_that_calls_it(jobs, monkeypatch):
    """``_combine_complex`` is called by ``linear_scan_chunk_kernel`` and, passed to ``tl.associative_scan``, by
    ``_prefix_pairs``, which every scan kernel calls."""
    before = digests_here(jobs)
    one_character_changed("_combine_complex", monkeypatch)
    scan = {j["kernel"] for j in jobs if j["module"] == "seqlab.ops.scan.triton"}
    assert changed_kernels(jobs, before, digests_here(jobs)) == scan


def test_a_changed_constant_changes_the_keys_of_the_kernels_that_read_it(jobs, monkeypatch):
    """``_NO_PLANE`` is read by GateLoop's helpers (the imaginary slot of a real path), not by the scan's or the
    relation op's kernels."""
    gateloop = importlib.import_module("seqlab.ops.gateloop.triton")
    before = digests_here(jobs)
    monkeypatch.setattr(gateloop, "_NO_PLANE", type(gateloop._NO_PLANE)(1.0))
    changed = changed_kernels(jobs, before, digests_here(jobs))
    assert changed and changed <= {j["kernel"] for j in jobs if j["module"] == gateloop.__name__}


def test_the_key_holds_the_launch_the_architecture_and_the_triton_version(jobs):
    job, digest = jobs[0], "0" * 64
    key = aot.job_key(job, "3.7.1", digest)
    others = [aot.job_key(job, "3.6.0", digest), aot.job_key(job, "3.7.1", "1" * 64),
              aot.job_key(dict(job, capability=job["capability"] + 1), "3.7.1", digest),
              aot.job_key(dict(job, num_warps=2 * job["num_warps"]), "3.7.1", digest),
              aot.job_key(dict(job, dtype="bf16"), "3.7.1", digest),
              aot.job_key(dict(job, constexprs=dict(job["constexprs"], C=999)), "3.7.1", digest)]
    assert key not in others and len(set(others)) == len(others)


@pytest.fixture
def compiler(monkeypatch, jobs):
    """``ptxas_usage`` replaced by a stand-in that keeps the jobs it is given; kernel hashes computed here."""
    compiled = []

    def ptxas_usage(batch, triton_path=None):
        compiled.extend(batch)
        version = "3.6.0" if triton_path else aot.installed_triton_version()
        return [dict(j, registers=40, spill_stores=0, spill_loads=0, dots=[], ptxas="", triton=version)
                for j in batch]

    monkeypatch.setattr(aot, "ptxas_usage", ptxas_usage)
    monkeypatch.setattr(aot, "kernel_digests", lambda pairs: digests_here(jobs))
    return compiled


def test_the_runner_compiles_exactly_the_configurations_the_record_lacks(jobs, compiler, tmp_path, monkeypatch):
    record = tmp_path / "record.json"
    with pytest.warns(aot.RecordWarning, match=f"{len(jobs)} of {len(jobs)} kernel configurations not in"):
        aot.usage_with_record(jobs, record, mode="write")
    assert len(compiler) == len(jobs) and len(aot.load_record(record)) == len(jobs)
    compiler.clear()
    assert all(r["recorded"] for r in aot.usage_with_record(jobs, record, mode="write")) and not compiler

    one_character_changed(CHANGED, monkeypatch)
    ours = [j for j in jobs if j["kernel"] == CHANGED]
    with pytest.warns(aot.RecordWarning, match=f"(?s){len(ours)} of {len(jobs)} .*{CHANGED}.*Written into"):
        results = aot.usage_with_record(jobs, record, mode="write")
    assert compiler == ours
    assert [r["kernel"] for r in results if not r["recorded"]] == [CHANGED] * len(ours)
    kept = aot.load_record(record)
    assert len(kept) == len(jobs) and {r["key"] for r in results} == set(kept)     # the old keys are gone


def test_readonly_compiles_without_writing_and_strict_names_what_is_missing(jobs, compiler, tmp_path, monkeypatch):
    record = tmp_path / "record.json"
    with pytest.warns(aot.RecordWarning):
        aot.usage_with_record(jobs, record, mode="write")
    text = record.read_text()
    one_character_changed(CHANGED, monkeypatch)
    compiler.clear()
    with pytest.warns(aot.RecordWarning, match=f"(?s){CHANGED}.*Not written.*SEQLAB_SPILL_RECORD=write x"):
        results = aot.usage_with_record(jobs, record, mode="readonly", refresh="x")
    assert record.read_text() == text and {j["kernel"] for j in compiler} == {CHANGED}
    assert [r["spill_stores"] for r in results] == [0] * len(jobs)
    compiler.clear()
    with pytest.raises(LookupError, match=f"(?s)not in the spill record.*{CHANGED} sm_80.*refresh the record"):
        aot.usage_with_record(jobs, record, mode="strict")
    assert not compiler


def test_a_complete_record_needs_no_pinned_triton(jobs, compiler, tmp_path, monkeypatch):
    """With every key recorded, Triton 3.6 is neither installed nor run."""
    record = tmp_path / "record.json"
    monkeypatch.setattr(aot, "triton_install", lambda version: tmp_path / f"triton-{version}")
    with pytest.warns(aot.RecordWarning):
        aot.usage_with_record(jobs, record, triton_version="3.6.0", mode="write")
    monkeypatch.setattr(aot, "triton_install", lambda version: pytest.fail("installed Triton 3.6"))
    compiler.clear()
    results = aot.usage_with_record(jobs, record, triton_version="3.6.0", mode="strict")
    assert {r["triton"] for r in results} == {"3.6.0"} and all(r["recorded"] for r in results) and not compiler


def test_the_mode_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv(aot.RECORD_MODE_VARIABLE, raising=False)
    monkeypatch.delenv("CI", raising=False)
    assert aot.record_mode() == "write"
    monkeypatch.setenv("CI", "true")
    assert aot.record_mode() == "readonly"
    monkeypatch.setenv(aot.RECORD_MODE_VARIABLE, "strict")
    assert aot.record_mode() == "strict"
    monkeypatch.setenv(aot.RECORD_MODE_VARIABLE, "sometimes")
    with pytest.raises(ValueError, match="SEQLAB_SPILL_RECORD: expected one of"):
        aot.record_mode()
