#!/bin/sh
# The curl and openssl example of the README's "Signed requests", which
# the README quotes from the readme markers on; TestSigningExamples runs it
# against a real server.
#
#   SLUICE_BASE=http://localhost:8080 SLUICE_KEY=sk_sluice_… SLUICE_SIGNING_SECRET=sk_sluice_sign_… \
#     sh docs/signing/sign.sh POST /v1/chat/completions '{"model":"sluice-local","messages":[{"role":"user","content":"hi"}]}' 'X-Sluice-Priority: high'
# readme:start
# sign.sh METHOD PATH [BODY ['Name: value' ...]]: one signed request.
set -eu
method=$1 path=$2 body=${3-}
shift $(($# < 3 ? $# : 3))
ts=$(date +%s)
nonce=$(openssl rand -hex 16)
sum=$(printf '%s' "$body" | openssl dgst -sha256 -r | cut -d' ' -f1)
query=$(printf '%s' "$path" | sed -n 's/^[^?]*?//p')
covered=$(for h in "$@"; do
  name=$(printf '%s' "${h%%:*}" | tr 'A-Z' 'a-z')
  value=$(printf '%s' "${h#*:}" | sed 's/^[[:blank:]]*//; s/[[:blank:]]*$//')
  case $name in x-sluice-*) printf '%s:%s\n' "$name" "$value" ;; esac
done | LC_ALL=C sort -t: -k1,1)
sig=$({
  printf '%s\n%s\n%s\n%s\n%s' "$method" "${path%%\?*}" "$ts" "$nonce" "$sum"
  if [ -n "$query" ] || [ -n "$covered" ]; then
    printf '\n%s\n' "$query"
    [ -z "$covered" ] || printf '%s\n' "$covered"
  fi
} | openssl dgst -sha256 -hmac "$SLUICE_SIGNING_SECRET" -r | cut -d' ' -f1)
n=$#
for h in "$@"; do set -- "$@" -H "$h"; done
shift "$n"
[ -z "$body" ] || set -- "$@" -H 'Content-Type: application/json' --data-binary "$body"
curl -gsS --fail-with-body -X "$method" "$SLUICE_BASE$path" -H "Authorization: Bearer $SLUICE_KEY" \
  -H "X-Sluice-Timestamp: $ts" -H "X-Sluice-Nonce: $nonce" -H "X-Sluice-Signature: $sig" "$@"
# readme:end
