"""Bounded least squares: Levenberg-Marquardt steps clipped to a box, numpy only.

The fit's residuals are smooth in every delay (the cost model is sums of hops and per-token
costs), so forward differences give the Jacobian.

    >>> g = lambda z: np.array([z[0] - 3.0, z[1] + 1.0])
    >>> least_squares(g, np.zeros(2), np.array([-5.0, 0.0]), np.array([5.0, 5.0])).round(6).tolist()
    [3.0, 0.0]
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

Residuals = Callable[[np.ndarray], np.ndarray]


def jacobian(f: Residuals, z: np.ndarray, r: np.ndarray, h: float = 1e-4) -> np.ndarray:
    """Forward differences of ``f`` at ``z`` (where ``f(z) == r``): one column per parameter.

    >>> jacobian(lambda z: np.array([2 * z[0], z[0] + z[1]]), np.zeros(2), np.zeros(2)).round(6).tolist()
    [[2.0, 0.0], [1.0, 1.0]]
    """
    jac = np.empty((len(r), len(z)))
    for i in range(len(z)):
        step = z.copy()
        step[i] += h
        jac[:, i] = (f(step) - r) / h
    return jac


def least_squares(
    f: Residuals,
    z0: np.ndarray,
    low: np.ndarray,
    high: np.ndarray,
    *,
    iterations: int = 200,
) -> np.ndarray:
    """Minimise ``|f(z)|²`` with ``low <= z <= high``: Levenberg-Marquardt steps, clipped to the
    bounds; a parameter at a bound that the gradient pushes outward is held there for the step."""
    z, damping = np.clip(z0, low, high), 1e-3
    r = f(z)
    cost = r @ r
    for _ in range(iterations):
        jac = jacobian(f, z, r)
        grad = jac.T @ r
        free = ~(((z <= low) & (grad > 0)) | ((z >= high) & (grad < 0)))
        if not free.any():
            break
        a = jac[:, free].T @ jac[:, free]
        step = np.zeros_like(z)
        step[free] = -np.linalg.solve(a + damping * (np.diag(np.diag(a)) + 1e-9 * np.eye(len(a))), grad[free])
        trial = np.clip(z + step, low, high)
        r_trial = f(trial)
        if r_trial @ r_trial < cost:
            moved = np.abs(trial - z).max()
            z, r, cost, damping = trial, r_trial, r_trial @ r_trial, damping / 3
            if moved < 1e-7:
                break
        else:
            damping *= 10
            if damping > 1e10:
                break
    return z
