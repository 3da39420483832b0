#!/usr/bin/env bash
# bench-ab.sh — two builds of Sluice side by side against a zero-latency mock
# provider, with the direct path and a bare reverse proxy (its own process)
# as baselines, interleaved round by round (the setting of the hot path
# against a bare proxy, docs/BENCHMARKS.md).
#
#   BEFORE=<commit> scripts/bench-ab.sh [MODE] [ROUNDS] [RATE] [DURATION]
#
# MODE is embedded (SQLite, in-process limits; the default) or pg (each
# build on its own scratch Postgres database and its own Redis prefix).
# RATE 0 is saturation. Each build gets a throw-away Sluice with one premium
# token whose limits are out of the way and one provider key at rpm 1e8 /
# tpm 1e9, warmed for 1 s; then per round: direct and the bare proxy, then
# before and after (after and before in every other round), 64 connections
# each, with a 2 s pause before each Sluice run and after the last. Each
# run also reports the CPU the proxy or the build spent on it, and the
# summary its median per request.
#
# Environment (all optional):
#   BEFORE=HEAD~1          the commit to compare the working tree with
#   BUILDS="before after"  which builds to run (e.g. BUILDS=after alone)
#   PROFILE=file           instead of rounds: load the last build and save
#                          /debug/pprof/$PROFILE_KIND?seconds=$PROFILE_SECONDS
#                          to file (the load starts 2 s before and ends 1 s after)
#   PROFILE_KIND=profile   or trace, allocs, …
#   PROFILE_SECONDS=5
#   ENV_before=… ENV_after=…  extra environment for one build (GOGC=400)
#   KEY_PROVIDER=openai KEY_MODEL=gpt-4o-mini  the provider key's kind and model;
#                          with LOADGEN_PATH, LOADGEN_AUTH and LOADGEN_BODY (read by
#                          loadgen) another dialect is loaded, e.g. KEY_PROVIDER=anthropic
#                          KEY_MODEL=claude-mock LOADGEN_PATH=/messages LOADGEN_AUTH=x-api-key
#   PG_URL=postgres://postgres@127.0.0.1:5432/test?sslmode=disable
#   REDIS_URL=redis://127.0.0.1:6379/0
set -euo pipefail
KEY_PROVIDER=${KEY_PROVIDER:-openai}
KEY_MODEL=${KEY_MODEL:-gpt-4o-mini}

