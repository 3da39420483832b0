// Drives Sluice with the official `openai` npm package, unchanged, and exits
// non-zero on the first thing that is not as the SDK's users expect.
// Run by sdk_node_test.go; reads SLUICE_BASE, SLUICE_KEY, SLUICE_RETRY_KEY
// and SLUICE_PROVIDER_MODEL from the environment.
import OpenAI from "openai";

const base = process.env.SLUICE_BASE + "/v1";
const fail = (msg) => { console.error("FAIL: " + msg); process.exit(1); };

const client = new OpenAI({ baseURL: base, apiKey: process.env.SLUICE_KEY });

// 1. A plain completion from the local model.
const local = await client.chat.completions.create({
  model: "sluice-local",
  messages: [{ role: "user", content: "Write a spring couplet about peace" }],
});
if (!local.choices[0].message.content.includes("上联")) fail("local reply: " + local.choices[0].message.content);
if (!(local.usage.total_tokens > 0)) fail("local usage missing");

// 2. A stream from the provider model, with the usage chunk.
const stream = await client.chat.completions.create({
  model: process.env.SLUICE_PROVIDER_MODEL,
  messages: [{ role: "user", content: "stream to me" }],
  stream: true,
  stream_options: { include_usage: true },
});
let text = "", usage = null;
for await (const chunk of stream) {
  for (const c of chunk.choices) text += c.delta?.content ?? "";
  if (chunk.usage) usage = chunk.usage;
}
if (text !== "mock reply to: stream to me") fail("streamed text: " + JSON.stringify(text));
if (!usage || !(usage.total_tokens > 0)) fail("no usage chunk");

// 3. The Responses API, streamed from the provider model: the SDK's own
// event stream, text deltas and the completed response with its usage.
const rstream = await client.responses.create({
  model: process.env.SLUICE_PROVIDER_MODEL,
  input: "stream to me",
  stream: true,
});
let rtext = "", completed = null;
const seen = new Set();
for await (const ev of rstream) {
  seen.add(ev.type);
  if (ev.type === "response.output_text.delta") rtext += ev.delta;
  if (ev.type === "response.completed") completed = ev.response;
}
if (rtext !== "mock reply to: stream to me") fail("responses streamed text: " + JSON.stringify(rtext));
for (const t of ["response.created", "response.output_item.added", "response.output_text.done", "response.completed"]) {
  if (!seen.has(t)) fail("responses stream without " + t + ": " + [...seen].join(","));
}
if (!completed || completed.output?.[0]?.content?.[0]?.text !== rtext || !(completed.usage?.total_tokens > 0)) fail("responses completed: " + JSON.stringify(completed));
// And not streamed, from the local model, continued by previous_response_id.
const first = await client.responses.create({ model: "sluice-local", input: "Write a spring couplet about peace" });
if (!first.output_text.includes("上联")) fail("responses local: " + first.output_text);
const next = await client.responses.create({ model: "sluice-local", input: "another", previous_response_id: first.id });
if (!(next.usage.input_tokens > first.usage.input_tokens)) fail("continuation did not carry the first exchange: " + JSON.stringify(next.usage));

// 4. Embeddings: the SDK asks for base64 and decodes it.
const emb = await client.embeddings.create({ model: "sluice-local", input: ["peace", "spring"] });
if (emb.data.length !== 2 || emb.data[0].embedding.length !== 256) fail("embeddings: " + JSON.stringify(emb).slice(0, 200));
const norm = Math.sqrt(emb.data[0].embedding.reduce((s, x) => s + x * x, 0));
if (Math.abs(norm - 1) > 1e-3) fail("embedding not unit length: " + norm);

// 5. The SDK's own retry on Sluice's 429 (retry-after-ms): the tier of this
// key holds one request and refills 5 a second.
const limited = new OpenAI({ baseURL: base, apiKey: process.env.SLUICE_RETRY_KEY, maxRetries: 2 });
const ask = () => limited.chat.completions.create({ model: "sluice-local", messages: [{ role: "user", content: "first or second" }] });
await ask();
const start = Date.now();
await ask(); // refused once with 429, then retried by the SDK
const waited = Date.now() - start;
if (waited < 150 || waited > 5000) fail("retry waited " + waited + " ms");
const noRetry = new OpenAI({ baseURL: base, apiKey: process.env.SLUICE_RETRY_KEY, maxRetries: 0 });
try {
  await noRetry.chat.completions.create({ model: "sluice-local", messages: [{ role: "user", content: "third" }] });
  fail("no 429 without retries");
} catch (e) {
  if (e.status !== 429 || e.code !== "rate_limit_exceeded") fail("429 as seen by the SDK: " + e.status + " " + e.code);
}
console.log(JSON.stringify({ ok: true, waited }));
