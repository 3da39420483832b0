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

// 3. The SDK's own retry on Sluice's 429 (retry-after-ms): the tier of this
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
