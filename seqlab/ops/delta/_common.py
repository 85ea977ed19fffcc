"""What every form of the delta rule shares: the argument checks (errors name the argument, the expected and the
actual) and the dtype policy (half precision computed in float32, float64 kept)."""
from __future__ import annotations

import torch

from seqlab.ops._checks import check_finite_inputs, check_same_device, check_shape, check_tensor, describe, has_values

BETA_RANGE = (0.0, 2.0)   # I - beta k k^T is non-expansive for unit keys exactly when 0 <= beta <= 2


def out_dtype(*tensors) -> torch.dtype:
    """The dtype the op returns: the promotion of its inputs."""
    dtype = None
    for t in tensors:
        if t is not None:
            dtype = t.dtype if dtype is None else torch.promote_types(dtype, t.dtype)
    return dtype


def working(dtype: torch.dtype) -> torch.dtype:
    """The dtype a result of ``dtype`` is computed in: float16 / bfloat16 raised to float32, others kept."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def work_dtype(*tensors) -> torch.dtype:
    """The dtype the op computes in: the promotion of its inputs, float16 / bfloat16 raised to float32."""
    return working(out_dtype(*tensors))


def _check_real(name: str, t: torch.Tensor) -> None:
    if t.is_complex():
        raise TypeError(f"{name}: the delta rule is defined for real tensors (the projection I - beta k k^T has no "
                        f"single complex meaning), got {describe(t)}")


def check_sequence_inputs(q, k, v, beta, g, h0) -> None:
    """Shapes, dtypes and devices of :func:`seqlab.ops.delta_rule`'s arguments (no values read)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, t, ndim=4)
        _check_real(name, t)
    B, H, L, dk = q.shape
    check_shape("k", k, (B, H, L, dk), "like q: (B, H, L, dk)")
    check_shape("v", v, (B, H, L, None), "(B, H, L, dv) with q: (B, H, L, dk)")
    _check_per_step("beta", beta, (B, H, L), "(B, H, L), one write strength per head and step")
    if g is not None:
        _check_per_step("g", g, (B, H, L), "(B, H, L), the log of one decay alpha per head and step")
    if h0 is not None:
        check_tensor("h0", h0, ndim=4)
        _check_real("h0", h0)
        check_shape("h0", h0, (B, H, dk, v.shape[-1]), "(B, H, dk, dv), the state S_0")
    check_same_device(q=q, k=k, v=v, beta=beta, g=g, h0=h0)


def check_key_inputs(k, beta, g) -> None:
    """Shapes, dtypes and devices of the keys, write strengths and log decays alone (no values read)."""
    check_tensor("k", k, ndim=4)
    _check_real("k", k)
    B, H, L, _ = k.shape
    _check_per_step("beta", beta, (B, H, L), "(B, H, L) with k: (B, H, L, dk)")
    if g is not None:
        _check_per_step("g", g, (B, H, L), "(B, H, L) with k: (B, H, L, dk)")
    check_same_device(k=k, beta=beta, g=g)


def check_step_inputs(q_t, k_t, v_t, beta_t, g_t, state) -> None:
    """Shapes, dtypes and devices of :func:`seqlab.ops.delta_rule_step`'s arguments (no values read)."""
    for name, t in (("q_t", q_t), ("k_t", k_t), ("v_t", v_t)):
        check_tensor(name, t, ndim=3)
        _check_real(name, t)
    B, H, dk = q_t.shape
    check_shape("k_t", k_t, (B, H, dk), "like q_t: (B, H, dk)")
    check_shape("v_t", v_t, (B, H, None), "(B, H, dv) with q_t: (B, H, dk)")
    _check_per_step("beta_t", beta_t, (B, H), "(B, H), one write strength per head")
    if g_t is not None:
        _check_per_step("g_t", g_t, (B, H), "(B, H), the log of one decay alpha per head")
    if state is not None:
        check_tensor("state", state, ndim=4)
        _check_real("state", state)
        check_shape("state", state, (B, H, dk, v_t.shape[-1]), "(B, H, dk, dv), the state S_{t-1}")
    check_same_device(q_t=q_t, k_t=k_t, v_t=v_t, beta_t=beta_t, g_t=g_t, state=state)


def _check_per_step(name: str, t, shape: tuple, what: str) -> None:
    check_tensor(name, t)
    _check_real(name, t)
    if t.dim() == len(shape) + 1 and t.shape[-1] == 1 and tuple(t.shape[:-1]) == shape:
        raise ValueError(f"{name}: expected shape {shape} ({what}), got {describe(t)}; squeeze the last dimension")
    check_shape(name, t, shape, what)


def check_values(op: str, **tensors) -> None:
    """Finite inputs (the first bad value named by argument and index), then ``beta`` in ``BETA_RANGE`` and
    ``g <= 0``; skipped on ``meta`` tensors. The names ``beta``/``beta_t`` and ``g``/``g_t`` select the range
    checks."""
    check_finite_inputs(op, **tensors)
    for name, t in tensors.items():
        if t is None or not has_values(t) or t.numel() == 0:
            continue
        if name.startswith("beta"):
            _check_beta(op, name, t)
        elif name in ("g", "g_t"):
            _check_log_decay(op, name, t)


def _check_beta(op: str, name: str, beta: torch.Tensor) -> None:
    lo, hi = BETA_RANGE
    bad = (beta < lo) | (beta > hi)
    if bool(bad.any()):
        index = tuple(int(i) for i in bad.nonzero()[0])
        raise ValueError(f"{op}: {name} must lie in [{lo:g}, {hi:g}] (a sigmoid, or 2 sigmoid for negative "
                         f"eigenvalues: I - beta k k^T is then non-expansive for unit keys), got "
                         f"{beta.detach()[index].item():.6g} at index {index} ({describe(beta)})")


def _check_log_decay(op: str, name: str, g: torch.Tensor) -> None:
    bad = g > 0
    if bool(bad.any()):
        index = tuple(int(i) for i in bad.nonzero()[0])
        raise ValueError(f"{op}: {name} is log alpha and must be <= 0 (alpha in (0, 1], a decay), got "
                         f"{g.detach()[index].item():.6g} at index {index} ({describe(g)})")


def assert_values_async(op: str, y, S, beta, g) -> None:
    """The GPU path's value check without a host synchronisation: one device-side assertion that ``y`` and
    ``S_L`` are finite, ``beta`` in range and ``g <= 0`` (a non-finite input propagates into ``y`` or ``S_L``)."""
    from seqlab.ops._checks import CHECK_VALUES

    lo, hi = BETA_RANGE
    ok = torch.isfinite(y).all() & torch.isfinite(S).all() & ((beta >= lo) & (beta <= hi)).all()
    if g is not None:
        ok = ok & (g <= 0).all()
    torch._assert_async(ok, f"{op}: a non-finite input or output, beta outside [{lo:g}, {hi:g}] or g > 0 "
                            f"(device-side check); rerun with {CHECK_VALUES}=1 to have the argument and index named")
