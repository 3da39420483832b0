# bench-lib.sh — what the benchmark scripts share: a temp dir cleaned up
# on exit (kept with KEEP_TMP=1 or on failure), loopback helpers, the
# management API, the mock provider, loadgen bounded in time, and a
# throw-away Sluice with an unthrottled load organization. Sourced by
# bench-proxy.sh and bench-dialects.sh after they set DURATION and
# LOADGEN_TIMEOUT.

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
for tool in go curl python3 timeout; do
	command -v "$tool" >/dev/null || { echo "$BENCH_NAME: $tool is required" >&2; exit 1; }
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
		echo "$BENCH_NAME: logs and data kept in $TMP" >&2
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
		echo "$BENCH_NAME: $method /$path answered $code: $out" >&2
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
	echo "$BENCH_NAME: $name did not become ready at $url; its log:" >&2
	tail -n 40 "$logfile" >&2 || true
	exit 1
}

# start_mock NAME ARGS... starts a mock upstream on a free port and sets MOCK_URL.
start_mock() {
	local name=$1 port
	shift
	port=$(free_port)
	"$TMP/bin/mockupstream" -addr "127.0.0.1:$port" -bill words "$@" >"$TMP/$name.log" 2>&1 &
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


# start_sluice NAME BIN starts a throw-away Sluice with its own data dir
# ($TMP/NAME) and sets SLUICE to its URL and ADMIN_PASSWORD.
start_sluice() {
	local name=$1 bin=$2 port
	port=$(free_port)
	SLUICE="http://127.0.0.1:$port"
	ADMIN_PASSWORD="bench-$(python3 -c 'import secrets; print(secrets.token_hex(12))')"
	mkdir -p "$TMP/$name"
	env SLUICE_ADDR="127.0.0.1:$port" SLUICE_DATA_DIR="$TMP/$name" SLUICE_LOG_LEVEL=warn \
		SLUICE_ADMIN_PASSWORD="$ADMIN_PASSWORD" SLUICE_BCRYPT_COST=4 \
		"$bin" >"$TMP/$name.log" 2>&1 &
	PIDS+=($!)
	wait_for "$SLUICE/healthz" "$name" "$TMP/$name.log"
	echo "$name: $SLUICE (data $TMP/$name)" >&2
}

# prepare_sluice sets up the Sluice at $SLUICE: an admin session (ADMIN), an
# unthrottled premium tier, a load organization on it and its API token
# (TOKEN).
prepare_sluice() {
	local signup session org
	ADMIN=$(api POST api/auth/login "{\"email\":\"admin@localhost\",\"password\":\"$ADMIN_PASSWORD\"}" | json_get token)
	# The client's own bucket must not be the bottleneck.
	api PUT api/admin/tiers/premium '{"capacity":1000000,"refill_per_sec":1000000,"tokens_per_minute":0,"freeze_threshold":0}' "$ADMIN" >/dev/null
	signup=$(api POST api/auth/signup '{"email":"load@bench.test","password":"load-password-1","organization":"Load"}')
	session=$(json_get token <<<"$signup")
	org=$(json_get organization.id <<<"$signup")
	api PUT "api/admin/organizations/$org/tier" '{"tier":"premium"}' "$ADMIN" >/dev/null
	TOKEN=$(api POST api/tokens '{"name":"bench"}' "$session" | json_get token)
	echo "tier premium: $(api GET api/admin/tiers '' "$ADMIN" | python3 -c '
import json, sys
t = [t for t in json.load(sys.stdin)["data"] if t["name"] == "premium"][0]
print({k: t[k] for k in ("capacity", "refill_per_sec", "tokens_per_minute", "freeze_threshold", "upstream_fallback")})')" >&2
}

# build_bins builds sluice, mockupstream and loadgen into $TMP/bin.
build_bins() {
	log "building sluice, mockupstream and loadgen into $TMP/bin"
	mkdir -p "$TMP/bin"
	(
		cd "$ROOT"
		timeout 600 go build -o "$TMP/bin/sluice" .
		timeout 600 go build -o "$TMP/bin/mockupstream" ./cmd/mockupstream
		timeout 600 go build -o "$TMP/bin/loadgen" ./cmd/loadgen
	)
}
