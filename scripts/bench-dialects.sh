#!/usr/bin/env bash
# bench-dialects.sh — the dialect benchmarks of docs/BENCHMARKS.md
# ("Dialects"): what Sluice adds to each dialect a client speaks, to each
# kind of provider, at a fixed rate, beside the provider called directly
# and through a bare httputil.ReverseProxy, in one run.
#
# One zero-latency, unlimited mock provider speaks every wire format
# (OpenAI chat and embeddings, Anthropic Messages, Gemini); one Sluice
# (SQLite, defaults) has a key of each kind on it. For each provider
# dialect, loadgen interleaves direct, proxy and Sluice speaking that same
# dialect (the same-dialect rows); then Sluice alone is loaded with each
# other client dialect translated to that provider (the translated rows),
# in the same round. Rounds repeat ROUNDS times.
#
# What the goals compare (issue 23, item 5), from the printed tables:
#   same-dialect: Sluice's added p50/p99 (sluice − direct) ≤ 1.2 × the
#                 proxy's (proxy − direct);
#   translated:   Sluice's added p50 for a translated call ≤ 1.5 × what a
#                 same-dialect call to the same provider adds.
#
# Environment (all optional): DURATION=10s RATE=1000 CONCURRENCY=50
# ROUNDS=3 KEEP_TMP=1.
set -euo pipefail

DURATION=${DURATION:-10s}
RATE=${RATE:-1000}
CONCURRENCY=${CONCURRENCY:-50}
ROUNDS=${ROUNDS:-3}
KEY=sk-bench-dialects
LOADGEN_TIMEOUT=40s
BENCH_NAME=bench-dialects
# shellcheck source=scripts/bench-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/bench-lib.sh"

build_bins
log "starting the mock provider"
start_mock mock -keys "$KEY=1000000"
start_sluice sluice "$TMP/bin/sluice"
prepare_sluice
export LOADGEN_SLUICE_KEY=$TOKEN
for k in \
	"{\"name\":\"openai\",\"base_url\":\"$MOCK_URL/v1\",\"api_key\":\"$KEY\",\"models\":[\"gpt-4o-mini\",\"text-embedding-3-small\"]}" \
	"{\"name\":\"anthropic\",\"provider\":\"anthropic\",\"base_url\":\"$MOCK_URL\",\"api_key\":\"$KEY\",\"models\":[\"claude-mock\"]}" \
	"{\"name\":\"gemini\",\"provider\":\"gemini\",\"base_url\":\"$MOCK_URL\",\"api_key\":\"$KEY\",\"models\":[\"gemini-mock\"]}"; do
	api POST api/admin/upstreams "$k" "$ADMIN" >/dev/null
done

chat() { echo "{\"model\":\"$1\",\"max_tokens\":64,\"messages\":[{\"role\":\"user\",\"content\":\"hello there, how are you\"}]}"; }
messages() { echo "{\"model\":\"$1\",\"max_tokens\":64,\"messages\":[{\"role\":\"user\",\"content\":\"hello there, how are you\"}]}"; }
responses() { echo "{\"model\":\"$1\",\"max_output_tokens\":64,\"store\":false,\"input\":\"hello there, how are you\"}"; }
GEMINI_NATIVE='{"contents":[{"role":"user","parts":[{"text":"hello there, how are you"}]}],"generationConfig":{"maxOutputTokens":64}}'
EMBED='{"model":"text-embedding-3-small","input":"hello there, how are you","encoding_format":"base64"}'

# same NAME PATH AUTH BODY: direct, proxy and Sluice in one dialect.
same() {
	local name=$1 path=$2 auth=$3 body=$4
	echo "\$ loadgen -direct $MOCK_URL/v1 -serve-proxy 127.0.0.1:0 -sluice $SLUICE/v1 -path $path -auth $auth -body '$body' -rate $RATE -concurrency $CONCURRENCY  # $name" >&2
	loadgen_run 3 -direct "$MOCK_URL/v1" -direct-key "$KEY" -serve-proxy 127.0.0.1:0 -sluice "$SLUICE/v1" \
		-path "$path" -auth "$auth" -body "$body" -rate "$RATE" -concurrency "$CONCURRENCY" |
		sed -n "s@^| \(direct\|proxy\|sluice\) |@| $name \1 |@p" | tee -a "$TMP/rows.txt"
}

