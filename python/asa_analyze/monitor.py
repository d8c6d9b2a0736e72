"""Attention statistics while a model trains, for any training loop (nanoGPT, torchtitan,
accelerate, a notebook): `Monitor` takes a snapshot of the weights when asked and analyses
it on a background thread (the analysis releases the GIL) while training goes on.

    mon = asa.Monitor(probe=ids, every=100)          # token ids [sequences, tokens], or texts
    for step in range(steps):
        ...train...
        mon(model, step)                             # every 100 steps: a snapshot, analysed
    mon.wait()
    mon.series                                       # attention_series: step, metric, layer, ...
    mon.write("results/run")                         # attention_series.csv beside the others

At most one analysis is in flight: a request while one runs is skipped and counted
(`skipped`), so training never waits. A failing analysis warns once and never stops
training; a model the Monitor cannot read (no transformers config inside its wrappers) or
a probe longer than the model's positions warns once and turns it off (`disabled`): the
training loop never sees an exception from it (the callbacks refuse such a probe before
training starts). Each row carries the step whose weights were analysed. The analysis runs on
`threads` threads of its own (default 1: one probe batch is small beside `every` training
steps, and the other cores stay with the training loop and its data loader).

The training batch itself can be analysed instead of a probe: inside `mon.capture(model,
step)` the step's own forward goes through the "asa" attention backend every `every` steps
(no copy of the weights, no second forward; gradients are SDPA's), and its attention rows
join `series` at that step. Under DDP each rank captures its own batch and rank 0 merges
the ranks' exact partial statistics (the result of one process that saw every rank's batch):

    mon = asa.Monitor(every=100)
    for step, batch in enumerate(loader):
        with mon.capture(model, step):
            loss = model(**batch).loss
        loss.backward(); opt.step(); opt.zero_grad()

A capture that cannot honour the model (docs/capture.md) warns once and turns the Monitor
off; the step goes on through SDPA.

The Hugging Face Trainer and Lightning get the same as callbacks that log to the trainer's
own loggers: `asa_analyze.callbacks.AttentionStats`, `LightningAttentionStats`.

Sharded training (torchrun, accelerate, Lightning, the Trainer; DDP, FSDP, FSDP2, tensor
parallel): call the Monitor on every rank with the wrapped model, at the same steps. Rank 0
decides whether a step is analysed and every rank follows, so the collective gather of the
full weights (FSDP, FSDP2, tensor parallel) is made by all ranks or by none; rank 0 alone
analyses, logs and holds `series`, the others return at once. A model the Monitor cannot
read, or a gather that fails, warns once on rank 0 and turns the Monitor off on every rank;
training goes on. Each analysed step's gather time and bytes are in `gathers`.
"""

from __future__ import annotations

import os
import operator
import threading
import time
import warnings
from pathlib import Path
import contextlib
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

from . import _distributed

DEFAULT_METRICS = ("first_token", "sink_rate", "entropy", "max_logit", "qk_mean", "weight_sum")


def _snapshot(model: Any) -> tuple:
    """(config, state_dict) of `model` (a transformers model in any DDP / DataParallel /
    torch.compile wrapper, or a (config, state_dict) pair) with every tensor copied to the
    host now, so that training may change the weights while the copy is analysed."""
    import numpy as np

    if isinstance(model, tuple):
        config, state = model
    else:
        inner = _distributed.unwrap(model)
        config, state = inner.config, inner.state_dict()
    copied = {}
    for name, value in state.items():
        if type(value).__module__.startswith("torch"):
            copied[name] = value.detach().to("cpu", copy=True)
        else:
            copied[name] = np.array(value, copy=True)
    return _config_dict(config), copied


def _config_dict(config: Any) -> dict:
    if hasattr(config, "to_dict"):
        config = config.to_dict()
    return dict(config)


