// The Node example of the README's "Signed requests" (Node 18+, no
// packages), whose code between the readme markers the README quotes;
// TestSigningExamples runs it against a real server.
//
//   SLUICE_BASE=http://localhost:8080 SLUICE_KEY=sk_sluice_… SLUICE_SIGNING_SECRET=sk_sluice_sign_… \
//     node docs/signing/sign.mjs POST /v1/chat/completions '{"model":"sluice-local","messages":[{"role":"user","content":"hi"}]}' 'X-Sluice-Priority: high'
import { createHash, createHmac, randomUUID } from "node:crypto";

// readme:start
// signedHeaders returns the signature's three headers for a request to url
// (a URL) with method, headers (an object) and body (a string or Buffer).
// It covers the method, the path, the query string as sent and every
// X-Sluice-* header in headers.
function signedHeaders(method, url, headers, body, secret) {
  const ts = String(Math.floor(Date.now() / 1000));
  const nonce = randomUUID();
  const sum = createHash("sha256").update(body).digest("hex");
  let text = [method, url.pathname, ts, nonce, sum].join("\n");
  const covered = Object.entries(headers)
    .map(([name, value]) => [name.toLowerCase(), String(value).replace(/^[ \t]+|[ \t]+$/g, "")])
    .filter(([name]) => name.startsWith("x-sluice-"))
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  const query = url.search.slice(1); // as fetch sends it
  if (query !== "" || covered.length > 0) {
    text += "\n" + query + "\n" + covered.map(([name, value]) => `${name}:${value}\n`).join("");
  }
  const signature = createHmac("sha256", secret).update(text).digest("hex");
  return { "X-Sluice-Timestamp": ts, "X-Sluice-Nonce": nonce, "X-Sluice-Signature": signature };
}
// readme:end

// METHOD PATH [BODY [NAME:VALUE ...]]: prints the answer; exit code 1 on
// an answer that is not a 2xx.
const [method, path, body = "", ...extra] = process.argv.slice(2);
const url = new URL(path, process.env.SLUICE_BASE);
const headers = { Authorization: `Bearer ${process.env.SLUICE_KEY}` };
if (body !== "") headers["Content-Type"] = "application/json";
for (const h of extra) {
  const i = h.indexOf(":");
  headers[h.slice(0, i)] = h.slice(i + 1).trim();
}
Object.assign(headers, signedHeaders(method, url, headers, body, process.env.SLUICE_SIGNING_SECRET));
const resp = await fetch(url, { method, headers, body: body === "" ? undefined : body });
console.log(resp.status, await resp.text());
process.exitCode = resp.ok ? 0 : 1;
