#!/usr/bin/env bash
# Run the lab + imaging pipeline with every party as its own OS process on localhost:
# certificates -> synthetic data -> coordinator, lab and imaging processes (PSI alignment,
# encrypted training, scoring of the test rows) -> the test AUC. Exits 0 on success and leaves
# no process behind; the work folder (certificates, data, logs, outputs) is printed at the end.
#
#   examples/deploy/run_local.sh            (after `make demo` or `make test` made .venv)
#   ALIGN=bloom examples/deploy/run_local.sh  (fuzzy identity linkage instead of PSI on the ID)
#   VFLINK=/path/to/vflink examples/deploy/run_local.sh
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
vflink="${VFLINK:-$root/.venv/bin/vflink}"
if [[ ! -x "$vflink" ]]; then
    echo "run_local.sh: $vflink not found; run 'make demo' first or set VFLINK" >&2
    exit 2
fi
align="${ALIGN:-psi}"
if [[ "$align" != "psi" && "$align" != "bloom" ]]; then
    echo "run_local.sh: ALIGN must be psi or bloom, got '$align'" >&2
    exit 2
fi
work="$(mktemp -d "${TMPDIR:-/tmp}/vflink-deploy.XXXXXX")"
pids=()
cleanup() {  # parties stop cleanly on SIGTERM (telling their peers, stopping their workers)
    for pid in ${pids[@]+"${pids[@]}"}; do
        kill "$pid" 2>/dev/null || true
    done
    wait 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP


config="$work/federation.toml"
cp "$here/federation.toml" "$config"
"$vflink" certs --config "$config" --out "$work/certs"
"$vflink" cohort --out "$work/data" --n-patients 2000 --seed 7
secret=()
if [[ "$align" == "bloom" ]]; then
    # the data parties' shared linkage secret: never in the shared config, never at the coordinator
    (umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$work/linkage.secret")
    secret=(--secret-file "$work/linkage.secret")
    printf 'align = "bloom"\nschema = "data/identity_schema.json"\n' >>"$config"  # into [job]
fi

start() {  # name, then extra arguments
    local name="$1"
    shift
    "$vflink" -v party --config "$config" --name "$name" --out "$work/out/$name" "$@" \
        >"$work/$name.log" 2>&1 &
    pids+=("$!")
    echo "started $name (pid $!), log $work/$name.log"
}
start coordinator
start lab --data "$work/data/lab.csv" ${secret[@]+"${secret[@]}"}
start imaging --data "$work/data/imaging.csv" ${secret[@]+"${secret[@]}"}

status=0
names=(coordinator lab imaging)
for i in "${!pids[@]}"; do
    if ! wait "${pids[$i]}"; then
        status=1
        echo "party ${names[$i]} failed; the end of its log:" >&2
        tail -n 20 "$work/${names[$i]}.log" >&2
    fi
done
pids=()
if [[ $status -ne 0 ]]; then
    exit 1
fi
tail -n 1 "$work/imaging.log"
echo "outputs in $work/out"
