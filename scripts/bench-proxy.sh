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
#   B  overhead: zero-latency mock, one key at 1,000,000/s, Sluice with that
#      key at rpm 0 (paced only to what the mock's headers state, 60,000,000
#      a minute, never binding); direct, sluice and a bare httputil.ReverseProxy
#      (loadgen -serve-proxy) interleaved, 3 rounds, concurrency 50, rate
#      1000/s and saturation.
#   A-burst  a provider that enforces its limit in short windows: a mock with
#      2 keys that state 1,500 RPM (25/s) but hold a burst of 5 (-burst 5),
#      50 ms +/- 20 ms; traffic in bursts (20 requests at once every 500 ms,
#      40/s, under the 50/s quota; and 100/s in bursts of 20, over it). Each
#      Sluice build gets its own fresh Sluice and its own mock; with
#      BEFORE_SRC, the build from that source tree runs too, interleaved
#      with the current one round by round, so both meet the same machine.
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
#   BURST_SETTINGS="40:20 100:20"  (RATE:AT_ONCE)  BURST_CONCURRENCY=200  BURST_ROUNDS=3
#   BEFORE_SRC=/path        a source tree of the build to compare in A-burst, e.g.
#                           mkdir /tmp/before && git archive <commit> | tar -x -C /tmp/before
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
BURST_SETTINGS=${BURST_SETTINGS:-40:20 100:20}
BURST_CONCURRENCY=${BURST_CONCURRENCY:-200}
BURST_ROUNDS=${BURST_ROUNDS:-3}
BEFORE_SRC=${BEFORE_SRC:-}
# The mock's keys (Sluice wants provider keys of at least 8 characters).
KEY_A=sk-bench-a
KEY_B=sk-bench-b
LOADGEN_TIMEOUT=40s # per request; above Sluice's 30 s upstream budget, so Sluice's own limit shows

BENCH_NAME=bench-proxy
# shellcheck source=scripts/bench-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/bench-lib.sh"

