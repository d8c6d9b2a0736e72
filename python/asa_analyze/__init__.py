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
"""

from __future__ import annotations

import functools
import json
import os
import sys
import tempfile
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Mapping, Optional, Sequence, Union

from . import _native
from ._native import AsaError, CancelToken, Cancelled, InputError, IoError, UsageError
from .monitor import Monitor

__all__ = [
    "AsaError",
    "CancelToken",
    "Cancelled",
    "Monitor",
    "InputError",
    "IoError",
    "UsageError",
    "Result",
    "analyze",
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

if TYPE_CHECKING:
    # polars is imported when the first frame is made (pyo3-polars), not here: `import
    # asa_analyze` stays fast
    import polars as pl

PathLike = Union[str, "os.PathLike[str]"]
Models = Union[PathLike, Any, Mapping[str, Any], Sequence[Any]]


class Result:
    """An analysis' tables, one polars DataFrame per table of the CLI's `--out` folder
    under the same name (`.attention`, `.distance_profile`, `.head_roles`, `.heatmap`,
    `.nll_position`, `.block_map` when that metric ran, ...), and `.run`, the run.json
    record as a dict."""

    def __init__(self, native: Any) -> None:
        self._native = native
        self.tables: Dict[str, pl.DataFrame] = dict(native.tables())
        self.run: Dict[str, Any] = json.loads(native.record())

    def __getattr__(self, name: str) -> pl.DataFrame:
        tables = self.__dict__.get("tables", {})
        if name in tables:
            return tables[name]
        raise AttributeError(f"no table {name!r} in this result (tables: {', '.join(tables)})")

    def __dir__(self) -> List[str]:
        return sorted(set(super().__dir__()) | set(self.tables))

    def write(self, dir: PathLike, format: str = "csv", figures: bool = False) -> List[Path]:
        """Writes the tables and run.json into `dir` as `asa-analyze analyze --out dir`
        does (atomically; `format` "csv" or "parquet"; the figures too when asked)."""
        return [Path(p) for p in self._native.write(os.fspath(dir), format, figures)]

    def __repr__(self) -> str:
        models = [m.get("model") for m in self.run.get("models", [])]
        tables = ", ".join(f"{n} ({t.height} rows)" for n, t in self.tables.items())
        return f"asa_analyze.Result(models={models}, tables: {tables})"


def _python_errors(fn: Any) -> Any:
    """`fn` with a number out of its parameter's range raised as a `UsageError` (a
    ValueError) naming the parameter, not the OverflowError of the conversion to Rust."""

    @functools.wraps(fn)
    def checked(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except OverflowError as e:
            notes = " ".join(getattr(e, "__notes__", []))
            where = notes.replace("while processing ", "argument ") if notes else "a number"
            raise UsageError(f"{where}: {e} (out of the range its option holds)") from None

    return checked


def _in_memory(model: Any) -> bool:
    """Whether `model` is held in memory: a transformers model (it has `config` and
    `state_dict`) or a `(config, state_dict)` pair."""
    if isinstance(model, tuple):
        return len(model) == 2 and isinstance(model[1], Mapping)
    return hasattr(model, "state_dict") and hasattr(model, "config")


def _models(models: Models) -> tuple:
    """(label, path) pairs (a dict gives its labels; a path its folder name; a Hub id itself;
    a model in memory "model", or its dict label), and the in-memory models' arguments."""
    if isinstance(models, Mapping):
        items = [(str(k), v) for k, v in models.items()]
    else:
        if isinstance(models, (str, os.PathLike)) or _in_memory(models):
            models = [models]
        items = []
        for m in models:
            if _in_memory(m):
                items.append(("model", m))
            else:
                path = os.fspath(m)
                items.append((Path(path).resolve().stem if os.path.exists(path) else path, path))
    pairs, memory = [], []
    for label, m in items:
        if _in_memory(m):
            pairs.append((label, ""))
            memory.append((label, *_held(label, m)))
        else:
            pairs.append((label, os.fspath(m)))
    return pairs, memory


_DTYPES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16", "float64": "F64"}


