"""Checks examples/k8s/analyze-job.yaml as far as can be done without a cluster (issue 26):
it parses as YAML into two batch/v1 Jobs; the first is an Indexed Job whose every pod runs
`asa-analyze analyze ... --shard-count N` with N equal to `completions` and writes to a
per-index folder named by $(JOB_COMPLETION_INDEX) under the shared volume's /results; the
second merges /results/shard-* from the same claim. The environment-variable path itself is
tested by tests/it/shards.rs (JOB_COMPLETION_INDEX with --shard-count). Needs PyYAML."""

import re
import sys

import yaml


def main(path):
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    assert len(docs) == 2, f"expected the analyze and merge Jobs, got {len(docs)} documents"
    analyze, merge = docs
    for job in docs:
        assert job["apiVersion"] == "batch/v1" and job["kind"] == "Job", job.get("kind")
    spec = analyze["spec"]
    assert spec["completionMode"] == "Indexed"
    n, p = spec["completions"], spec["parallelism"]
    assert isinstance(n, int) and n >= 1 and isinstance(p, int) and 1 <= p <= n, (n, p)
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    (container,) = pod["containers"]
    command = " ".join(container["command"] + container["args"])
    assert "asa-analyze analyze" in command, command
    count = re.search(r"--shard-count (\d+)", command)
    assert count and int(count.group(1)) == n, f"--shard-count must equal completions {n}: {command}"
    assert "--out /results/shard-$(JOB_COMPLETION_INDEX)" in command, command
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert "/results" in mounts, mounts
    claim = pod["volumes"][0]["persistentVolumeClaim"]["claimName"]
    mpod = merge["spec"]["template"]["spec"]
    (mcontainer,) = mpod["containers"]
    mcommand = " ".join(mcontainer["command"] + mcontainer["args"])
    assert "asa-analyze merge /results/shard-*" in mcommand, mcommand
    assert mpod["volumes"][0]["persistentVolumeClaim"]["claimName"] == claim
    assert "/results" in {m["mountPath"] for m in mcontainer["volumeMounts"]}
    print(f"k8s: {path}: an Indexed Job of {n} shards ({p} at a time) and its merge Job check out")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "examples/k8s/analyze-job.yaml")
