#!/usr/bin/env bash
# bench-proxy.sh — the generation-proxy benchmarks of docs/BENCHMARKS.md.
#
# Builds sluice, cmd/mockupstream and cmd/loadgen into a temp dir, starts a
# mock provider and a throw-away Sluice (SQLite in the temp dir) on loopback,
# prepares an admin session, a load organization on an unthrottled "premium"
# tier, an API token and provider keys over the management API, then runs:
#
#   A  quota: mock with 2 keys x 25 RPS (50 ms +/- 20 ms), Sluice with the same
#      two keys (rpm 1500 = 25/s each); loadgen direct (naive round-robin over
#      the two keys) vs through Sluice, concurrency 50,100,200, rate 50/s (the
#      combined quota) and 100/s (2x over it), upstream 429s from /_stats.
#   A-isolated  the same Sluice runs again without the direct runs in
#      between (see "Why A-isolated" below), each setting after a 2 s pause.
#   B  overhead: zero-latency mock, one unlimited key, Sluice with one unpaced
#      key (rpm 0); direct, sluice and a bare httputil.ReverseProxy
#      (loadgen -serve-proxy) interleaved, 3 rounds, concurrency 50, rate
#      1000/s and saturation.
#
# Why A-isolated: in A, loadgen interleaves direct and sluice runs on the
# same mock. A direct run over capacity leaves the mock's buckets empty while
# Sluice's pacing buckets for the keys are full (Sluice did not send that
# traffic), so a sluice run may start with requests the provider refuses.
# (In practice a 429 empties Sluice's bucket for that key, so this costs about
# one 429 per key.) A-isolated measures Sluice without that interference.
#
# Every process listens on 127.0.0.1 only, and every step is bounded in time.
#
# Environment (all optional):
#   DURATION=10s            length of each loadgen run (e.g. DURATION=3s for a quick look)
#   SCENARIOS="A A-isolated B"
#   A_CONCURRENCY=50,100,200  A_RATES=50,100  A_ROUNDS=1
#   B_CONCURRENCY=50          B_RATES=1000,0  B_ROUNDS=3
#   KEEP_TMP=1              keep the temp dir (binaries, logs, sluice.db)
#
# SLUICE_BCRYPT_COST=4 is used only to make the scripted sign-up and logins
# fast (bcrypt is not on the /v1 path: API tokens are not bcrypted); every
# other Sluice setting is its default.
set -euo pipefail

DURATION=${DURATION:-10s}
SCENARIOS=${SCENARIOS:-A A-isolated B}
A_CONCURRENCY=${A_CONCURRENCY:-50,100,200}
A_RATES=${A_RATES:-50,100}
A_ROUNDS=${A_ROUNDS:-1}
B_CONCURRENCY=${B_CONCURRENCY:-50}
B_RATES=${B_RATES:-1000,0}
B_ROUNDS=${B_ROUNDS:-3}
# The mock's keys (Sluice wants provider keys of at least 8 characters).
KEY_A=sk-bench-a
KEY_B=sk-bench-b
LOADGEN_TIMEOUT=40s # per request; above Sluice's 30 s upstream budget, so Sluice's own limit shows

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
for tool in go curl python3 timeout; do
	command -v "$tool" >/dev/null || { echo "bench-proxy: $tool is required" >&2; exit 1; }
done

TMP=$(mktemp -d "${TMPDIR:-/tmp}/sluice-bench.XXXXXX")
PIDS=()
cleanup() {
	local rc=$?
	for pid in "${PIDS[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${PIDS[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	if [[ ${KEEP_TMP:-0} == 1 || $rc != 0 ]]; then
		echo "bench-proxy: logs and data kept in $TMP" >&2
	else
		rm -rf "$TMP"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { printf '\n### %s (load average %s)\n' "$*" "$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)" >&2; }

# seconds DURATION prints a Go duration (10s, 500ms, 1m30s) in whole seconds, rounded up.
seconds() {
	python3 - "$1" <<'EOF'
import math, re, sys
units = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}
s, total = sys.argv[1], 0.0
parts = re.findall(r"([0-9.]+)(ns|us|µs|ms|s|m|h)", s)
if not parts or "".join(n + u for n, u in parts) != s:
    sys.exit("bad duration " + s)
for n, u in parts:
    total += float(n) * units[u]
print(max(1, math.ceil(total)))
EOF
}
DUR_S=$(seconds "$DURATION")