# fallbacks [DATA_DIR] prints how the recorded usage events were served so far
# (upstream / sluice-local fallback / error), read-only from the SQLite file.
fallbacks() {
	sleep 1.5 # the usage recorder flushes every second
	python3 - "${1:-$TMP/sluice}/sluice.db" <<'EOF'
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
    if len(f) == 11 and (f[0] == "direct" or f[0].startswith("sluice")) and f[3].isdigit():
        rows.append(f)
print("| target | concurrency | rate | client errors % | upstream 2xx | upstream 429s % of upstream requests | answered without the provider (fallback) | QPS % of 50/s quota |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for f in rows:
    target, conc, rate, reqs, qps, err, up, up429 = f[0], f[1], f[2], int(f[3]), float(f[4]), float(f[7]), int(f[9]), int(f[10])
    ok = round(reqs * (1 - err / 100))
    up_ok = up - up429
    sluice = target.startswith("sluice")
    fb = ok - up_ok if sluice else 0
    pct429 = 100.0 * up429 / up if up else 0.0
    print("| %s | %s | %s | %.2f | %d | %.2f | %s | %.1f |" % (
        target, conc, rate, err, up_ok, pct429, fb if sluice else "-", 100 * qps / quota))
EOF
}

build_bins
if [[ -n $BEFORE_SRC && " $SCENARIOS " == *" A-burst "* ]]; then
	log "building the sluice to compare from $BEFORE_SRC"
	(cd "$BEFORE_SRC" && timeout 600 go build -o "$TMP/bin/sluice-before" .)
fi

log "starting the mocks"
start_mock mock-a -keys "$KEY_A=25,$KEY_B=25" -latency 50ms -jitter 20ms
MOCK_A=$MOCK_URL
start_mock mock-b -keys "$KEY_A=1000000"
MOCK_B=$MOCK_URL
echo "mock A (2 x 25/s, 50 ms +/- 20 ms): $MOCK_A; mock B (unlimited, no latency): $MOCK_B" >&2

# check_chain sends one request through the Sluice at $SLUICE, to fail early
# if the chain is broken.
check_chain() {
	curl -fsS --max-time 15 -o /dev/null "$SLUICE/v1/chat/completions" -H "Authorization: Bearer $TOKEN" \
		-H 'Content-Type: application/json' -d '{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}'
}

if [[ " $SCENARIOS " == *" A "* || " $SCENARIOS " == *" A-isolated "* || " $SCENARIOS " == *" B "* ]]; then
	log "starting sluice"
	start_sluice sluice "$TMP/bin/sluice"
	log "preparing the load organization, its token and the provider keys"
	prepare_sluice
	export LOADGEN_SLUICE_KEY=$TOKEN # keeps the token off the command line
fi

add_key() { # NAME BASE_URL SECRET RPM -> key id
	api POST api/admin/upstreams "{\"name\":\"$1\",\"base_url\":\"$2\",\"api_key\":\"$3\",\"weight\":1,\"rpm\":$4,\"tpm\":0,\"models\":[\"gpt-4o-mini\"]}" "$ADMIN" | json_get id
}

A_KEYS=()
if [[ " $SCENARIOS " == *" A "* || " $SCENARIOS " == *" A-isolated "* ]]; then
	A_KEYS+=("$(add_key mock-a-1 "$MOCK_A/v1" "$KEY_A" 1500)")
	A_KEYS+=("$(add_key mock-a-2 "$MOCK_A/v1" "$KEY_B" 1500)")
	check_chain
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
	check_chain
	B_RUNS=$(($(count "$B_CONCURRENCY") * $(count "$B_RATES") * B_ROUNDS * 3))
	echo "\$ loadgen -direct $MOCK_B/v1 -direct-key $KEY_A -sluice $SLUICE/v1 -serve-proxy 127.0.0.1:0 -mock-stats $MOCK_B/_stats -concurrency $B_CONCURRENCY -rate $B_RATES -rounds $B_ROUNDS -duration $DURATION -timeout $LOADGEN_TIMEOUT" >&2
	loadgen_run "$B_RUNS" -direct "$MOCK_B/v1" -direct-key "$KEY_A" -sluice "$SLUICE/v1" -serve-proxy 127.0.0.1:0 \
		-mock-stats "$MOCK_B/_stats" -concurrency "$B_CONCURRENCY" -rate "$B_RATES" -rounds "$B_ROUNDS" \
		| tee "$TMP/scenario-b.txt"
	echo
	fallbacks
fi

if [[ " $SCENARIOS " == *" A-burst "* ]]; then
	log "scenario A-burst: a provider enforcing 1,500 RPM per key as a burst of 5; traffic in bursts"
	BUILDS=(after)
	[[ -n $BEFORE_SRC ]] && BUILDS=(before after)
	declare -A BURST_URL BURST_TOKEN BURST_MOCK
	for build in "${BUILDS[@]}"; do
		bin="$TMP/bin/sluice"
		[[ $build == before ]] && bin="$TMP/bin/sluice-before"
		# Each build its own mock, so one build's 429s and buckets never
		# meet the other's traffic.
		start_mock "mock-burst-$build" -keys "$KEY_A=25,$KEY_B=25" -burst 5 -latency 50ms -jitter 20ms
		BURST_MOCK[$build]=$MOCK_URL
		start_sluice "sluice-$build" "$bin"
		prepare_sluice
		add_key burst-1 "$MOCK_URL/v1" "$KEY_A" 1500 >/dev/null
		add_key burst-2 "$MOCK_URL/v1" "$KEY_B" 1500 >/dev/null
		check_chain
		BURST_URL[$build]=$SLUICE
		BURST_TOKEN[$build]=$TOKEN
	done
	: >"$TMP/scenario-a-burst.txt"
	for round in $(seq 1 "$BURST_ROUNDS"); do
		for st in $BURST_SETTINGS; do
			rate=${st%%:*} burst=${st##*:}
			for build in "${BUILDS[@]}"; do
				sleep 2 # both sides' buckets full again
				echo "\$ loadgen -sluice ${BURST_URL[$build]}/v1 -mock-stats ${BURST_MOCK[$build]}/_stats -concurrency $BURST_CONCURRENCY -rate $rate -burst $burst -duration $DURATION -timeout $LOADGEN_TIMEOUT  # $build, round $round" >&2
				LOADGEN_SLUICE_KEY=${BURST_TOKEN[$build]} loadgen_run 1 -sluice "${BURST_URL[$build]}/v1" -mock-stats "${BURST_MOCK[$build]}/_stats" \
					-concurrency "$BURST_CONCURRENCY" -rate "$rate" -burst "$burst" |
					sed "s/^| sluice |/| sluice $build |/" | tee -a "$TMP/scenario-a-burst.txt" >&2
			done
		done
	done
	echo
	# One row per build and setting over all rounds (each round is its own
	# loadgen run): counts summed, QPS and percentiles the rounds' medians.
	(python3 - "$TMP/scenario-a-burst.txt" <<'EOF'
import sys
rows, order = {}, []
for line in open(sys.argv[1], encoding="utf-8"):
    f = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(f) != 11 or not f[0].startswith("sluice") or not f[3].isdigit():
        continue
    key = (f[0], f[1], f[2])
    if key not in rows:
        rows[key] = []
        order.append(key)
    rows[key].append(f)
print("| target | concurrency | rate | requests | QPS | p50 ms | p99 ms | errors % | 429s seen by client | upstream requests | upstream 429s |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for key in order:
    fs = rows[key]
    n = sum(int(f[3]) for f in fs)
    errs = sum(int(f[3]) * float(f[7]) / 100 for f in fs)
    med = lambda i: sorted(float(f[i]) for f in fs)[len(fs) // 2]
    print("| %s | %s | %s | %d | %.1f | %.2f | %.2f | %.2f | %d | %d | %d |" % (
        key[0], key[1], key[2], n, med(4), med(5), med(6), 100 * errs / n if n else 0,
        sum(int(f[8]) for f in fs), sum(int(f[9]) for f in fs), sum(int(f[10]) for f in fs)))
EOF
	) | tee "$TMP/scenario-a-burst-merged.txt"
	echo
	goal_table "$TMP/scenario-a-burst-merged.txt"
	for build in "${BUILDS[@]}"; do
		echo
		echo "sluice $build:"
		fallbacks "$TMP/sluice-$build"
	done
fi

for f in "$TMP"/sluice*.log; do
	[[ -e $f ]] || continue
	if grep -qiE 'panic|fatal' "$f"; then
		echo "bench-proxy: $(basename "$f") has a panic or fatal error:" >&2
		grep -iE -m5 'panic|fatal' "$f" >&2
	fi
	echo "$(basename "$f") (level warn): $(wc -l <"$f") lines; the last ones:" >&2
	tail -n 5 "$f" | cut -c1-300 >&2
done