def _held(label: str, model: Any) -> tuple:
    """The config.json text and the tensors of a model in memory, each tensor's bytes read in
    place from a C-contiguous host array (a CPU torch tensor seen through numpy, bf16 as its
    raw 16-bit words; a tensor on a GPU is copied to the host once)."""
    import numpy as np

    if isinstance(model, tuple):
        config, state = model
    else:
        config, state = model.config, model.state_dict()
    if hasattr(config, "to_dict"):
        config = config.to_dict()
    if isinstance(config, (str, bytes)):
        config = json.loads(config)
    if not isinstance(config, Mapping):
        raise UsageError(
            f"model {label}: its config is a {type(config).__name__}; give a dict, a JSON "
            "text or a transformers config"
        )
    if not isinstance(state, Mapping):
        raise UsageError(f"model {label}: its state_dict is a {type(state).__name__}, not a mapping")
    tied = bool(config.get("tie_word_embeddings", False))
    tensors = []
    copy = _HostCopy()
    for name, value in state.items():
        if tied and name == "lm_head.weight":
            continue  # save_pretrained leaves the tied copy out, and so does its checkpoint
        dtype, array = _host_array(label, name, value, np, copy)
        flat = array.reshape(-1)
        address = flat.__array_interface__["data"][0] if flat.size else 0
        tensors.append((name, dtype, list(array.shape), flat, address, flat.nbytes))
    return json.dumps(_finite_json(config), allow_nan=False), tensors, copy.record()


class _HostCopy:
    """The copy of a model's device tensors to the host: which device, how many tensors and
    bytes, how long (run.json's `host_copy`)."""

    def __init__(self) -> None:
        self.devices: List[str] = []
        self.tensors = 0
        self.bytes = 0
        self.seconds = 0.0

    def to_host(self, value: Any) -> Any:
        """`value` (a torch tensor on a device) copied to the host, the copy counted."""
        import time

        start = time.perf_counter()
        host = value.cpu()
        self.seconds += time.perf_counter() - start
        device = str(value.device)
        if device not in self.devices:
            self.devices.append(device)
        self.tensors += 1
        self.bytes += host.element_size() * host.nelement()
        return host

    def record(self) -> Optional[tuple]:
        """(device, tensors, bytes, seconds), or None when nothing was copied."""
        if not self.tensors:
            return None
        return (",".join(self.devices), self.tensors, self.bytes, self.seconds)


def _finite_json(value):
    """`value` with every non-finite float written as transformers writes it in config.json
    (`{"__float__": "Infinity"}`: Granite's and Falcon-H1's `time_step_limit` is (0, inf)),
    so the JSON handed over is valid JSON."""
    import math

    if isinstance(value, float) and not math.isfinite(value):
        word = "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
        return {"__float__": word}
    if isinstance(value, dict):
        return {k: _finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_json(v) for v in value]
    return value


def _host_array(label: str, name: str, value: Any, np: Any, copy: "_HostCopy") -> tuple:
    """(safetensors dtype name, C-contiguous host array) of one tensor (one on a device
    copied to the host, counted in `copy`)."""
    module = type(value).__module__
    if module.startswith("torch"):
        if value.is_meta:
            raise UsageError(f"tensor {name} of model {label} is on the meta device: load its weights first")
        value = value.detach()
        if value.device.type != "cpu":
            value = copy.to_host(value)
        kind = str(value.dtype).replace("torch.", "")
        if kind not in _DTYPES:
            raise UsageError(f"tensor {name} of model {label}: dtype {kind} is not one of {', '.join(_DTYPES)}")
        value = value.contiguous()
        if kind == "bfloat16":
            import torch

            return "BF16", value.view(torch.int16).numpy()
        return _DTYPES[kind], value.numpy()
    array = np.asarray(value)
    kind = str(array.dtype)
    if kind not in _DTYPES:
        raise UsageError(f"tensor {name} of model {label}: dtype {kind} is not one of {', '.join(_DTYPES)}")
    return _DTYPES[kind], np.ascontiguousarray(array)


