"""Issue 54: a fuzz harness for the Python entry points. Each case calls one of
`analyze`, `inspect`, `report`, `Report.write`, `merge`, `grad_stats`, `spikes`, `curves`,
`figures`, `Monitor` with arguments at the edges of their types (integers past u64,
floats where integers go, NaN, strings, nested and ragged lists, arrays of odd dtypes,
models in memory with odd tensors, damaged files, hostile destinations). A case must return
or raise a ValueError, TypeError or OSError (the package's own errors derive from
ValueError); anything else (a PanicException, an OverflowError, a RuntimeError, the
interpreter dying) is a defect.

    python fuzz_entry_points.py FIXTURES SEED CASES

prints each case before it runs (so that a crash names it) and ends with a count line:
`fuzz-python: N cases, X returned, Y refused, Z defects`; exit status 1 when Z > 0.
`python/tests/test_fuzz.py` runs it with a fixed seed; `tools/fuzz.sh` with fresh ones.
"""

import math
import os
import random
import shutil
import sys
import tempfile
import traceback

import numpy as np

import asa_analyze as asa

ALLOWED = (ValueError, TypeError, OSError)

INTEGERS = [0, 1, 2, 3, 16, -1, 2**31, 2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**100, -(2**70),
            1.5, 3.7, math.nan, math.inf, "16", None, True, [16], b"16"]
REALS = [0.0, -0.0, 5e-324, 0.5, 1.0, 1e308, math.inf, -math.inf, math.nan, -1.0, 2**64,
         "0.5", None, [0.5]]
TEXTS = ["", "all", "5..3", "0..0", "18446744073709551615..", "-1..5", "a..b", "\x00",
         "first_token", "block_map", "é" * 300, None, 7]


def _ids(rng):
    """Token ids of every shape and type a caller might hand over."""
    choices = [
        [[1, 2, 3, 4]],
        [[1.0, 2.5, 3, 4]],
        [[3.7] * 8],
        [[-1, 2, 3, 4]],
        [[2**40, 2, 3, 4]],
        [[2**64, 1]],
        [[1, 2, 3], [4, 5]],
        [[]],
        [],
        [[[1, 2], [3, 4]]],
        [["a", "b"]],
        [[None, 1]],
        [[True, False, True]],
        np.array([[1, 2, 3, 4]], dtype=np.int64),
        np.array([[1, 2, 3, 4]], dtype=np.uint64),
        np.array([[1.5, 2, 3, 4]], dtype=np.float32),
        np.array([[1, 2, 3, 4]], dtype=np.int8),
        np.array([1, 2, 3, 4]),
        np.zeros((2, 0), dtype=np.int64),
        np.array([[1, 2, 3, 4]], dtype=np.int64)[:, ::2],
        "not ids",
    ]
    return rng.choice(choices)


def _memory_model(rng, fixtures):
    """A `(config, state_dict)` pair of the tiny model with one field or tensor made odd."""
    import json
    from safetensors.numpy import load_file

    folder = os.path.join(fixtures, "models", "llama_gqa")
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    state = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".safetensors"):
            state.update(load_file(os.path.join(folder, name)))
    key = rng.choice(sorted(state))
    match rng.randrange(8):
        case 0:
            config[rng.choice(sorted(config))] = rng.choice(INTEGERS + REALS + TEXTS)
        case 1:
            state[key] = state[key].astype(rng.choice([np.int64, np.float16, np.uint8, np.bool_]))
        case 2:
            state[key] = state[key][..., :1]
        case 3:
            state[key] = np.full_like(state[key], rng.choice([np.nan, np.inf, 1e30]))
        case 4:
            del state[key]
        case 5:
            state["extra.weight"] = np.zeros((2, 2), dtype=np.float32)
        case 6:
            state[key] = state[key].T if state[key].ndim == 2 else state[key]
        case _:
            config = rng.choice([{}, [], "config", None])
    return (config, state)


def _results(fixtures, tmp, rng):
    """A results folder of the tiny model, one table damaged."""
    res = os.path.join(tmp, "res")
    model = os.path.join(fixtures, "models", "llama_gqa")
    out = asa.analyze(model, seq_len=16, num_seqs=2, progress=False,
                      metrics=["first_token", "entropy", "block_map", "head_role"], map_size=8)
    out.write(res, format=rng.choice(["csv", "parquet"]))
    victim = os.path.join(res, rng.choice(sorted(os.listdir(res))))
    data = bytearray(open(victim, "rb").read())
    for _ in range(rng.randrange(1, 5)):
        if not data:
            break
        at = rng.randrange(len(data))
        match rng.randrange(3):
            case 0:
                data[at] = rng.randrange(256)
            case 1:
                del data[at:]
            case _:
                data[at:at] = rng.choice([b"1e999", b"nan", b"\xff\xfe", b"99999999999", b","])
    open(victim, "wb").write(bytes(data))
    return res


def _destination(rng, tmp, res):
    """A `Report.write` or `figures` destination: new, existing, an input, a folder, a FIFO,
    a link, under a missing folder, empty."""
    match rng.randrange(8):
        case 0:
            return os.path.join(tmp, "page.html")
        case 1:
            path = os.path.join(tmp, "old.html")
            open(path, "w").write("earlier")
            return path
        case 2:
            return os.path.join(res, sorted(os.listdir(res))[0])
        case 3:
            return res
        case 4:
            path = os.path.join(tmp, "fifo.html")
            os.mkfifo(path)
            return path
        case 5:
            path = os.path.join(tmp, "link.html")
            os.symlink(os.path.join(tmp, "outside.txt"), path)
            return path
        case 6:
            return os.path.join(tmp, "missing", "page.html")
        case _:
            return ""


