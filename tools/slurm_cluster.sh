#!/usr/bin/env bash
# A single-node Slurm cluster on this machine, for the sharding test (issue 26): munged and
# slurmctld + slurmd with a localhost slurm.conf in a temporary folder (proctrack/linuxproc,
# task/none: works as root in a container), examples/slurm/analyze.sbatch submitted as a
# 4-task job array (sbatch --array=0-3 --wait), examples/slurm/merge.sbatch after it, and
# the merged tables compared with one process's run of the same work (to 1e-12 relative). The daemons it
# started are stopped by pid whatever happens. Needs Debian's slurmctld, slurmd,
# slurm-client and munge (.ci/run installs them) and a built binary:
#
#   tools/slurm_cluster.sh target/release/asa-analyze
set -euo pipefail
BIN=$(realpath "${1:?usage: tools/slurm_cluster.sh path/to/asa-analyze}")
ROOT=$(cd "$(dirname "$0")/.." && pwd)
D=$(mktemp -d /tmp/asa-slurm-XXXXXX)
chmod 755 "$D"
pids=()
stop() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do
        for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    done
    rm -rf "$D"
}
trap stop EXIT
started=$(date +%s)

# munge: its own key, socket and files in $D
dd if=/dev/urandom of="$D/munge.key" bs=1 count=1024 status=none
chmod 400 "$D/munge.key"
munged --force --key-file="$D/munge.key" --socket="$D/munge.socket" \
    --pid-file="$D/munged.pid" --log-file="$D/munged.log" --seed-file="$D/munged.seed"
for _ in $(seq 50); do [ -s "$D/munged.pid" ] && break; sleep 0.1; done
pids+=("$(cat "$D/munged.pid")")

node=$(slurmd -C | head -1)
mkdir -p "$D/state" "$D/spool"
cat > "$D/slurm.conf" <<CONF
ClusterName=asa-test
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$D/munge.socket
CredType=cred/munge
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd.pid
SlurmctldLogFile=$D/slurmctld.log
SlurmdLogFile=$D/slurmd.log
SlurmctldPort=16817
SlurmdPort=16818
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/builtin
SchedulerParameters=sched_min_interval=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
$node State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF="$D/slurm.conf"
slurmctld -f "$SLURM_CONF"
for _ in $(seq 50); do [ -s "$D/slurmctld.pid" ] && break; sleep 0.1; done
pids+=("$(cat "$D/slurmctld.pid")")
slurmd -f "$SLURM_CONF"
for _ in $(seq 50); do [ -s "$D/slurmd.pid" ] && break; sleep 0.1; done
pids+=("$(cat "$D/slurmd.pid")")
for _ in $(seq 100); do
    sinfo -h -o %t 2>/dev/null | grep -qE '^(idle|mix|alloc)' && break
    sleep 0.2
done
sinfo -N -o "%N %t %c" || { cat "$D"/slurm*.log; exit 1; }

# the work: two fixture models, 8 windows of 32 tokens, 4 shards (benches/shards.sh sets
# other work through ASA_SLURM_MODELS, ASA_SLURM_ARGS, ASA_SLURM_TASKS and ASA_SLURM_CPUS)
models=${ASA_SLURM_MODELS:-"base=$ROOT/tests/fixtures/models/sink asa=$ROOT/tests/fixtures/models/affine_scaled"}
args=${ASA_SLURM_ARGS:-"--seq-len 32 --num-seqs 8 --metrics first_token,entropy,weight_sum,qk_mean,nll,heatmap,distance_profile"}
tasks=${ASA_SLURM_TASKS:-4}
cpus=${ASA_SLURM_CPUS:-1}
out="$D/results"
mkdir -p "$out"
cd "$D"
t0=$(date +%s.%N)
ASA_BIN="$BIN" ASA_MODELS="$models" ASA_ARGS="$args" ASA_OUT="$out" \
    sbatch --array=0-$((tasks - 1)) --cpus-per-task="$cpus" --wait "$ROOT/examples/slurm/analyze.sbatch" \
    || { cat "$D"/asa-analyze-*.log "$D"/slurm*.log; exit 1; }
t1=$(date +%s.%N)
ASA_BIN="$BIN" ASA_OUT="$out" ASA_MERGE_ARGS="--quiet" \
    sbatch --wait "$ROOT/examples/slurm/merge.sbatch" \
    || { cat "$D"/asa-merge-*.log; exit 1; }
t2=$(date +%s.%N)
# shellcheck disable=SC2086
"$BIN" analyze $models $args --quiet --out "$out/single" > /dev/null
t3=$(date +%s.%N)
for k in $(seq 0 $((tasks - 1))); do
    grep -q '"source": "slurm"' "$out/shard-$k/run.json" || { echo "shard $k: not from Slurm"; exit 1; }
done
# every table: the same rows and text, numbers within 1e-12 relative (f64 sums taken in
# another order may differ in the last digit)
python3 - "$out/single" "$out/merged" <<'PYEOF'
import csv, math, os, sys
single, merged = sys.argv[1:]
names = sorted(f for f in os.listdir(single) if f.endswith(".csv"))
assert names and names == sorted(f for f in os.listdir(merged) if f.endswith(".csv")), names
for name in names:
    a = list(csv.reader(open(os.path.join(single, name))))
    b = list(csv.reader(open(os.path.join(merged, name))))
    assert len(a) == len(b), f"{name}: {len(a)} rows vs {len(b)}"
    for i, (ra, rb) in enumerate(zip(a, b)):
        assert len(ra) == len(rb), f"{name} row {i}"
        for x, y in zip(ra, rb):
            if x == y:
                continue
            fx, fy = float(x), float(y)  # text that differs is no number: an error
            same = (math.isnan(fx) and math.isnan(fy)) or abs(fx - fy) <= 1e-12 * abs(fy)
            assert same, f"{name} row {i}: {x} vs {y}"
PYEOF
secs() { awk "BEGIN { printf \"%.1f\", $2 - $1 }"; }
echo "slurm: $tasks-task array ($cpus CPU each) $(secs "$t0" "$t1") s, merge job $(secs "$t1" "$t2") s, one process $(secs "$t2" "$t3") s; merged tables equal the single run's to 1e-12 ($(ls "$out"/single/*.csv | wc -l) tables); cluster up and down in $(( $(date +%s) - started )) s"