# free_port prints a loopback port nothing listens on right now.
free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# json_get PATH reads JSON on stdin and prints the value at PATH (a.b.0.c).
json_get() {
	python3 -c '
import json, sys
v = json.load(sys.stdin)
for p in sys.argv[1].split("."):
    v = v[int(p)] if isinstance(v, list) else v[p]
print(v)' "$1"
}

# api METHOD PATH [BODY] [BEARER] calls Sluice's management API and prints the
# response body; a non-2xx answer stops the script.
api() {
	local method=$1 path=$2 body=${3:-} bearer=${4:-} out code
	local args=(-sS --max-time 15 -X "$method" -H 'Content-Type: application/json' -o "$TMP/api.out" -w '%{http_code}')
	[[ -n $bearer ]] && args+=(-H "Authorization: Bearer $bearer")
	[[ -n $body ]] && args+=(--data "$body")
	code=$(curl "${args[@]}" "$SLUICE/$path")
	out=$(cat "$TMP/api.out")
	if [[ $code != 2?? ]]; then
		echo "bench-proxy: $method /$path answered $code: $out" >&2
		exit 1
	fi
	printf '%s' "$out"
}

# wait_for URL NAME LOGFILE polls URL for up to 30 s.
wait_for() {
	local url=$1 name=$2 logfile=$3
	for _ in $(seq 1 300); do
		if curl -fsS --max-time 1 -o /dev/null "$url" 2>/dev/null; then
			return 0
		fi
		sleep 0.1
	done
	echo "bench-proxy: $name did not become ready at $url; its log:" >&2
	tail -n 40 "$logfile" >&2 || true
	exit 1
}

# start_mock NAME ARGS... starts a mock upstream on a free port and sets MOCK_URL.
start_mock() {
	local name=$1 port
	shift
	port=$(free_port)
	"$TMP/bin/mockupstream" -addr "127.0.0.1:$port" "$@" >"$TMP/$name.log" 2>&1 &
	PIDS+=($!)
	MOCK_URL="http://127.0.0.1:$port"
	wait_for "$MOCK_URL/_stats" "$name" "$TMP/$name.log"
}

# loadgen_run NRUNS ARGS... runs loadgen, bounded by NRUNS x (duration + request timeout) + 60 s.
loadgen_run() {
	local nruns=$1
	shift
	local limit=$((nruns * (DUR_S + 40) + 60))
	timeout --kill-after=10 "$limit" "$TMP/bin/loadgen" -duration "$DURATION" -timeout "$LOADGEN_TIMEOUT" "$@"
}

# count LIST prints the number of comma-separated items.
count() { tr ',' '\n' <<<"$1" | grep -c .; }

# fallbacks prints how the recorded usage events were served so far
# (upstream / sluice-local fallback / error), read-only from the SQLite file.
fallbacks() {
	sleep 1.5 # the usage recorder flushes every second
	python3 - "$TMP/data/sluice.db" <<'EOF'
import sqlite3, sys
db = sqlite3.connect("file:%s?mode=ro" % sys.argv[1], uri=True, timeout=10)
rows = db.execute("""SELECT model, fallback, status, count(*) FROM usage_events
                     GROUP BY 1, 2, 3 ORDER BY 1, 2, 3""").fetchall()
print("usage events recorded by Sluice (model, fallback, status, count):")
for r in rows:
    print("  %s fallback=%s status=%s: %d" % r)
EOF
}

