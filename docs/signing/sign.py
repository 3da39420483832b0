"""The Python example of the README's "Signed requests" (standard library
only), whose code between the readme markers the README quotes;
TestSigningExamples runs it against a real server.

  SLUICE_BASE=http://localhost:8080 SLUICE_KEY=sk_sluice_… SLUICE_SIGNING_SECRET=sk_sluice_sign_… \\
    python3 docs/signing/sign.py POST /v1/chat/completions '{"model":"sluice-local","messages":[{"role":"user","content":"hi"}]}' 'X-Sluice-Priority: high'
"""
import os
import sys
import urllib.error
import urllib.request

# readme:start
import hashlib, hmac, secrets, time
from urllib.parse import urlsplit

def signed_headers(method, path, headers, body: bytes, secret):
    """The signature's three headers for a request to path (with its query
    string, as sent) with headers (a dict) and body. It covers the method,
    the path, the query string and every X-Sluice-* header in headers."""
    ts, nonce = str(int(time.time())), secrets.token_hex(16)
    url = urlsplit(path)
    text = "\n".join([method, url.path, ts, nonce, hashlib.sha256(body).hexdigest()])
    covered = sorted((k.lower(), v.strip(" \t")) for k, v in headers.items() if k.lower().startswith("x-sluice-"))
    if url.query or covered:
        text += "\n" + url.query + "\n" + "".join(f"{k}:{v}\n" for k, v in covered)
    sig = hmac.new(secret.encode(), text.encode(), hashlib.sha256).hexdigest()
    return {"X-Sluice-Timestamp": ts, "X-Sluice-Nonce": nonce, "X-Sluice-Signature": sig}
# readme:end

def main():
    """METHOD PATH [BODY [NAME:VALUE ...]]: prints the answer; exit status 1
    on an answer that is not a 2xx."""
    method, path = sys.argv[1], sys.argv[2]
    body = sys.argv[3].encode() if len(sys.argv) > 3 else b""
    headers = {"Authorization": "Bearer " + os.environ["SLUICE_KEY"]}
    if body:
        headers["Content-Type"] = "application/json"
    for h in sys.argv[4:]:
        name, _, value = h.partition(":")
        headers[name] = value.strip()
    headers.update(signed_headers(method, path, headers, body, os.environ["SLUICE_SIGNING_SECRET"]))
    req = urllib.request.Request(os.environ["SLUICE_BASE"] + path, data=body or None, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req) as resp:
            print(resp.status, resp.read().decode())
    except urllib.error.HTTPError as e:
        print(e.code, e.read().decode())
        sys.exit(1)

if __name__ == "__main__":
    main()
