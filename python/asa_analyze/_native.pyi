from os import PathLike
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, TypedDict, Union, Unpack

import polars as pl

from ._memory_models import Memory

__version__: str
CHECKPOINT_PROBLEMS: List[str]
"""Every `CheckpointError.problem` there is, in the order of Rust's `CheckpointProblem`."""

class AsaError(ValueError):
    path: Optional[str]
    """The file the error is about (the input refused, or the file the OS failed on)."""
    option: Optional[str]
    """The option at fault, as the caller spells it (Python's keyword `bins`, the CLI's flag
    `--bins`), where one is."""
    tensor: Optional[str]
    """The checkpoint's tensor at fault (missing, of another shape, its data unreadable),
    where one is."""
    key: Optional[str]
    """The checkpoint's setting at fault (a config.json key, dotted inside an object:
    `rope_parameters.factor`, or a GGUF metadata key: `llama.block_count`; the first of
    settings that contradict each other), where one is."""
    problem: Optional[str]
    """What is wrong with the checkpoint, a word to match (one of `CHECKPOINT_PROBLEMS`):
    `not_a_checkpoint`, `missing_file`, `missing_tensor`, `shape`, `tensor_data`,
    `unused_tensors`, `missing_key`, `wrong_type`, `out_of_range`, `inconsistent`,
    `unsupported`, `unimplemented`, `no_attention`, `damaged`, `non_finite`; None for
    another error, or a file a parser refused."""
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
        seq_len: Optional[int] = None,
        **options: Unpack[RunOptions],
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

# the run's options, as declared once (python -m asa_analyze._stubs writes this block)
class RunOptions(TypedDict, total=False):
    probe: Optional[str]
    """A built-in probe instead of a corpus: `induction`, windows of BOS, L random token ids (from seed) and the same L again, seq_len 2L + 1; `analyze` adds induction_score."""
    tokenizer: Optional[Union[str, PathLike[str]]]
    """tokenizer.json to use instead of the checkpoint's own (or its GGUF metadata)."""
    weight_map: Optional[Union[str, PathLike[str]]]
    """JSON of "convention name": "checkpoint name" patterns ({l} placeholders) for checkpoints whose tensors are named otherwise."""
    variant: Optional[str]
    """Analyse every checkpoint as this attention variant, whatever config.json names or the weights point to (e.g. off_by_one, which has no weights of its own)."""
    seq_len: Optional[int]
    """Tokens per sequence (BOS included)."""
    num_seqs: Optional[int]
    """Number of sequences."""
    bos: Optional[str]
    """Whether each sequence starts with BOS."""
    windows: Optional[str]
    """How windows are cut: packed (documents joined with EOS, cut into consecutive windows) or documents (each window the start of its own document, shorter ones skipped)."""
    batch_size: Optional[int]
    """Sequences per forward pass."""
    seed: Optional[int]
    """Seed of the built-in corpus."""
    device: Optional[str]
    """auto, cpu, cuda or cuda:N."""
    dtype: Optional[str]
    """Analysis dtype: f32, bf16, f16 (default f32 on CPU, bf16 on GPU)."""
    max_memory: Optional[Union[int, str]]
    """Memory for attention blocks (e.g. 2G); default a quarter of available memory."""
    block_size: Optional[int]
    """Queries per attention block (overrides max_memory)."""
    stream_layers: Optional[bool]
    """Read one layer's weights at a time (layer-major: every window through a layer before the next); default: when the model's weights would not fit memory_budget (CPU)."""
    allow_nonfinite: Optional[bool]
    """Analyse weights holding NaN or infinities (a diverged checkpoint; its metrics come out NaN) instead of refusing them."""
    ignore_unused_weights: Optional[bool]
    """Analyse a checkpoint holding weights its config does not use (more layers than num_hidden_layers, another variant's weights) instead of refusing it."""
    memory_budget: Optional[Union[int, str]]
    """Memory the model's weights may take before layers are streamed (e.g. 8G); default 80% of the memory available when the run starts."""
    min_query: Optional[int]
    """Queries i < min-query are left out of query averages."""
    layer: Optional[int]
    """Heatmap / profile layer, 1-based, a layer with attention (default the 8th attention layer, clipped to the model's last)."""
    size: Optional[int]
    """Heatmap size (queries and keys)."""
    map_size: Optional[int]
    """block_map side: G x G blocks of queries and keys (G = min(map-size, seq-len)); only with `block_map` among the metrics."""
    profile_query: Optional[int]
    """Query of the profile, 0-based (default: the last)."""
    bins: Optional[int]
    """Weight-sum histogram bins."""
    sink_eps: Optional[float]
    """Sink-rate threshold epsilon."""
    bands: Optional[List[int]]
    """Distance band edges after 0 (e.g. 1,10,100); default decades."""
    entropy_of: Optional[str]
    """Entropy of the effective weights (clamped, renormalised) or of the plain softmax."""
    role_sink: Optional[float]
    """head_role: a head whose mean first-token mass reaches this is a sink head."""
    role_local_window: Optional[int]
    """head_role: local_mass is the mass on the last W keys (distances 0 .. W-1, key 0 not)."""
    role_local: Optional[float]
    """head_role: a head whose local_mass reaches this is a local head."""
    role_prev: Optional[float]
    """head_role: a head whose mass at distance 1 reaches this is a previous-token head."""
    role_induction: Optional[float]
    """head_role: a head whose induction_score reaches this is an induction head."""
    metrics: Optional[List[str]]
    """`analyze` only: compute just these metrics (comma-separated), e.g. first_token,entropy,weight_sum,head_total,heatmap,nll."""
# end of the run's options
def analyze(
    models: List[Tuple[str, str]],
    corpus: Optional[str] = None,
    events: Optional[Any] = None,
    cancel: Optional[CancelToken] = None,
    memory: Optional[List[Memory]] = None,
    threads: Optional[int] = None,
    **options: Unpack[RunOptions],
) -> NativeResult: ...
def run_options() -> List[Tuple[str, str, Optional[str], str]]: ...
def capture_options() -> List[str]: ...
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
