"""Issue 54: the Python entry points' fuzz harness (`fuzz_entry_points.py`) with a fixed
seed, in a process of its own so that a case that kills the interpreter is caught and
named. `ASA_FUZZ_SEED` and `ASA_FUZZ_PY_CASES` choose other cases (`tools/fuzz.sh`)."""

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parents[1] / "tests" / "fixtures"


def test_entry_points_return_or_raise_value_type_or_os_errors():
    seed = os.environ.get("ASA_FUZZ_SEED", "54")
    cases = os.environ.get("ASA_FUZZ_PY_CASES", "150")
    done = subprocess.run(
        [sys.executable, str(HERE / "fuzz_entry_points.py"), str(FIXTURES), seed, cases],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    lines = done.stdout.splitlines()
    last_case = next((l for l in reversed(lines) if l.startswith("case ")), "before any case")
    assert done.returncode in (0, 1), (
        f"the interpreter ended with status {done.returncode} in {last_case}\n{done.stderr[-3000:]}"
    )
    defects = [l for l in lines if l.startswith("DEFECT")]
    assert not defects, "\n".join(defects) + "\n" + done.stderr[-3000:]
    assert lines[-1].startswith(f"fuzz-python: {cases} cases"), done.stdout[-2000:]
