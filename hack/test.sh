#!/usr/bin/env bash
# The test command: lint, build, start a private control plane and moto, run every test.
#
#   hack/test.sh [cargo test arguments]    e.g. hack/test.sh --test e2e bucket_
#
# S3OP_TEST_THREADS sets cargo test's --test-threads (default 4). Heavy builds are cached under
# $S3OP_CACHE (default ~/.cache/s3-operator), the Rust target dir included.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source hack/lib.sh

# The cluster tests run the operator as Pods on a real node (containerd, kubelet, iptables, a
# bridge of its own): that needs root.
[[ $(id -u) -eq 0 ]] || die "hack/test.sh needs root: its one-node cluster runs containerd, kubelet and kube-proxy (run it with sudo)"

# The tools (Go builds, Debian and PyPI packages) build beside the Rust builds below: on a cold
# run each side waits on downloads and single-threaded links the other fills. Their output goes
# to a file, shown when they are done (or have failed).
tools_log="$(mktemp "${TMPDIR:-/tmp}/s3op-tools.XXXXXX")"
log "building or reusing the test tools in the background (log: $tools_log)"
# In a process group of its own, so that stopping it stops its go builds too.
setsid hack/tools.sh etcd kube moto faketime prometheus jaeger helm kustomize bundle_validate crds \
  hadolint node_pkgs kube_node coredns olm opm grpc_health_probe prom_operator prometheus_server \
  >"$tools_log" 2>&1 &
tools_pid=$!
trap 'kill -- -"$tools_pid" 2>/dev/null || true' EXIT

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$S3OP_CACHE/target}"
log "Rust target dir: $CARGO_TARGET_DIR"

# The upgrade test runs this build of the operator before the current one; it shares the target
# dir, so it is built before the current tree's builds, never beside them.
hack/tools.sh previous_operator
S3OP_PREVIOUS_OPERATOR="$(previous_operator_path)"
export S3OP_PREVIOUS_OPERATOR

log "cargo fmt --check"
cargo fmt --all -- --check

log "cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

log "cargo build"
cargo build --locked --workspace --all-targets

# The Dockerfile's build stage runs this same command (a test checks); the benchmark uses it too,
# and the cluster tests put its binary into the operator image.
log "$RELEASE_BUILD"
$RELEASE_BUILD

log "waiting for the test tools"
tools_rc=0
wait "$tools_pid" || tools_rc=$?
sed 's/^/  tools| /' "$tools_log"
rm -f "$tools_log"
[[ $tools_rc -eq 0 ]] || die "building the test tools failed (exit $tools_rc, above)"
trap - EXIT

state="$(mktemp -d "${TMPDIR:-/tmp}/s3op-test.XXXXXX")"
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
  "$root/hack/env.sh" down --state "$state" || true
  rm -rf "$state"
}
trap cleanup EXIT
# Make Ctrl-C and SIGTERM run the EXIT trap too.
trap 'exit 130' INT
trap 'exit 143' TERM

e2e_logs="$CARGO_TARGET_DIR/e2e-logs"
# Prints the tail of every server and e2e log, to debug a failure without rerunning.
dump_logs() {
  local f
  while IFS= read -r f; do
    printf '\n===== last 40 lines of %s =====\n' "$f" >&2
    tail -n 40 "$f" >&2 || true
  done < <(find "$state" "$e2e_logs" -name '*.log' -type f 2>/dev/null | sort)
}

log "starting the test environment (control plane, moto and a one-node cluster) in $state"
if ! envfile="$(hack/env.sh up --node --state "$state" --owner-pid $$ | tail -n 1)"; then
  dump_logs
  die "the test environment did not come up"
fi
export S3OP_ENV_FILE="$envfile"

# The emulator's own extensions (Pod Identity, EKS Auth, session policies and tags, IRSA) and the
# Pod Identity agent stand-in, tested against this environment before the operator relies on them.
log "emulator tests: hack/emulator_test.py (env file $S3OP_ENV_FILE)"
emulator_out="$state/emulator-test.out"
emulator_rc=0
"$S3OP_CACHE/venv-moto-$MOTO_VERSION/bin/python" hack/emulator_test.py 2>&1 | tee "$emulator_out" || emulator_rc=$?
if [[ $emulator_rc -ne 0 ]]; then log "EMULATOR TESTS FAILED (hack/emulator_test.py, above); the Rust tests run anyway"; fi

# Logs left by an earlier run would be mistaken for this run's.
rm -rf "$e2e_logs" "$e2e_logs.first"