MODE=${1:-embedded} ROUNDS=${2:-3} RATE=${3:-1000} DUR=${4:-5s}
BEFORE=${BEFORE:-HEAD~1}
BUILDS=${BUILDS:-before after}
PG_URL=${PG_URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379/0}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/sluice-ab.XXXXXX")
RUN=ab$$
PIDS=()
DBS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
	for db in "${DBS[@]}"; do psql "$PG_URL" -qAtc "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" >/dev/null 2>&1 || true; done
	if [[ $MODE == pg ]]; then
		redis-cli -u "$REDIS_URL" --scan --pattern "$RUN:*" | xargs -r redis-cli -u "$REDIS_URL" del >/dev/null 2>&1 || true
	fi
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'; }
json_get() { python3 -c 'import json, sys
v = json.load(sys.stdin)
for p in sys.argv[1].split("."): v = v[p]
print(v)' "$1"; }
wait_for() {
	for _ in $(seq 1 300); do curl -fsS --max-time 1 -o /dev/null "$1" 2>/dev/null && return 0; sleep 0.1; done
	echo "bench-ab: nothing answered at $1" >&2
	exit 1
}

echo "building into $TMP (before: $BEFORE)" >&2
mkdir -p "$TMP/bin" "$TMP/src-before" "$TMP/bareproxy"
(cd "$ROOT" && git archive "$BEFORE" | tar -x -C "$TMP/src-before")
(cd "$TMP/src-before" && go build -o "$TMP/bin/sluice-before" .)
(cd "$ROOT" && go build -o "$TMP/bin/sluice-after" . && go build -o "$TMP/bin/" ./cmd/mockupstream ./cmd/loadgen)
# The bare proxy the hot-path goals compare against, as bench-all builds it.
sed -n '/cat >"$TMP\/bareproxy\/main.go" <<.EOF./,/^EOF$/p' "$ROOT/scripts/bench-all.sh" | sed '1d;$d' >"$TMP/bareproxy/main.go"
printf 'module bareproxy\n\ngo 1.22\n' >"$TMP/bareproxy/go.mod"
(cd "$TMP/bareproxy" && GOWORK=off GOFLAGS= go build -o "$TMP/bin/bareproxy" .)

p=$(port)
"$TMP/bin/mockupstream" -addr "127.0.0.1:$p" -bill words -keys sk-bench-a=1000000 >"$TMP/mock.log" 2>&1 &
PIDS+=($!)
MOCK=http://127.0.0.1:$p
wait_for "$MOCK/_stats"
p=$(port)
"$TMP/bin/bareproxy" "127.0.0.1:$p" "$MOCK" >"$TMP/proxy.log" 2>&1 &
PIDS+=($!)
PROXY_PID=$!
PROXY=http://127.0.0.1:$p
wait_for "$PROXY/_stats"

declare -A URL TOKEN PPROF PID
for b in $BUILDS; do
	p=$(port) pp=$(port) pw=pw-$RANDOM$RANDOM
	extra=ENV_$b
	envs=(SLUICE_ADDR="127.0.0.1:$p" SLUICE_PPROF_ADDR="127.0.0.1:$pp" SLUICE_DATA_DIR="$TMP/$b" SLUICE_LOG_LEVEL=warn
		SLUICE_ADMIN_PASSWORD="$pw" SLUICE_BCRYPT_COST=4)
	if [[ $MODE == pg ]]; then
		db=${RUN}_$b
		psql "$PG_URL" -qAtc "CREATE DATABASE \"$db\"" >/dev/null
		DBS+=("$db")
		envs+=(DATABASE_URL="$(python3 -c 'import sys, urllib.parse as u; p = u.urlparse(sys.argv[1]); print(p._replace(path="/" + sys.argv[2]).geturl())' "$PG_URL" "$db")"
			REDIS_URL="$REDIS_URL" SLUICE_REDIS_PREFIX="$RUN:$b:" SLUICE_AUTO_MIGRATE=true
			SLUICE_MASTER_KEY=$(python3 -c 'import secrets; print(secrets.token_hex(32))'))
	fi
	mkdir -p "$TMP/$b"
	# shellcheck disable=SC2086 # ENV_<build> is a list of VAR=value words
	env "${envs[@]}" ${!extra:-} "$TMP/bin/sluice-$b" >"$TMP/$b.log" 2>&1 &
	PIDS+=($!)
	PID[$b]=$!
	S=http://127.0.0.1:$p
	wait_for "$S/healthz"
	api() { curl -fsS -X "$1" -H 'Content-Type: application/json' ${4:+-H "Authorization: Bearer $4"} ${3:+--data "$3"} "$S/$2"; }
	admin=$(api POST api/auth/login "{\"email\":\"admin@localhost\",\"password\":\"$pw\"}" | json_get token)
	api PUT api/admin/tiers/premium '{"capacity":1000000,"refill_per_sec":1000000,"tokens_per_minute":0,"freeze_threshold":0}' "$admin" >/dev/null
	signup=$(api POST api/auth/signup '{"email":"load@bench.test","password":"load-password-1","organization":"Load"}')
	api PUT "api/admin/organizations/$(json_get organization.id <<<"$signup")/tier" '{"tier":"premium"}' "$admin" >/dev/null
	TOKEN[$b]=$(api POST api/tokens '{"name":"bench"}' "$(json_get token <<<"$signup")" | json_get token)
	base=$MOCK/v1
	[[ $KEY_PROVIDER != openai ]] && base=$MOCK
	api POST api/admin/upstreams "{\"name\":\"mock\",\"provider\":\"$KEY_PROVIDER\",\"base_url\":\"$base\",\"api_key\":\"sk-bench-a\",\"weight\":1,\"rpm\":100000000,\"tpm\":1000000000,\"models\":[\"$KEY_MODEL\"]}" "$admin" >/dev/null
	URL[$b]=$S
	PPROF[$b]=http://127.0.0.1:$pp
	LOADGEN_SLUICE_KEY=${TOKEN[$b]} "$TMP/bin/loadgen" -sluice "$S/v1" -concurrency 64 -rate 1000 -duration 1s >/dev/null # warm-up
done

if [[ -n ${PROFILE:-} ]]; then
	b=${BUILDS##* }
	secs=${PROFILE_SECONDS:-5}
	LOADGEN_SLUICE_KEY=${TOKEN[$b]} "$TMP/bin/loadgen" -sluice "${URL[$b]}/v1" -concurrency 64 -rate "$RATE" -duration "$((secs + 3))s" | grep '^run' &
	lg=$!
	sleep 2
	curl -fsS -o "$PROFILE" "${PPROF[$b]}/debug/pprof/${PROFILE_KIND:-profile}?seconds=$secs"
	wait "$lg"
	echo "saved $PROFILE (build $b)" >&2
	exit 0
fi

# Each build's recorder stores the last second of a run's events after
# the run: a pause lets that flush land before the next run starts, and
# the builds swap places every round, so neither always follows the other.
settle() { sleep 2; }
# cpu_ms is a process's CPU time so far (user + system), in milliseconds:
# each run's line ends with what the proxy or the build spent in it.
cpu_ms() { awk -v hz="$(getconf CLK_TCK)" '{print int(($14 + $15) * 1000 / hz)}' "/proc/$1/stat"; }
order=$BUILDS
for r in $(seq 1 "$ROUNDS"); do
	{
		c0=$(cpu_ms "$PROXY_PID")
		"$TMP/bin/loadgen" -direct "$MOCK/v1" -direct-key sk-bench-a -proxy "$PROXY/v1" -concurrency 64 -rate "$RATE" -duration "$DUR" |
			grep '^run' | sed "s/round 1/round $r/" >"$TMP/pair"
		c1=$(cpu_ms "$PROXY_PID")
		sed "/ proxy /s/\$/, cpu $((c1 - c0)) ms/" "$TMP/pair"
		for b in $order; do
			settle
			c0=$(cpu_ms "${PID[$b]}")
			line=$(LOADGEN_SLUICE_KEY=${TOKEN[$b]} "$TMP/bin/loadgen" -sluice "${URL[$b]}/v1" -concurrency 64 -rate "$RATE" -duration "$DUR" |
				grep '^run' | sed "s/round 1 sluice/round $r $b/")
			echo "$line, cpu $(($(cpu_ms "${PID[$b]}") - c0)) ms"
		done
		settle
	} | tee -a "$TMP/runs"
	order=$(tr ' ' '\n' <<<"$order" | tac | tr '\n' ' ')
done

# Medians of the per-round figures; "added" is over the direct path's.
python3 - "$TMP/runs" <<'EOF'
import re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    m = re.search(r"round \d+ (\w+) .*?(\d+) requests, ([\d.]+) ok/s, p50 ([\d.]+) ms, p99 ([\d.]+) ms", line)
    if m:
        cpu = re.search(r"cpu (\d+) ms", line)
        us = 1000 * int(cpu[1]) / int(m[2]) if cpu else 0.0  # µs of the process's CPU a request
        runs.setdefault(m[1], []).append([float(v) for v in m.group(3, 4, 5)] + [us])
med = {k: [statistics.median(col) for col in zip(*v)] for k, v in runs.items()}
_, d50, d99, _ = med["direct"]
_, b50, b99, _ = med["proxy"]
for k, (ok, p50, p99, us) in med.items():
    line = f"median {k:6s} {ok:8.1f} ok/s  p50 {p50:.3f} ms  p99 {p99:.3f} ms  added p50 {p50 - d50:+.3f}  p99 {p99 - d99:+.3f}"
    if us:
        line += f"  cpu {us:.0f} µs/request"
    if k not in ("direct", "proxy") and b50 > d50 and b99 > d99:
        line += f"  = {(p50 - d50) / (b50 - d50):.2f}x / {(p99 - d99) / (b99 - d99):.2f}x the bare proxy's"
    print(line)
EOF
