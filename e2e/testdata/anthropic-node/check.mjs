// Drives Sluice's Messages API with the official `@anthropic-ai/sdk` npm
// package, unchanged, and exits non-zero on the first thing that is not as
// the SDK's users expect. Run by sdk_node_test.go; reads SLUICE_BASE,
// SLUICE_KEY, SLUICE_RETRY_KEY, SLUICE_PROVIDER_MODEL (an OpenAI-compatible
// key's model) and SLUICE_ANTHROPIC_MODEL (an Anthropic key's model).
import Anthropic from "@anthropic-ai/sdk";

const fail = (msg) => { console.error("FAIL: " + msg); process.exit(1); };
const client = new Anthropic({ baseURL: process.env.SLUICE_BASE, apiKey: process.env.SLUICE_KEY });

// 1. Not streamed, from the local model.
const local = await client.messages.create({
  model: "sluice-local", max_tokens: 256,
  messages: [{ role: "user", content: "Write a spring couplet about peace" }],
});
if (local.type !== "message" || !local.content[0].text.includes("上联")) fail("local: " + JSON.stringify(local));
if (!(local.usage.input_tokens > 0 && local.usage.output_tokens > 0)) fail("local usage: " + JSON.stringify(local.usage));

// 2. Streamed, to a model each kind of key serves: translated to OpenAI's
// chat form and back, and spoken natively to Anthropic.
for (const model of [process.env.SLUICE_PROVIDER_MODEL, process.env.SLUICE_ANTHROPIC_MODEL]) {
  const stream = client.messages.stream({ model, max_tokens: 256, messages: [{ role: "user", content: "stream to me" }] });
  let text = "";
  stream.on("text", (t) => { text += t; });
  const final = await stream.finalMessage();
  if (text !== "mock reply to: stream to me" || final.content[0].text !== text) fail(model + " streamed text: " + JSON.stringify(text));
  if (final.stop_reason !== "end_turn" || !(final.usage.output_tokens > 0)) fail(model + " final: " + JSON.stringify(final));
}

// 3. A refusal as the SDK reads it: max_tokens is required.
try {
  await client.messages.create({ model: "sluice-local", messages: [{ role: "user", content: "hi" }] });
  fail("no 400 without max_tokens");
} catch (e) {
  if (!(e instanceof Anthropic.BadRequestError) || e.error?.error?.type !== "invalid_request_error") fail("400 as seen by the SDK: " + e);
}

// 4. The SDK's own retry on Sluice's 429 (retry-after): the tier of this
// key holds one request and refills 5 a second.
const limited = new Anthropic({ baseURL: process.env.SLUICE_BASE, apiKey: process.env.SLUICE_RETRY_KEY, maxRetries: 2 });
const ask = () => limited.messages.create({ model: "sluice-local", max_tokens: 16, messages: [{ role: "user", content: "first or second" }] });
await ask();
const start = Date.now();
await ask(); // refused once with 429, then retried by the SDK
const waited = Date.now() - start;
if (waited < 150 || waited > 5000) fail("retry waited " + waited + " ms");
const noRetry = new Anthropic({ baseURL: process.env.SLUICE_BASE, apiKey: process.env.SLUICE_RETRY_KEY, maxRetries: 0 });
try {
  await noRetry.messages.create({ model: "sluice-local", max_tokens: 16, messages: [{ role: "user", content: "third" }] });
  fail("no 429 without retries");
} catch (e) {
  if (!(e instanceof Anthropic.RateLimitError) || e.error?.error?.type !== "rate_limit_error") fail("429 as seen by the SDK: " + e);
}
console.log(JSON.stringify({ ok: true, waited }));