log "cargo test (env file $S3OP_ENV_FILE)"
rc=0
out="$state/cargo-test.out"
cargo test --locked --workspace --no-fail-fast "$@" -- --test-threads "${S3OP_TEST_THREADS:-4}" 2>&1 | tee "$out" || rc=$?
# One closing line with the totals of every test binary.
totals=$(awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
              END { printf "%d passed, %d failed", p, f }' "$out")
# A few e2e tests failing alone on this shared machine get one retry, by themselves; a pass
# on retry is reported as flaky on the closing line, never silently. Failures elsewhere (unit
# tests, xtask) or more than three are never retried.
flaky=()
if [[ $rc -ne 0 ]]; then
  mapfile -t failures < <(awk '/^ +Running /{ bin = $2 } / \.\.\. FAILED$/{ print bin " " $2 }' "$out")
  names=()
  for f in "${failures[@]}"; do
    [[ $f == "tests/e2e/main.rs "* ]] && names+=("${f#* }")
  done
  # A test binary that ended without its closing `test result:` line crashed (a signal, an
  # abort): nothing is retried then, since a retry of the failed tests would hide it.
  binaries=$(grep -cE '^ *(Running|Doc-tests) ' "$out" || true)
  results=$(grep -c '^test result: ' "$out" || true)
  if [[ $binaries -ne $results ]]; then
    log "a test binary ended without its result line ($results results for $binaries binaries): no retry"
  elif (( ${#names[@]} > 0 && ${#names[@]} == ${#failures[@]} && ${#names[@]} <= 3 )); then
    # The first attempt's logs stay, beside the retry's.
    if [[ -d $e2e_logs ]]; then rm -rf "$e2e_logs.first" && cp -a "$e2e_logs" "$e2e_logs.first"; fi
    log "retrying the failed e2e tests once, one at a time: ${names[*]} (first attempt's logs: $e2e_logs.first)"
    retry="$state/cargo-retry.out"
    if cargo test --locked --test e2e -- --exact --test-threads 1 "${names[@]}" 2>&1 | tee "$retry" \
      && grep -q "^test result: ok\. ${#names[@]} passed" "$retry"; then
      flaky=("${names[@]}")
      totals="$totals (${#flaky[@]} of them passed on retry: ${flaky[*]})"
      rc=0
    fi
  fi
fi
# Least privilege from behaviour, after a whole run only (a filtered one leaves grants unused):
# every Kubernetes request of the operator in the run's audit logs must be granted by
# config/rbac, and everything config/rbac grants must have been asked for.
if [[ $# -eq 0 ]]; then
  log "comparing the operator's requests in this run's audit logs with config/rbac"
  rbac_out="$state/cargo-rbac.out"
  if cargo test --locked --test e2e -- --ignored --nocapture --exact \
    support::rbac_audit::the_whole_run_used_exactly_what_config_rbac_grants 2>&1 | tee "$rbac_out" \
    && grep -q '^test result: ok\. 1 passed' "$rbac_out"; then
    totals="$totals; the operator used exactly what config/rbac grants"
  else
    log "RBAC CHECK FAILED: config/rbac and the operator's requests in the audit logs differ (above)"
    totals="$totals; RBAC CHECK FAILED"
    rc=1
  fi
fi
if [[ $emulator_rc -ne 0 ]]; then
  totals="$totals; EMULATOR TESTS FAILED ($(grep -E '^(FAILED|OK)' "$emulator_out" | tail -n 1))"
  rc=1
else
  totals="$totals; emulator tests: $(grep -oE '^Ran [0-9]+ tests' "$emulator_out" | cut -d' ' -f2) passed"
fi
if [[ $rc -ne 0 ]]; then
  dump_logs
  # Last, so the tail of a long log still names what failed and why.
  printf '\n===== failed tests and their panics =====\n' >&2
  awk '/^---- .* stdout ----$/ { print; next }
       /panicked at/ { n = 6 }
       n > 0 { print; n-- }
       /^failures:$/ { names = 1; next }
       names && /^    [a-z0-9_]+(::[a-z0-9_]+)+$/ { failed[$1] = 1 }
       /^test result:/ { names = 0 }
       END { for (t in failed) print "FAILED: " t }' "$out" >&2
  grep -E '^(FAIL|ERROR): ' "$emulator_out" | sed 's/^/EMULATOR /' >&2 || true
  log "tests failed (exit code $rc)"
elif (( ${#flaky[@]} > 0 )); then
  log "all tests passed; FLAKY (failed once, passed on retry): ${flaky[*]}"
else
  log "all tests passed"
fi
# Tear down first so the totals are the run's closing line.
trap - EXIT
cleanup >/dev/null 2>&1
echo "tests: $totals"
exit "$rc"
