"""Training logs: `grad_stats` (Table 4), `spikes` (Table 5), `curves` (Figs. 7, 8, 10)."""

from __future__ import annotations

import os
import warnings
from typing import TYPE_CHECKING, Dict, List, Mapping, Optional, Sequence, Union

from . import _native
from ._errors import _python_errors
from ._types import PathLike

if TYPE_CHECKING:
    import polars as pl


def _logs(runs: Union[PathLike, Mapping[str, PathLike], Sequence[PathLike]]) -> List[str]:
    """Training logs as the CLI takes them: `label=path` or paths."""
    if isinstance(runs, Mapping):
        return [f"{k}={os.fspath(v)}" for k, v in runs.items()]
    if isinstance(runs, (str, os.PathLike)):
        runs = [runs]
    return [os.fspath(r) for r in runs]


@_python_errors
def grad_stats(
    runs: Union[PathLike, Mapping[str, PathLike], Sequence[PathLike]],
    metric: str = "grad_norm",
    steps: str = "0..500",
    ddof: int = 1,
    step_column: Optional[str] = None,
) -> pl.DataFrame:
    """Gradient-norm statistics (mean, std, var, CV) over a step window, one row per run,
    as `asa-analyze grad-stats` (paper Table 4). `runs`: CSV/TSV, JSON Lines, W&B exports or
    TensorBoard logs, as paths, a list or a {label: path} dict."""
    (_, table), = _native.grad_stats(_logs(runs), metric, steps, ddof, step_column)
    return table


@_python_errors
def spikes(
    runs: Union[PathLike, Mapping[str, PathLike], Sequence[PathLike]],
    k: Sequence[float] = (6.0, 9.0),
    metric: str = "grad_norm",
    steps: str = "all",
    mad_scale: float = 1.0,
    step_column: Optional[str] = None,
) -> Dict[str, pl.DataFrame]:
    """Spikes above median + k * MAD, as `asa-analyze spikes` (paper Table 5):
    {"spikes": counts per run and k, "spike_steps": every spike's step and value}."""
    return dict(_native.spikes(_logs(runs), list(k), metric, steps, mad_scale, step_column))


@_python_errors
def curves(
    runs: Union[PathLike, Mapping[str, PathLike], Sequence[PathLike]],
    metrics: Optional[Sequence[str]] = None,
    steps: str = "all",
    ema: Optional[float] = None,
    step_column: Optional[str] = None,
) -> pl.DataFrame:
    """Training curves as `asa-analyze curves` (paper Figs. 7, 8, 10): one row per run,
    metric and step with the logged value and its debiased EMA (`ema`, TensorBoard's
    smoothing weight in [0, 1); `smoothed` equals `value` without it). `metrics` default to
    loss and grad_norm, each skipped with a warning where a log lacks it; `steps` a window
    such as "7000..9000"."""
    [(_, table)], skipped = _native.curves(
        _logs(runs), list(metrics or []), steps, ema, step_column
    )
    for message in skipped:
        warnings.warn(message, stacklevel=2)
    return table