class _Progress:
    """A run's progress on a tqdm bar when tqdm is installed, else a plain line on stderr."""

    def __init__(self) -> None:
        try:
            from tqdm.auto import tqdm
        except ImportError:  # pragma: no cover - depends on the environment
            tqdm = None
        self._tqdm = tqdm
        self._bar: Any = None
        self._label = ""
        self._total = 0

    def started(self, label: str, tokens: int) -> None:
        self._label, self._total = label, tokens
        if self._tqdm is not None:
            self._bar = self._tqdm(total=tokens, desc=label, unit="tok", leave=False)

    def advance(self, tokens: int) -> None:
        if self._bar is not None:
            self._bar.update(tokens - self._bar.n)
        elif self._total:
            print(f"\r{self._label}: {100 * tokens // self._total:3d}%", end="", file=sys.stderr, flush=True)

    def finished(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif self._total:
            print(file=sys.stderr)

    def note(self, text: str) -> None:
        warnings.warn(text, stacklevel=2)


class _Quiet(_Progress):
    def __init__(self) -> None:
        self._tqdm, self._bar, self._total = None, None, 0

    def started(self, label: str, tokens: int) -> None:
        pass

    def advance(self, tokens: int) -> None:
        pass

    def finished(self) -> None:
        pass


def _corpus(corpus: Any, tmp: str) -> Optional[str]:
    """A corpus path as is; a list of texts as JSONL; token ids (a 2-D numpy array or a list
    of lists) as JSON: files the library reads as it reads the CLI's."""
    if corpus is None or isinstance(corpus, (str, os.PathLike)):
        return None if corpus is None else os.fspath(corpus)
    if hasattr(corpus, "tolist"):
        corpus = corpus.tolist()
    corpus = list(corpus)
    if all(isinstance(t, str) for t in corpus):
        path = os.path.join(tmp, "corpus.jsonl")
        with open(path, "w", encoding="utf-8") as f:
            for text in corpus:
                f.write(json.dumps({"text": text}) + "\n")
        return path
    path = os.path.join(tmp, "corpus.json")
    with open(path, "w") as f:
        json.dump([[_token_id(i, r, p) for p, i in enumerate(row)] for r, row in enumerate(corpus)], f)
    return path


def _token_id(value: Any, row: int, position: int) -> int:
    """A token id as an int; anything but an integer (3.7, "5", True) is refused, as the
    CLI refuses it, rather than truncated."""
    import numbers

    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    raise UsageError(
        f"corpus: token ids must be integers; row {row}, position {position} holds {value!r} "
        f"({type(value).__name__})"
    )


@_python_errors
def analyze(
    models: Models,
    corpus: Any = None,
    seq_len: int = 1024,
    num_seqs: int = 10,
    bos: str = "auto",
    metrics: Optional[Iterable[str]] = None,
    windows: str = "packed",
    variant: Optional[str] = None,
    device: str = "auto",
    batch_size: int = 1,
    seed: int = 0,
    progress: bool = True,
    cancel: Optional[CancelToken] = None,
    tokenizer: Optional[PathLike] = None,
    threads: Optional[int] = None,
    probe: Optional[str] = None,
    map_size: int = 256,
    role_sink: float = 0.5,
    role_local_window: int = 16,
    role_local: float = 0.5,
    role_prev: float = 0.4,
    role_induction: float = 0.4,
) -> Result:
    """Every attention metric of `models` in one pass, as `asa-analyze analyze`.

    models: a path or Hub id, a list of them, or a {label: path} dict. A model held in
        memory stands where a path would: a transformers model, or a `(config, state_dict)`
        pair (config a dict or a transformers config; tensors torch or numpy, float32,
        float16, bfloat16 or float64), analysed as the checkpoint `save_pretrained` would
        write of it, without writing it (CPU tensors are read in place).
    tokenizer: a tokenizer.json for a text corpus (a model in memory has none of its own;
        token ids need none).
    corpus: a text or token-id file, a list of texts, or token ids (a 2-D numpy array or a
        list of lists); default the built-in generated prose (`seed`).
    probe: "induction" for the built-in induction probe instead of a corpus, as
        `--probe induction`: windows of BOS, L random token ids (from `seed`) and the same L
        again, `seq_len` = 2L + 1 (odd); induction_score joins the default metrics and
        `head_roles` gets its column.
    metrics: metric names (e.g. ["first_token", "entropy"]); default the `analyze` set.
        "block_map" (not a default) adds the `block_map` frame: per (layer, head, and the
        mean over heads) the mean and max attention weight of each cell of a G x G grid of
        query x key blocks, G = min(`map_size`, `seq_len`) (`--map-size`, default 256).
    map_size: block_map's side G, as `--map-size`.
    role_sink, role_local_window, role_local, role_prev, role_induction: the thresholds of
        the `head_role` metric (a default; the `head_roles` frame), as `--role-sink` (0.5),
        `--role-local-window` (16 keys), `--role-local` (0.5), `--role-prev` (0.4) and
        `--role-induction` (0.4); docs/head-roles.md says
        where each rule comes from.
    windows: "packed" (documents joined with EOS, cut into consecutive windows) or
        "documents" (each window the start of its own document).
    variant: analyse every model as this attention variant ("off_by_one", "sink", ...)
        whatever its config.json names; default the detected one (`.run["models"]` says
        how each was detected).
    progress: a tqdm bar (a plain one without tqdm); False for none.
    cancel: a `CancelToken` whose `cancel()` (from any thread) stops this run at its next
        query block, raising `Cancelled` with nothing returned or written.
    threads: run on this many threads of a pool of its own (beside a training loop, so as
        not to take every core from it); default every core.

    A model in memory on a GPU is copied to the host once; run.json's model record says what
    that copy cost (`.run["models"][i]["host_copy"]`: device, tensors, bytes, seconds).
    """
    pairs, memory = _models(models)
    with tempfile.TemporaryDirectory(prefix="asa-analyze-") as tmp:
        native = _native.analyze(
            pairs,
            metrics=None if metrics is None else list(metrics),
            corpus=_corpus(corpus, tmp),
            probe=probe,
            seq_len=seq_len,
            num_seqs=num_seqs,
            bos=bos,
            windows=windows,
            variant=variant,
            device=device,
            batch_size=batch_size,
            seed=seed,
            events=_Progress() if progress else _Quiet(),
            cancel=cancel,
            memory=memory,
            tokenizer=None if tokenizer is None else os.fspath(tokenizer),
            threads=threads,
            map_size=map_size,
            role_sink=role_sink,
            role_local_window=role_local_window,
            role_local=role_local,
            role_prev=role_prev,
            role_induction=role_induction,
        )
    return Result(native)


@_python_errors
def entropy(models: Models, **kwargs: Any) -> Result:
    """Attention entropy per layer and head, as `asa-analyze entropy` (the arguments of
    `analyze`)."""
    return analyze(models, metrics=["entropy"], **kwargs)


@_python_errors
def inspect(model: Any) -> Dict[str, Any]:
    """What `asa-analyze inspect --json` says of a checkpoint (folder, GGUF file or Hub id),
    or of a model held in memory (a transformers model or a `(config, state_dict)` pair:
    what it says of the checkpoint `save_pretrained` would write)."""
    if _in_memory(model):
        return json.loads(_native.inspect("", memory=("model", *_held("model", model))))
    return json.loads(_native.inspect(os.fspath(model)))


class Report:
    """An HTML report (`asa-analyze report`): `.html` the page's text, `.path` the file it
    was written to (if any); a notebook shows it inline (in a sandboxed frame)."""

    def __init__(self, html: str, path: Optional[Path]) -> None:
        self.html = html
        self.path = path

    def write(self, path: PathLike) -> Path:
        """Writes the page to `path` (whole: through a temporary file beside it)."""
        import stat

        target = Path(path)
        if os.path.lexists(target) and not stat.S_ISREG(os.lstat(target).st_mode):
            raise IsADirectoryError(
                f"{target}: the report's destination exists and is not a regular file (a folder, device, "
                "FIFO, socket or link): name a new .html file"
            )
        # created exclusively (O_CREAT | O_EXCL): a planted link or FIFO is never opened through
        for attempt in range(16):
            tmp = target.with_name(f".{target.name}.{os.getpid()}.{attempt}.tmp")
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                break
            except FileExistsError:
                continue
        else:
            raise FileExistsError(f"{target}: no free temporary name beside it")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(self.html)
            os.replace(tmp, target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        self.path = target
        return target

    def _repr_html_(self) -> str:
        import html

        return (f'<iframe srcdoc="{html.escape(self.html, quote=True)}" sandbox="allow-scripts" '
                'style="width: 100%; height: 900px; border: 0"></iframe>')

    def __repr__(self) -> str:
        where = f" at {self.path}" if self.path else ""
        return f"<asa_analyze.Report{where}: {len(self.html) / 1e6:.1f} MB>"


@_python_errors
def report(results: Union[PathLike, Sequence[PathLike]], out: Optional[PathLike] = None) -> Report:
    """The self-contained HTML report of results folders, as `asa-analyze report` writes it
    (written to `out` when given); shown inline in a notebook."""
    if isinstance(results, (str, os.PathLike)):
        results = [results]
    results = [os.fspath(r) for r in results]
    if not results:
        raise UsageError("report needs at least one results folder")
    page = Report(_native.report(results), None)
    if out is not None:
        page.write(out)
    return page


@_python_errors
def merge(partials: Iterable[PathLike]) -> Result:
    """The tables of one run from the partial results of `asa-analyze analyze --shard K/N`
    (every shard, each once, of one run)."""
    return Result(_native.merge([os.fspath(p) for p in partials]))


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


class PaperTables:
    """The paper's Tables 1-3: `.frame` (one row per table x size x method x column, as
    `paper_tables.csv`), `.markdown` and `.latex` ({table number: text}); a notebook shows
    the Markdown."""

    def __init__(self, frame: "pl.DataFrame", texts: List[Any]) -> None:
        self.frame = frame
        self.markdown: Dict[int, str] = {n: md for n, md, _ in texts}
        self.latex: Dict[int, str] = {n: tex for n, _, tex in texts}

    def __repr__(self) -> str:
        return "\n".join(self.markdown.values())

    def _repr_markdown_(self) -> str:
        return self.__repr__()


@_python_errors
def tables(
    runs: Optional[Mapping[str, Mapping[str, Any]]] = None,
    manifest: Optional[PathLike] = None,
    table3: Optional[Sequence[str]] = None,
    loss_window: Optional[int] = None,
    loss_metric: Optional[str] = None,
    accuracy: Optional[Mapping[str, str]] = None,
) -> PaperTables:
    """The paper's Tables 1-3, as `asa-analyze tables`.

    runs: {"SIZE/METHOD": {"checkpoint": ..., "log": ..., "results": ..., "lm_eval": ...}}
        (any of the four; lm_eval a path or a list), e.g. {"1B/asa": {"lm_eval": "eval.json"}};
        and/or manifest: a TOML or JSON manifest. table3: Table 3's methods in order;
        loss_window: final-loss window in steps (default 100); accuracy: {task: metric}.
    """
    inputs = []
    for key, given in (runs or {}).items():
        for kind, value in given.items():
            values = value if isinstance(value, (list, tuple)) else [value]
            inputs.extend((kind, f"{key}={os.fspath(v)}") for v in values)
    frames, texts = _native.tables(
        inputs,
        manifest=None if manifest is None else os.fspath(manifest),
        table3=list(table3 or []),
        loss_window=loss_window,
        loss_metric=loss_metric,
        accuracy=[f"{k}={v}" for k, v in (accuracy or {}).items()],
    )
    return PaperTables(frames[0][1], texts)


@_python_errors
def figures(results: Union[PathLike, Sequence[PathLike]], out: PathLike) -> List[Path]:
    """Every paper figure the tables of `results` (folders written by `analyze`, the log
    commands or `Result.write`) allow, PNG + SVG, into `out`, as `asa-analyze figures`."""
    if isinstance(results, (str, os.PathLike)):
        results = [results]
    return [Path(p) for p in _native.figures([os.fspath(r) for r in results], os.fspath(out))]