# native NAME URL PATH AUTH BODY: the provider alone, in its own dialect
# at its own path (Gemini's is not under /v1).
native() {
	local name=$1 base=$2 path=$3 auth=$4 body=$5
	loadgen_run 2 -direct "$base" -direct-key "$KEY" -serve-proxy 127.0.0.1:0 \
		-path "$path" -auth "$auth" -body "$body" -rate "$RATE" -concurrency "$CONCURRENCY" |
		sed -n "s@^| \(direct\|proxy\) |@| $name \1 |@p" | tee -a "$TMP/rows.txt"
}

# translated NAME PATH AUTH BODY: Sluice alone, one dialect to another.
translated() {
	local name=$1 path=$2 auth=$3 body=$4
	loadgen_run 1 -sluice "$SLUICE/v1" -path "$path" -auth "$auth" -body "$body" -rate "$RATE" -concurrency "$CONCURRENCY" |
		sed -n "s@^| sluice |@| $name sluice |@p" | tee -a "$TMP/rows.txt"
}

: >"$TMP/rows.txt"
for round in $(seq 1 "$ROUNDS"); do
	log "round $round of $ROUNDS"
	same chat/openai /chat/completions bearer "$(chat gpt-4o-mini)"
	translated responses/openai /responses bearer "$(responses gpt-4o-mini)"
	translated messages/openai /messages x-api-key "$(messages gpt-4o-mini)"
	same embeddings/openai /embeddings bearer "$EMBED"
	same messages/anthropic /messages x-api-key "$(messages claude-mock)"
	translated chat/anthropic /chat/completions bearer "$(chat claude-mock)"
	translated responses/anthropic /responses bearer "$(responses claude-mock)"
	native gemini "$MOCK_URL" /v1beta/models/gemini-mock:generateContent x-goog-api-key "$GEMINI_NATIVE"
	translated chat/gemini /chat/completions bearer "$(chat gemini-mock)"
	translated messages/gemini /messages x-api-key "$(messages gemini-mock)"
done

# The medians over the rounds of each row's p50 and p99, and the goals'
# ratios. loadgen's columns: target, concurrency, rate, requests, QPS,
# p50 ms, p99 ms, errors %, ...
python3 - "$TMP/rows.txt" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1], encoding="utf-8"):
    f = [c.strip() for c in line.strip().strip("|").split("|")]
    name, target = f[0].rsplit(" ", 1)
    rows.setdefault((name, target), []).append((float(f[5]), float(f[6]), float(f[7])))
med = lambda k, i: statistics.median(r[i] for r in rows[k])
print("| case | target | p50 ms | p99 ms | errors % |")
print("|---|---|---:|---:|---:|")
for k in rows:
    print("| %s | %s | %.3f | %.3f | %.2f |" % (k[0], k[1], med(k, 0), med(k, 1), med(k, 2)))
print()
provider = {"chat/openai": "chat/openai", "responses/openai": "chat/openai", "messages/openai": "chat/openai",
            "embeddings/openai": "embeddings/openai", "messages/anthropic": "messages/anthropic",
            "chat/anthropic": "messages/anthropic", "responses/anthropic": "messages/anthropic",
            "chat/gemini": "gemini", "messages/gemini": "gemini"}
same = {"chat/openai", "embeddings/openai", "messages/anthropic"}
print("| case | Sluice adds p50 / p99 ms | bare proxy adds p50 / p99 ms | ratio p50 / p99 (goal ≤ 1.2) | translated ÷ same-dialect p50 (goal ≤ 1.5) |")
print("|---|---:|---:|---:|---:|")
for name, base in provider.items():
    if (name, "sluice") not in rows:
        continue
    d50, d99 = med((base, "direct"), 0), med((base, "direct"), 1)
    s50, s99 = med((name, "sluice"), 0) - d50, med((name, "sluice"), 1) - d99
    p50, p99 = med((base, "proxy"), 0) - d50, med((base, "proxy"), 1) - d99
    ratio = "%.2f / %.2f" % (s50 / p50, s99 / p99) if name in same else "-"
    ref = {"openai": "chat/openai", "anthropic": "messages/anthropic", "gemini": "chat/openai"}[name.split("/")[1]]
    trans = "-"
    if name not in same:
        r50 = med((ref, "sluice"), 0) - med((provider[ref], "direct"), 0)
        trans = "%.2f" % (s50 / r50)
    print("| %s | %.3f / %.3f | %.3f / %.3f | %s | %s |" % (name, s50, s99, p50, p99, ratio, trans))
EOF
