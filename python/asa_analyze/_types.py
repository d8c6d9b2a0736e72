"""The argument types the public functions share, and the run record's (run.json) types."""

from __future__ import annotations

import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, TypedDict, Union

PathLike = Union[str, "os.PathLike[str]"]
Models = Union[PathLike, Any, Mapping[str, Any], Sequence[Any]]


class _ModelRecordKeys(TypedDict):
    model: str
    path: str
    architecture: str
    variant: str
    variant_source: str
    unused_weights: Optional[str]
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    corpus: str
    dequantized_from: Optional[Dict[str, int]]
    seq_len: int
    beta_length_n: int
    block_size: int
    batch_size: int
    heatmap_layer: int
    profile_query: int
    layer_kinds: List[Dict[str, Any]]
    kernels: Dict[str, List[int]]
    schedule: Dict[str, Any]
    first_nonfinite: Dict[str, Any]
    peak_rss_bytes: Optional[int]
    seconds: float
    tokens_per_second: float


class ModelRecord(_ModelRecordKeys, total=False):
    """One model's part of run.json: what was analysed (architecture, variant and how it was
    found, shape, corpus), how (block and batch size, kernels by layer, the schedule of a
    streamed run) and what it cost. `windows` (a merge), `host_copy` (a model in memory on a
    device), `probe` (`probe="induction"`) and `capture` (a model captured by
    `asa.capture`: its class, the transformers version, the forward passes and each attention
    module's name, layer and keys) only where they apply."""

    windows: int
    host_copy: Dict[str, Any]
    probe: Dict[str, Any]
    capture: Dict[str, Any]


class _RunRecordKeys(TypedDict):
    command: str
    asa_analyze_version: str
    candle_version: str
    device: str
    dtype: str
    metrics: List[str]
    options: Dict[str, Any]
    models: List[ModelRecord]
    series: List[Dict[str, Any]]
    seconds: float
    shard: Optional[Dict[str, int]]
    profile: Optional[Dict[str, Dict[str, float]]]


class RunRecord(_RunRecordKeys, total=False):
    """run.json as a dict (`Result.run`): the command, versions, device and dtype, the
    metrics and options, each model's record, a training series' steps and the seconds.
    `partial` (a shard's partial result), `merged`, `merged_from` and `merge_seconds` (a
    merge) only where they apply."""

    partial: Dict[str, Any]
    merged: Dict[str, Any]
    merged_from: List[str]
    merge_seconds: float
