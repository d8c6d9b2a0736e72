"""asa-analyze in Python: the Rust analysis run in-process, every table a polars DataFrame.

    import asa_analyze as asa
    res = asa.analyze({"base": "ckpt/base", "asa": "ckpt/asa"}, corpus="val.jsonl", seq_len=512)
    res.attention.filter(res.attention["metric"] == "first_token")
    res.write("results/")          # exactly what `asa-analyze analyze --out results/` writes

Checkpoints are folders, GGUF files or Hugging Face Hub ids (`org/name`, `org/name@revision`)
resolved through the local Hugging Face cache. Errors raise `AsaError` (a `ValueError`)
subclasses whose message is the CLI's one line; Ctrl-C stops a run and raises
`KeyboardInterrupt` with nothing written. The package installs no signal handler: the
interpreter keeps its own. A run in another thread is stopped by its `CancelToken`:

    token = asa.CancelToken()
    threading.Thread(target=lambda: asa.analyze("ckpt/", cancel=token)).start()
    token.cancel()                 # that run raises asa.Cancelled; other runs go on

A transformers model in hand is analysed from its own forward pass (the "asa" attention
backend; `asa.register()` makes `attn_implementation="asa"` known to transformers):

    with asa.capture(model) as cap:
        model(input_ids)
    cap.result().attention
"""

from __future__ import annotations

from . import _native
from ._analysis import analyze, entropy, inspect, merge
from ._backend import register
from ._capture import Capture, capture
from ._logs import curves, grad_stats, spikes
from ._native import (
    CHECKPOINT_PROBLEMS,
    AsaError,
    CancelToken,
    Cancelled,
    CheckpointError,
    CorpusError,
    InputError,
    IoError,
    TableError,
    TrainingLogError,
    UsageError,
)
from ._paper import PaperTables, tables
from ._report import Report, figures, report
from ._result import Result
from ._types import ModelRecord, RunRecord
from .monitor import Monitor

__all__ = [
    "AsaError",
    "CHECKPOINT_PROBLEMS",
    "CancelToken",
    "Cancelled",
    "Monitor",
    "InputError",
    "CheckpointError",
    "CorpusError",
    "TableError",
    "TrainingLogError",
    "IoError",
    "UsageError",
    "Result",
    "RunRecord",
    "ModelRecord",
    "analyze",
    "capture",
    "Capture",
    "register",
    "curves",
    "entropy",
    "figures",
    "grad_stats",
    "inspect",
    "merge",
    "report",
    "Report",
    "spikes",
    "tables",
    "PaperTables",
]
__version__ = _native.__version__