# goal_table LOGFILE prints, for each sluice row of scenario A's table, what
# the upstream delivered against the combined 50/s quota.
goal_table() {
	python3 - "$1" <<'EOF'
import sys
quota = 50.0
rows = []
for line in open(sys.argv[1], encoding="utf-8"):
    f = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(f) == 11 and f[0] in ("direct", "sluice") and f[3].isdigit():
        rows.append(f)
print("| target | concurrency | rate | client errors % | upstream 2xx | upstream 429s % of upstream requests | answered without the provider (fallback) | QPS % of 50/s quota |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for f in rows:
    target, conc, rate, reqs, qps, err, up, up429 = f[0], f[1], f[2], int(f[3]), float(f[4]), float(f[7]), int(f[9]), int(f[10])
    ok = round(reqs * (1 - err / 100))
    up_ok = up - up429
    fb = ok - up_ok if target == "sluice" else 0
    pct429 = 100.0 * up429 / up if up else 0.0
    print("| %s | %s | %s | %.2f | %d | %.2f | %s | %.1f |" % (
        target, conc, rate, err, up_ok, pct429, fb if target == "sluice" else "-", 100 * qps / quota))
EOF
}

log "building sluice, mockupstream and loadgen into $TMP/bin"
mkdir -p "$TMP/bin" "$TMP/data"
(
	cd "$ROOT"
	timeout 600 go build -o "$TMP/bin/sluice" .
	timeout 600 go build -o "$TMP/bin/mockupstream" ./cmd/mockupstream
	timeout 600 go build -o "$TMP/bin/loadgen" ./cmd/loadgen
)

log "starting the mocks"
start_mock mock-a -keys "$KEY_A=25,$KEY_B=25" -latency 50ms -jitter 20ms
MOCK_A=$MOCK_URL
start_mock mock-b -keys "$KEY_A=1000000"
MOCK_B=$MOCK_URL
echo "mock A (2 x 25/s, 50 ms +/- 20 ms): $MOCK_A; mock B (unlimited, no latency): $MOCK_B" >&2

log "starting sluice"
SLUICE_PORT=$(free_port)
SLUICE="http://127.0.0.1:$SLUICE_PORT"
ADMIN_PASSWORD="bench-$(python3 -c 'import secrets; print(secrets.token_hex(12))')"
env SLUICE_ADDR="127.0.0.1:$SLUICE_PORT" SLUICE_DATA_DIR="$TMP/data" SLUICE_LOG_LEVEL=warn \
	SLUICE_ADMIN_PASSWORD="$ADMIN_PASSWORD" SLUICE_BCRYPT_COST=4 \
	"$TMP/bin/sluice" >"$TMP/sluice.log" 2>&1 &
PIDS+=($!)
wait_for "$SLUICE/healthz" sluice "$TMP/sluice.log"
echo "sluice: $SLUICE (data $TMP/data)" >&2

log "preparing the load organization, its token and the provider keys"
ADMIN=$(api POST api/auth/login "{\"email\":\"admin@localhost\",\"password\":\"$ADMIN_PASSWORD\"}" | json_get token)
# The client's own bucket must not be the bottleneck.
api PUT api/admin/tiers/premium '{"capacity":1000000,"refill_per_sec":1000000,"tokens_per_minute":0,"freeze_threshold":0}' "$ADMIN" >/dev/null
SIGNUP=$(api POST api/auth/signup '{"email":"load@bench.test","password":"load-password-1","organization":"Load"}')
USER_SESSION=$(json_get token <<<"$SIGNUP")
ORG_ID=$(json_get organization.id <<<"$SIGNUP")
api PUT "api/admin/organizations/$ORG_ID/tier" '{"tier":"premium"}' "$ADMIN" >/dev/null
TOKEN=$(api POST api/tokens '{"name":"bench"}' "$USER_SESSION" | json_get token)
export LOADGEN_SLUICE_KEY=$TOKEN # keeps the token off the command line
echo "tier premium: $(api GET api/admin/tiers '' "$ADMIN" | python3 -c '
import json, sys
t = [t for t in json.load(sys.stdin)["data"] if t["name"] == "premium"][0]
print({k: t[k] for k in ("capacity", "refill_per_sec", "tokens_per_minute", "freeze_threshold", "upstream_fallback")})')" >&2

add_key() { # NAME BASE_URL SECRET RPM -> key id
	api POST api/admin/upstreams "{\"name\":\"$1\",\"base_url\":\"$2\",\"api_key\":\"$3\",\"weight\":1,\"rpm\":$4,\"tpm\":0,\"models\":[\"gpt-4o-mini\"]}" "$ADMIN" | json_get id
}

A_KEYS=()
if [[ " $SCENARIOS " == *" A "* || " $SCENARIOS " == *" A-isolated "* ]]; then
	A_KEYS+=("$(add_key mock-a-1 "$MOCK_A/v1" "$KEY_A" 1500)")
	A_KEYS+=("$(add_key mock-a-2 "$MOCK_A/v1" "$KEY_B" 1500)")

	# One request through Sluice, to fail early if the chain is broken.
	curl -fsS --max-time 15 -o /dev/null "$SLUICE/v1/chat/completions" -H "Authorization: Bearer $TOKEN" \
		-H 'Content-Type: application/json' -d '{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}'
	sleep 1.1 # let the mock's and Sluice's buckets refill after the check
fi

A_RUNS=$(($(count "$A_CONCURRENCY") * $(count "$A_RATES") * A_ROUNDS))

if [[ " $SCENARIOS " == *" A "* ]]; then
	log "scenario A: quota (direct vs sluice, interleaved; mock 2 x 25/s)"
	CMD_A="loadgen -direct $MOCK_A/v1 -direct-keys $KEY_A,$KEY_B -sluice $SLUICE/v1 -mock-stats $MOCK_A/_stats -concurrency $A_CONCURRENCY -rate $A_RATES -rounds $A_ROUNDS -duration $DURATION -timeout $LOADGEN_TIMEOUT"
	echo "\$ $CMD_A" >&2
	loadgen_run $((A_RUNS * 2)) -direct "$MOCK_A/v1" -direct-keys "$KEY_A,$KEY_B" -sluice "$SLUICE/v1" \
		-mock-stats "$MOCK_A/_stats" -concurrency "$A_CONCURRENCY" -rate "$A_RATES" -rounds "$A_ROUNDS" \
		| tee "$TMP/scenario-a.txt"
	echo
	goal_table "$TMP/scenario-a.txt"
	echo
	fallbacks
fi

if [[ " $SCENARIOS " == *" A-isolated "* ]]; then
	log "scenario A-isolated: sluice alone on mock A, one setting at a time after a 2 s pause"
	: >"$TMP/scenario-a-isolated.txt"
	IFS=, read -r -a cs <<<"$A_CONCURRENCY"
	IFS=, read -r -a rs <<<"$A_RATES"
	for c in "${cs[@]}"; do
		for r in "${rs[@]}"; do
			sleep 2 # the mock's and Sluice's buckets refill (1 s of quota each)
			echo "\$ loadgen -sluice $SLUICE/v1 -mock-stats $MOCK_A/_stats -concurrency $c -rate $r -rounds $A_ROUNDS -duration $DURATION -timeout $LOADGEN_TIMEOUT" >&2
			loadgen_run "$A_ROUNDS" -sluice "$SLUICE/v1" -mock-stats "$MOCK_A/_stats" \
				-concurrency "$c" -rate "$r" -rounds "$A_ROUNDS" | tee -a "$TMP/scenario-a-isolated.txt" >&2
		done
	done
	echo
	# One table out of the per-setting ones.
	grep -m1 '^| target' "$TMP/scenario-a-isolated.txt"
	grep -m1 '^|---' "$TMP/scenario-a-isolated.txt"
	grep '^| sluice' "$TMP/scenario-a-isolated.txt"
	echo
	goal_table "$TMP/scenario-a-isolated.txt"
	echo
	fallbacks
fi

if [[ " $SCENARIOS " == *" B "* ]]; then
	log "scenario B: overhead (direct, sluice, bare reverse proxy; zero-latency unlimited mock)"
	for id in "${A_KEYS[@]}"; do
		api DELETE "api/admin/upstreams/$id" '' "$ADMIN" >/dev/null
	done
	add_key mock-b "$MOCK_B/v1" "$KEY_A" 0 >/dev/null
	curl -fsS --max-time 15 -o /dev/null "$SLUICE/v1/chat/completions" -H "Authorization: Bearer $TOKEN" \
		-H 'Content-Type: application/json' -d '{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}'
	B_RUNS=$(($(count "$B_CONCURRENCY") * $(count "$B_RATES") * B_ROUNDS * 3))
	echo "\$ loadgen -direct $MOCK_B/v1 -direct-key $KEY_A -sluice $SLUICE/v1 -serve-proxy 127.0.0.1:0 -mock-stats $MOCK_B/_stats -concurrency $B_CONCURRENCY -rate $B_RATES -rounds $B_ROUNDS -duration $DURATION -timeout $LOADGEN_TIMEOUT" >&2
	loadgen_run "$B_RUNS" -direct "$MOCK_B/v1" -direct-key "$KEY_A" -sluice "$SLUICE/v1" -serve-proxy 127.0.0.1:0 \
		-mock-stats "$MOCK_B/_stats" -concurrency "$B_CONCURRENCY" -rate "$B_RATES" -rounds "$B_ROUNDS" \
		| tee "$TMP/scenario-b.txt"
	echo
	fallbacks
fi

if grep -qiE 'panic|fatal' "$TMP/sluice.log"; then
	echo "bench-proxy: sluice logged a panic or fatal error:" >&2
	grep -iE -m5 'panic|fatal' "$TMP/sluice.log" >&2
fi
echo "sluice log (level warn): $(wc -l <"$TMP/sluice.log") lines; the last ones:" >&2
tail -n 5 "$TMP/sluice.log" | cut -c1-300 >&2
