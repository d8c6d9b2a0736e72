#!/usr/bin/env python3
"""Executes the notebooks top to bottom against an inputs folder; exit status 1 if any fails.

    ASA_NOTEBOOK_INPUT=DIR python notebooks/run_notebooks.py [NOTEBOOK ...] [--save DIR]

DIR is what notebooks/make_inputs.sh wrote (default target/notebook-inputs). Without
NOTEBOOK arguments every notebooks/*.ipynb runs. A committed notebook must hold no outputs
(that is checked first). `--save DIR` writes the executed copies, outputs included, there;
`--clear` only strips outputs from the notebooks in place (before committing) and runs nothing.
The kernel is this interpreter (a kernelspec written to a temporary folder), so the notebooks
see exactly the packages of the environment running this script.
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
KERNEL = "asa-notebooks"


def stored_outputs(nb) -> list[int]:
    """Indices of code cells that carry outputs or an execution count."""
    return [
        i
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code" and (c.get("outputs") or c.get("execution_count") is not None)
    ]


def clear(nb) -> None:
    for c in nb.cells:
        if c.cell_type == "code":
            c.outputs, c.execution_count = [], None
            c.metadata.pop("execution", None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("notebooks", nargs="*", type=Path, help="default: notebooks/*.ipynb")
    ap.add_argument("--save", type=Path, help="write the executed notebooks into this folder")
    ap.add_argument("--clear", action="store_true", help="strip outputs in place and exit")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per cell (default 600)")
    args = ap.parse_args()

    paths = args.notebooks or sorted(HERE.glob("*.ipynb"))
    if args.clear:
        for path in paths:
            nb = nbformat.read(path, as_version=4)
            clear(nb)
            nbformat.write(nb, path)
            print(f"cleared {path}")
        return 0

    inputs = Path(os.environ.get("ASA_NOTEBOOK_INPUT", REPO / "target" / "notebook-inputs")).resolve()
    if not inputs.is_dir():
        print(f"notebooks: inputs folder {inputs} does not exist; run notebooks/make_inputs.sh", file=sys.stderr)
        return 2
    os.environ["ASA_NOTEBOOK_INPUT"] = str(inputs)
    os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")

    if not paths:
        print("notebooks: no notebooks found", file=sys.stderr)
        return 2
    if args.save:
        args.save.mkdir(parents=True, exist_ok=True)

    # A kernelspec for this interpreter, first on JUPYTER_PATH, so no other installed
    # `python3` kernel is picked up instead.
    from ipykernel.kernelspec import write_kernel_spec

    kernels = tempfile.TemporaryDirectory(prefix="asa-nb-kernels-")
    write_kernel_spec(Path(kernels.name) / "kernels" / KERNEL)
    os.environ["JUPYTER_PATH"] = os.pathsep.join(filter(None, [kernels.name, os.environ.get("JUPYTER_PATH")]))

    print(f"notebooks: inputs {inputs}, python {sys.executable}")
    passed, failed = [], []
    for path in paths:
        path = path.resolve()
        start = time.monotonic()
        nb = nbformat.read(path, as_version=4)
        dirty = stored_outputs(nb)
        if dirty:
            failed.append(path.name)
            print(f"FAIL {path.name}: committed with stored outputs in cells {dirty} (clear them before committing)")
            continue
        client = NotebookClient(
            nb,
            timeout=args.timeout,
            kernel_name=KERNEL,
            resources={"metadata": {"path": str(path.parent)}},
        )
        try:
            client.execute()
            passed.append(path.name)
            status = "ok  "
            detail = ""
        except (CellExecutionError, CellTimeoutError, DeadKernelError) as e:
            failed.append(path.name)
            status = "FAIL"
            detail = "\n" + str(e)
        if args.save:
            nbformat.write(nb, args.save / path.name)
        print(f"{status} {path.name} ({time.monotonic() - start:.1f} s){detail}", flush=True)

    kernels.cleanup()
    print(f"notebooks: {len(passed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