class Monitor:
    """Analyses a training model's attention every `every` steps on `probe` (token ids as a
    2-D array or list of lists, or texts with `tokenizer`), in the background.

    metrics: registry names (default first_token, sink_rate, entropy, max_logit, qk_mean,
        weight_sum). log: called as `log(values, step)` with `{"attn/<metric>/layer_03":
        value, ...}` (per-layer means; per head too, `.../layer_03/head_05`, with
        `per_head`) once a step's analysis is done, from the analysis thread: hand it your
        logger's `log`. label: the model's name in the tables. threads: the analysis'
        threads (None: every core). Other keywords go to `asa_analyze.analyze` with its
        names and defaults (seq_len, num_seqs, map_size, role_sink, role_local_window,
        role_local, role_prev, role_induction, ...). The series
        keeps the attention table's rows (first_token ... max_logit); the block_map and
        head_roles tables are not attention rows and are not kept per step.
    """

    def __init__(
        self,
        probe: Any = None,
        every: int = 1,
        metrics: Sequence[str] = DEFAULT_METRICS,
        label: str = "model",
        log: Optional[Callable[[Dict[str, float], int], Any]] = None,
        tokenizer: Optional[Any] = None,
        per_head: bool = False,
        threads: Optional[int] = 1,
        **analyze_options: Any,
    ) -> None:
        if every < 1:
            raise ValueError("every must be at least 1")
        if threads is not None and threads < 1:
            raise ValueError("threads must be at least 1")
        self.probe = _checked_probe(probe)
        # the probe's ids against the model's vocabulary: at the first request
        self._vocabulary_checked = False
        self.every = every
        self.metrics = list(metrics)
        self.label = label
        self.log = log
        self.tokenizer = tokenizer
        self.per_head = per_head
        self.options = dict(analyze_options, threads=threads)
        self.skipped = 0
        self.gathers: List[Dict[str, Any]] = []
        self.disabled = False
        # one block of rows per analysed step: a step analysed again replaces its rows
        self._frames: Dict[int, Any] = {}
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()
        self._warned = False

    def __call__(self, model: Any, step: int) -> bool:
        """Asks for an analysis of `model`'s weights at `step` (every `every` steps): True when
        one started, False when not due or skipped because one is still running."""
        if step % self.every != 0:
            return False
        return self.request(model, step)

    @contextlib.contextmanager
    def capture(self, model: Any, step: int) -> Iterator[Any]:
        """A block whose forward passes of `model` (a transformers model in any DDP / FSDP /
        torch.compile wrapper) are captured at `step` when it is due (every `every` steps;
        every rank at the same steps); their attention rows join `series` at `step`. Yields
        the capture (None when not due or off)."""
        _check_step(step)
        if step % self.every != 0 or self.disabled:
            yield None
            return
        from ._capture import capture

        ranks = _distributed.world()
        rank, world = ranks if ranks is not None else (0, 1)
        cap = None
        try:
            inner = _distributed.unwrap(model)
            cap = capture(inner, metrics=self.metrics, label=self.label)
            cap.tolerant = True
            if ranks is not None:
                cap._place(rank, world)
        except Exception as e:  # a model the capture cannot read: off, the step goes on
            cap = None
            problem = f"cannot capture a {type(model).__name__}: {e}"
        if cap is None:
            yield None
        else:
            with cap:
                yield cap
            problem = cap.failed
        if ranks is not None and not _distributed.all_agree(problem is None):
            problem = problem or "another rank's capture stopped"
        if problem is not None:
            self._turn_off(rank, step, problem)
            return
        self._merge_and_keep(cap, step, rank, ranks is not None)

    def _merge_and_keep(self, cap: Any, step: int, rank: int, distributed: bool) -> None:
        """Rank 0: the ranks' states merged, the result's attention rows kept for `step`."""
        if distributed:
            import torch.distributed as dist

            state = cap._state()
            states = [None] * dist.get_world_size() if rank == 0 else None
            dist.gather_object(state, states, dst=0)
            if rank != 0:
                return
            for other in states[1:]:
                cap._merge_state(other)
        try:
            att = cap.result().attention
        except Exception as e:
            self._turn_off(rank, step, f"the capture of step {step} failed: {e}")
            return
        self._keep(att, step)

    def _keep(self, att: Any, step: int) -> None:
        """A step's attention rows into the series (replacing an earlier block of the same
        step), and the log."""
        import polars as pl

        # a captured model's stacks are models of their own in the series (`model/stack`)
        model = pl.col("model") + "/" + pl.col("stack") if "stack" in att.columns else pl.col("model")
        frame = att.select(
            model.alias("model"),
            pl.lit(step, dtype=pl.Int64).alias("step"),
            pl.col("metric"),
            pl.col("layer"),
            pl.col("head"),
            pl.col("stat"),
            pl.col("value"),
        )
        with self._lock:
            self._frames[step] = frame
        if self.log is not None:
            self.log(_log_values(att, self.per_head), step)

    def request(self, model: Any, step: int) -> bool:
        """Asks for an analysis of `model`'s weights at `step` now, due or not (at an
        evaluation, say): True when one started, False when skipped because one is still
        running (or the Monitor is off). In a distributed job every rank must ask at the same
        steps; rank 0 decides for all."""
        _check_step(step)
        if self.probe is None:
            raise ValueError("this Monitor has no probe: analyse the training batch with mon.capture(model, step)")
        ranks = _distributed.world()
        if ranks is not None:
            return self._request_distributed(model, step, ranks[0])
        with self._lock:
            if self.disabled:
                return False
            if self._in_flight():
                self.skipped += 1
                return False
            start = time.perf_counter()
            try:
                snapshot = _snapshot(model)
            except Exception as e:  # a wrapper this does not know: off, training goes on
                return self._turn_off(0, step, f"cannot read a {type(model).__name__}: {e}")
            self._check_vocabulary(snapshot[0])
            problem = self._probe_problem(snapshot[0])
            if problem is not None:
                return self._turn_off(0, step, problem)
            self._record_gather(step, start, snapshot[1], world_size=1)
            self._start(snapshot, step)
        return True

    def _in_flight(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _start(self, snapshot: tuple, step: int) -> None:
        self._thread = threading.Thread(
            target=self._analyse, args=(snapshot, step), name=f"asa-monitor-{step}", daemon=True
        )
        self._thread.start()

    def _record_gather(self, step: int, start: float, state: Dict[str, Any], world_size: int) -> None:
        size = sum(getattr(v, "nbytes", 0) or v.numel() * v.element_size() for v in state.values())
        self.gathers.append({"step": step, "seconds": time.perf_counter() - start, "bytes": size,
                             "world_size": world_size})

    def _request_distributed(self, model: Any, step: int, rank: int) -> bool:
        """`request` on every rank: rank 0's decision broadcast, the model's readability
        agreed, the full state gathered onto rank 0's host, rank 0's analysis started."""
        with self._lock:
            busy = rank == 0 and not self.disabled and self._in_flight()
            if busy:
                self.skipped += 1
            go, off = _distributed.broadcast((rank == 0 and not self.disabled and not busy, self.disabled))
            self.disabled = off
            if not go:
                return False
            try:
                inner, config = _distributed.unwrap(model), None
                config = _config_dict(inner.config)
                problem = None
            except Exception as e:  # a wrapper this does not know: off everywhere, no gather
                problem = f"cannot read a {type(model).__name__}: {e}"
            if not _distributed.all_agree(problem is None):
                return self._turn_off(rank, step, problem or "another rank cannot read its model")
            # every rank reads the same config: they agree without a collective (and raise
            # together on ids past its vocabulary)
            self._check_vocabulary(config)
            problem = self._probe_problem(config)
            if problem is not None:
                return self._turn_off(rank, step, problem)
            start = time.perf_counter()
            try:
                state = _distributed.full_state(model, inner, rank)
                problem = None
            except Exception as e:
                state, problem = {}, f"gathering the weights failed: {e}"
            if not _distributed.all_agree(problem is None):
                return self._turn_off(rank, step, problem or "another rank failed to gather its weights")
            if rank != 0:
                return True
            self._record_gather(step, start, state, world_size=_distributed.world()[1])
            self._start((config, state), step)
        return True

    def _check_vocabulary(self, config: Any) -> None:
        """At the first request, once: raises `UsageError` when a probe id is past the
        model's vocabulary (the Monitor is then off: a setting to fix, raised before training
        goes on, not a warning at every analysis)."""
        if self._vocabulary_checked:
            return
        self._vocabulary_checked = True
        problem = self._vocabulary_problem(config)
        if problem is not None:
            from . import UsageError

            self.disabled = True
            raise UsageError(problem)

    def _vocabulary_problem(self, config: Any) -> Optional[str]:
        """What is wrong with the probe's ids for a model of `config`: an id past its
        vocabulary; None when nothing is (or the probe is texts)."""
        if hasattr(config, "to_dict"):
            config = config.to_dict()
        if not isinstance(config, dict) or not _is_ids(self.probe):
            return None
        vocab = config.get("vocab_size") or (config.get("text_config") or {}).get("vocab_size")
        import numpy as np

        largest = int(np.asarray(self.probe).max())
        if vocab and largest >= vocab:
            return f"probe: token id {largest} is past the model's vocabulary of {vocab} ids"
        return None

    def _turn_off(self, rank: int, step: int, problem: str) -> bool:
        """Off on this rank (every rank calls it in agreement); one warning, on rank 0."""
        self.disabled = True
        if rank == 0 and not self._warned:
            warnings.warn(f"asa_analyze.Monitor: turned off at step {step}: {problem}", stacklevel=3)
            self._warned = True
        return False

    def _probe_problem(self, config: Any) -> Optional[str]:
        """What `check_probe` would raise for `config`, found late (training goes on)."""
        from . import UsageError

        try:
            self.check_probe(config)
        except UsageError as e:
            return str(e)
        return None

    def check_probe(self, config: Any) -> None:
        """Raises `UsageError` when the probe's sequences (token ids) are longer than the
        model's positions, or an id is past its vocabulary: a setting to fix before training,
        not an analysis failure."""
        from . import UsageError

        if hasattr(config, "to_dict"):
            config = config.to_dict()
        positions = config.get("max_position_embeddings") if isinstance(config, dict) else None
        length = self.options.get("seq_len") or (len(self.probe[0]) if _is_ids(self.probe) else None)
        if positions and length and length > positions:
            raise UsageError(
                f"probe: {length} tokens per sequence exceed the model's max_position_embeddings "
                f"{positions}; give a shorter probe (or seq_len=)"
            )
        problem = self._vocabulary_problem(config)
        if problem is not None:
            raise UsageError(problem)

    def _analyse(self, snapshot: tuple, step: int) -> None:
        from . import analyze

        try:
            options = dict(self.options)
            if _is_ids(self.probe):
                # token ids: their own length and count, unless asked otherwise
                options.setdefault("seq_len", len(self.probe[0]))
                options.setdefault("num_seqs", len(self.probe))
            res = analyze(
                {self.label: snapshot},
                corpus=self.probe,
                metrics=self.metrics,
                progress=False,
                tokenizer=self.tokenizer,
                **options,
            )
        except Exception as e:  # a failing analysis never stops training
            if not self._warned:
                warnings.warn(f"asa_analyze.Monitor: the analysis of step {step} failed: {e}", stacklevel=2)
                self._warned = True
            # in a distributed job rank 0 stops asking, and the others follow its decision
            self.disabled = _distributed.world() is not None
            return
        self._keep(res.attention, step)

    def wait(self) -> None:
        """Waits for the analysis in flight (call it at the end of training)."""
        thread = self._thread
        if thread is not None:
            thread.join()

    @property
    def series(self) -> Any:
        """The `attention_series` table so far (model, step, metric, layer, head, stat,
        value), one block of rows per analysed step, in step order (a step analysed twice
        keeps its later rows, as `watch` replaces them)."""
        import polars as pl

        with self._lock:
            frames = [self._frames[step] for step in sorted(self._frames)]
        if not frames:
            return pl.DataFrame(
                schema={"model": pl.String, "step": pl.Int64, "metric": pl.String, "layer": pl.Int64,
                        "head": pl.Int64, "stat": pl.String, "value": pl.Float64}
            )
        return pl.concat(frames).sort("step", maintain_order=True)

    def write(self, dir: Any) -> Path:
        """Writes `attention_series.csv` into `dir` (created), as `watch` writes it, and
        beside it `attention_series.run.json`: each analysed step's weight copy or gather
        (seconds, bytes, world size) and the skipped requests."""
        import json

        path = Path(dir)
        path.mkdir(parents=True, exist_ok=True)
        out = path / "attention_series.csv"
        tmp = path / ".attention_series.csv.tmp"
        self.series.write_csv(tmp)
        os.replace(tmp, out)
        record = {"gathers": self.gathers, "skipped": self.skipped, "disabled": self.disabled}
        tmp = path / ".attention_series.run.json.tmp"
        tmp.write_text(json.dumps(record, indent=2) + "\n")
        os.replace(tmp, path / "attention_series.run.json")
        return out


def _check_step(step: Any) -> None:
    """Refuses a step the series cannot hold: a whole number from 0 to 2**63 - 1 (the
    tables' signed 64-bit step column, as `watch` refuses a larger step folder)."""
    if isinstance(step, bool):
        raise TypeError("step must be a whole number, got bool")
    try:
        step = operator.index(step)
    except TypeError:
        raise TypeError(f"step must be a whole number, got {type(step).__name__}") from None
    if not 0 <= step <= 2**63 - 1:
        raise ValueError(f"step {step} is outside 0..=2**63-1, the steps a series holds")


def _checked_probe(probe: Any) -> Any:
    """`probe` as given, when it is none, texts (a string, a path, a list of strings) or token
    ids (integers >= 0, [sequences, tokens], every row as long); anything else raises
    `UsageError` naming it, at construction (not as a warning at every analysis)."""
    from . import UsageError

    if probe is None or isinstance(probe, (str, bytes, os.PathLike)):
        return probe
    if isinstance(probe, (list, tuple)) and probe and all(isinstance(p, str) for p in probe):
        return probe
    import numpy as np

    try:
        ids = np.asarray(probe)
    except ValueError:
        raise UsageError("probe: token ids are [sequences, tokens]; its rows differ in length") from None
    if ids.dtype.kind not in "iu":
        raise UsageError(f"probe: token ids must be integers, not {ids.dtype} (texts: a list of strings)")
    if ids.ndim != 2 or 0 in ids.shape:
        raise UsageError(f"probe: token ids are [sequences, tokens], not of shape {list(ids.shape)}")
    if int(ids.min()) < 0:
        raise UsageError(f"probe: token id {int(ids.min())} is negative")
    return probe


def _is_ids(probe: Any) -> bool:
    """Whether `probe` is token ids (a 2-D array or a list of lists of ints)."""
    if isinstance(probe, (str, bytes, os.PathLike)):
        return False
    try:
        first = probe[0]
        return not isinstance(first, (str, bytes)) and len(first) > 0
    except (TypeError, IndexError, KeyError):
        return False


def _log_values(att: Any, per_head: bool = False) -> Dict[str, float]:
    """`{"attn/<metric>/layer_03": value}` of the per-layer means (and the whole-model means
    as `attn/<metric>`) of an attention frame; with `per_head`, each head's mean too as
    `attn/<metric>/layer_03/head_05`; a captured model's stacks as `attn/<stack>/<metric>/...`."""
    import polars as pl

    means = att.filter(pl.col("stat") == "mean")
    if not per_head:
        means = means.filter(pl.col("head").is_null())
    values: Dict[str, float] = {}
    for row in means.iter_rows(named=True):
        key = f"attn/{row['metric']}"
        if row.get("stack"):  # a captured model's stacks apart: attn/<stack>/<metric>/...
            key = f"attn/{row['stack']}/{row['metric']}"
        if row["layer"] is not None:
            key += f"/layer_{row['layer']:02d}"
            if row["head"] is not None:
                key += f"/head_{row['head']:02d}"
        values[key] = row["value"]
    return values