NUMERIC = ["seq_len", "num_seqs", "batch_size", "seed", "threads", "map_size",
           "role_local_window"]
REAL_OPTIONS = ["role_sink", "role_local", "role_prev", "role_induction"]


def case(rng, fixtures, tmp):
    """One case: its description and the call to make."""
    model = os.path.join(fixtures, "models", "llama_gqa")
    log = os.path.join(fixtures, "logs", "noisy.csv")
    kind = rng.randrange(10)
    if kind <= 2:
        kwargs = {"seq_len": 16, "num_seqs": 2, "progress": False}
        for _ in range(rng.randrange(1, 4)):
            if rng.random() < 0.6:
                kwargs[rng.choice(NUMERIC)] = rng.choice(INTEGERS)
            else:
                kwargs[rng.choice(REAL_OPTIONS)] = rng.choice(REALS)
        if rng.random() < 0.3:
            kwargs["metrics"] = rng.choice([["block_map"], ["head_role"], [], ["nope"], "entropy", [None]])
        if kwargs.get("seq_len") in (2**31, 2**63 - 1) and kwargs.get("num_seqs", 2) not in (0,):
            pass  # refused by the token cap before any work
        return f"analyze({kwargs})", lambda: asa.analyze(model, **kwargs)
    if kind == 3:
        ids = _ids(rng)
        return f"analyze(corpus={ids!r:.80})", lambda: asa.analyze(
            model, corpus=ids, seq_len=4, num_seqs=1, progress=False)
    if kind == 4:
        pair = _memory_model(rng, fixtures)
        return "analyze((config, state) made odd)", lambda: asa.analyze(
            {"m": pair}, seq_len=8, num_seqs=1, progress=False)
    if kind == 5:
        models = rng.choice(["", "/nonexistent", {"": model}, {"a=b": model}, [model, model],
                             42, None, (1, 2), ({}, {}), [], {"x": 3.5}, b"path"])
        fn = rng.choice([asa.analyze, asa.inspect])
        return f"{fn.__name__}({models!r:.60})", lambda: fn(models) if fn is asa.inspect else fn(
            models, seq_len=8, num_seqs=1, progress=False)
    if kind == 6:
        res = _results(fixtures, tmp, rng)
        open(os.path.join(tmp, "outside.txt"), "w").write("outside")
        dest = _destination(rng, tmp, res)
        which = rng.randrange(3)
        if which == 0:
            return f"report({res}).write({dest})", lambda: asa.report(res).write(dest)
        if which == 1:
            return f"report({res}, out={dest})", lambda: asa.report([res, res], out=dest)
        return f"figures({res}, {dest})", lambda: asa.figures(res, dest)
    if kind == 7:
        arg = rng.choice([[], [""], ["/nonexistent"], "x", [None], [tmp], 5])
        fn = rng.choice([asa.merge, asa.report])
        return f"{fn.__name__}({arg!r})", lambda: fn(arg)
    if kind == 8:
        which = rng.randrange(3)
        if which == 0:
            k = [rng.choice(REALS) for _ in range(rng.randrange(0, 3))]
            scale = rng.choice(REALS)
            steps = rng.choice(TEXTS)
            return f"spikes(k={k}, mad_scale={scale}, steps={steps!r:.40})", lambda: asa.spikes(
                log, k=k, mad_scale=scale, steps=steps)
        if which == 1:
            ddof = rng.choice(INTEGERS)
            steps = rng.choice(TEXTS)
            return f"grad_stats(ddof={ddof}, steps={steps!r:.40})", lambda: asa.grad_stats(
                log, ddof=ddof, steps=steps)
        ema = rng.choice(REALS)
        return f"curves(ema={ema})", lambda: asa.curves(log, ema=ema, steps=rng.choice(TEXTS))
    every = rng.choice(INTEGERS)
    probe = _ids(rng)
    threads = rng.choice([1, None, 0, -1, 2**64, 1.5])
    options = {rng.choice(NUMERIC[:3]): rng.choice(INTEGERS)}

    def monitor():
        m = asa.Monitor(probe, every=every, threads=threads, **options)
        pair = _memory_model(rng, fixtures) if rng.random() < 0.5 else model
        m(pair, rng.choice([0, 1, 2**63 - 1, 2**63, -1, 1.5, True]))
        m.wait() if hasattr(m, "wait") else None
        return m.series() if hasattr(m, "series") else None

    return f"Monitor(every={every}, threads={threads}, {options}, probe={probe!r:.60})", monitor


def main():
    fixtures, seed, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    returned = refused = 0
    defects = []
    for k in range(count):
        rng = random.Random(seed * 1_000_003 + k)
        tmp = tempfile.mkdtemp(prefix="asa-fuzz-py-")
        try:
            what, call = case(rng, fixtures, tmp)
            print(f"case {k}: {what}", flush=True)
            try:
                call()
                returned += 1
            except ALLOWED:
                refused += 1
            except BaseException as e:  # noqa: BLE001 - what is not allowed is the finding
                if isinstance(e, KeyboardInterrupt):
                    raise
                defects.append(f"case {k} (seed {seed}): {what}: {type(e).__name__}: {e}")
                traceback.print_exc()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    for d in defects:
        print("DEFECT", d, flush=True)
    print(f"fuzz-python: {count} cases, {returned} returned, {refused} refused, "
          f"{len(defects)} defects", flush=True)
    sys.exit(1 if defects else 0)


if __name__ == "__main__":
    main()
