"""seqlab.config: device, dtype, profile and seeding."""
import pytest
import torch

from seqlab import config


def test_auto_device_is_cuda_only_when_present():
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert config.device("auto").type == expected
    assert config.device("cpu") == torch.device("cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_asking_for_cuda_without_it_names_the_argument():
    with pytest.raises(ValueError, match="device: 'cuda' was asked for but CUDA is not available"):
        config.device("cuda")


def test_bad_device_and_dtype_names_are_refused():
    with pytest.raises(ValueError, match="device: expected"):
        config.device("tpu:0")
    with pytest.raises(ValueError, match="dtype: expected"):
        config.dtype("float8")
    assert config.dtype("float64") is torch.float64


def test_profile_follows_the_environment(monkeypatch):
    monkeypatch.setenv("SEQLAB_PROFILE", "full")
    assert config.profile() == "full" and config.pick(1, 2) == 2
    monkeypatch.setenv("SEQLAB_PROFILE", "Quick ")
    assert config.profile() == "quick" and config.pick(1, 2) == 1 and config.pick(1, 2, medium=3) == 1
    monkeypatch.setenv("SEQLAB_PROFILE", "medium")
    assert config.profile() == "medium" and config.pick(1, 2) == 1 and config.pick(1, 2, medium=3) == 3
    monkeypatch.setenv("SEQLAB_PROFILE", "huge")
    with pytest.raises(ValueError, match="SEQLAB_PROFILE: expected one of"):
        config.profile()
    monkeypatch.delenv("SEQLAB_PROFILE")
    assert config.profile() == ("full" if torch.cuda.is_available() else "quick")


def test_seeding_reproduces_every_generator():
    def draw():
        import random

        import numpy as np

        return random.random(), float(np.random.rand()), torch.randn(3).tolist()

    gen = config.seed_everything(7)
    first, g_first = draw(), torch.randn(2, generator=gen).tolist()
    gen = config.seed_everything(7)
    assert draw() == first and torch.randn(2, generator=gen).tolist() == g_first
    with pytest.raises(ValueError, match="seed: expected a non-negative int"):
        config.seed_everything(-1)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the thread rule is for CPU machines")
@pytest.mark.parametrize("profile", ["quick", "medium"])
def test_cpu_profiles_use_one_math_thread(monkeypatch, profile):
    monkeypatch.setenv("SEQLAB_PROFILE", profile)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        config.seed_everything(0)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_triton_status_says_how_kernels_run():
    status = config.triton_status()
    assert "Triton" in status
