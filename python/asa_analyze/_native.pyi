from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import polars as pl

from ._memory_models import Memory

__version__: str

class AsaError(ValueError):
    path: Optional[str]
    """The file the error is about (the input refused, or the file the OS failed on)."""
    option: Optional[str]
    """The option at fault, as the CLI spells it (`--bins`), where one is."""
class Cancelled(Exception): ...

class CancelToken:
    def __init__(self) -> None: ...
    def cancel(self) -> None: ...
    @property
    def cancelled(self) -> bool: ...
class InputError(AsaError): ...
class CheckpointError(InputError): ...
class CorpusError(InputError): ...
class TableError(InputError): ...
class TrainingLogError(InputError): ...
class UsageError(AsaError): ...
class IoError(AsaError): ...

class NativeResult:
    def tables(self) -> List[Tuple[str, pl.DataFrame]]: ...
    def record(self) -> str: ...
    def write(self, dir: str, format: str = "csv", figures: bool = False) -> List[Path]: ...

class NativeCapture:
    def __init__(
        self,
        modules: List[Any],
        stack: Optional[str] = None,
        metrics: Optional[List[str]] = None,
        min_query: int = 1,
        map_size: int = 256,
        layer: Optional[int] = None,
        seq_len: Optional[int] = None,
    ) -> None: ...
    def attend(
        self,
        layer: int,
        q: Tuple[int, List[int], str],
        k: Tuple[int, List[int], str],
        v: Tuple[int, List[int], str],
        scale: float,
        out: Tuple[int, List[int], str],
        sinks: Optional[Tuple[int, List[int], str]] = None,
        spans: Optional[List[Tuple[int, int]]] = None,
    ) -> None: ...
    def begin_blocks(
        self, layer: int, dims: List[int], kv: int, dtype: str, spans: Optional[List[Tuple[int, int]]] = None
    ) -> Dict[str, Any]: ...
    def block(
        self,
        layer: int,
        group: int,
        q_start: int,
        n: int,
        table: Tuple[int, List[int], str],
        key_sums: Optional[Tuple[int, List[int], str]] = None,
        pattern: Optional[Tuple[int, List[int], str]] = None,
        sink_mass: Optional[Tuple[int, List[int], str]] = None,
    ) -> None: ...
    def end_blocks(self, layer: int) -> None: ...
    def place(self, rank: int, world: int) -> None: ...
    def state(self) -> bytes: ...
    def merge_state(self, state: bytes) -> None: ...
    def result(self, label: str, model_class: str, transformers_version: str, device: str) -> NativeResult: ...
    @staticmethod
    def stacked_result(
        captures: List["NativeCapture"], label: str, model_class: str, transformers_version: str, device: str
    ) -> NativeResult: ...

def analyze(
    models: List[Tuple[str, str]],
    metrics: Optional[List[str]] = None,
    corpus: Optional[str] = None,
    probe: Optional[str] = None,
    seq_len: int = 1024,
    num_seqs: int = 10,
    bos: str = "auto",
    windows: str = "packed",
    variant: Optional[str] = None,
    device: str = "auto",
    batch_size: int = 1,
    seed: int = 0,
    shard: Optional[str] = None,
    events: Optional[Any] = None,
    cancel: Optional[CancelToken] = None,
    memory: Optional[List[Memory]] = None,
    tokenizer: Optional[str] = None,
    threads: Optional[int] = None,
    map_size: int = 256,
    role_sink: float = 0.5,
    role_local_window: int = 16,
    role_local: float = 0.5,
    role_prev: float = 0.4,
    role_induction: float = 0.4,
) -> NativeResult: ...
def inspect(
    path: str, memory: Optional[Memory] = None
) -> str: ...
def merge(partials: List[str]) -> NativeResult: ...
def report(results: List[str]) -> str: ...
def grad_stats(
    runs: List[str], metric: str = "grad_norm", steps: str = "0..500", ddof: int = 1, step_column: Optional[str] = None
) -> List[Tuple[str, pl.DataFrame]]: ...
def spikes(
    runs: List[str],
    k: List[float] = ...,
    metric: str = "grad_norm",
    steps: str = "all",
    mad_scale: float = 1.0,
    step_column: Optional[str] = None,
) -> List[Tuple[str, pl.DataFrame]]: ...
def curves(
    runs: List[str],
    metrics: List[str] = ...,
    steps: str = "all",
    ema: Optional[float] = None,
    step_column: Optional[str] = None,
) -> Tuple[List[Tuple[str, pl.DataFrame]], List[str]]: ...
def figures(results: List[str], out: str) -> List[Path]: ...
def tables(
    inputs: List[Tuple[str, str]],
    manifest: Optional[str] = None,
    table3: List[str] = ...,
    loss_window: Optional[int] = None,
    loss_metric: Optional[str] = None,
    accuracy: List[str] = ...,
) -> Tuple[List[Tuple[str, pl.DataFrame]], List[Tuple[int, str, str]]]: ...
