// End-to-end: the official openai npm client against a running `vllmc serve`
// (started by tests/scripts/test_server.sh, which sets VLLMC_BASE_URL).
// References are independent of the code under test: the greedy continuation
// of "Once upon a time" comes from the shared golden file (a float64 NumPy
// forward pass, matching llama2.c's published sample).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { test } from 'node:test';
import OpenAI from 'openai';

const base = process.env.VLLMC_BASE_URL;
const golden = JSON.parse(fs.readFileSync(process.env.VLLMC_GOLDEN, 'utf8')).cases[0];
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: process.env.VLLMC_API_KEY || 'none', maxRetries: 0 });
const N = 24;
let model;

async function streamText(params) {
  const stream = await client.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
  const texts = {};
  const finish = {};
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const ch of chunk.choices) {
      texts[ch.index] = (texts[ch.index] || '') + ch.text;
      if (ch.finish_reason) finish[ch.index] = ch.finish_reason;
    }
  }
  return { texts, finish, usage };
}

test('models.list', async () => {
  const models = await client.models.list();
  assert.ok(models.data.length >= 1);
  model = models.data[0].id;
  assert.equal(models.data[0].object, 'model');
});

test('greedy completion equals the golden continuation', async () => {
  const c = await client.completions.create({ model, prompt: golden.prompt, max_tokens: N, temperature: 0 });
  const text = c.choices[0].text;
  assert.ok(text.length > 20);
  assert.ok(golden.generated_text.startsWith(text), `got ${JSON.stringify(text)}`);
  assert.equal(c.choices[0].finish_reason, 'length');
  assert.equal(c.usage.prompt_tokens, golden.prompt_token_ids.length);
  assert.equal(c.usage.completion_tokens, N);
  assert.equal(c.object, 'text_completion');
});

test('token-id prompt equals the text prompt', async () => {
  const c = await client.completions.create({ model, prompt: golden.prompt_token_ids, max_tokens: 8, temperature: 0 });
  assert.ok(golden.generated_text.startsWith(c.choices[0].text));
});

test('a list of prompts, echo', async () => {
  const c = await client.completions.create({ model, prompt: [golden.prompt, 'Lily'], max_tokens: 4, temperature: 0, echo: true });
  assert.equal(c.choices.length, 2);
  assert.ok(c.choices[0].text.startsWith(golden.prompt));
  assert.ok(c.choices[1].text.startsWith('Lily'));
});

test('streaming equals non-streaming, with the usage chunk', async () => {
  const whole = await client.completions.create({ model, prompt: golden.prompt, max_tokens: N, temperature: 0 });
  const s = await streamText({ model, prompt: golden.prompt, max_tokens: N, temperature: 0 });
  assert.equal(s.texts[0], whole.choices[0].text);
  assert.equal(s.finish[0], 'length');
  assert.equal(s.usage.completion_tokens, N);
});

test('stop strings end the text and are not included', async () => {
  // The golden continuation has "Lily." early on: stop at the period.
  const c = await client.completions.create({ model, prompt: golden.prompt, max_tokens: 40, temperature: 0, stop: ['.'] });
  const cut = golden.generated_text.slice(0, golden.generated_text.indexOf('.'));
  assert.equal(c.choices[0].text, cut);
  assert.equal(c.choices[0].finish_reason, 'stop');
});

test('logprobs with top alternatives', async () => {
  const c = await client.completions.create({ model, prompt: golden.prompt, max_tokens: 4, temperature: 0, logprobs: 3 });
  const l = c.choices[0].logprobs;
  assert.equal(l.tokens.length, 4);
  assert.ok(l.token_logprobs.every((x) => x <= 0));
  assert.ok(Object.keys(l.top_logprobs[0]).length >= 3);
  // Greedy: the chosen token is the most likely one.
  const best = Math.max(...Object.values(l.top_logprobs[0]));
  assert.ok(Math.abs(best - l.token_logprobs[0]) < 1e-4);
});

// The log-softmax of the golden first-step logits (the float64 reference
// forward pass) at token id.
function goldenFirstLogprob(id) {
  const l = golden.first_step_logits;
  const m = Math.max(...l);
  return l[id] - (m + Math.log(l.reduce((s, x) => s + Math.exp(x - m), 0)));
}

// A completion's logprobs gathered from its stream, chunk by chunk.
async function streamLogprobs(params) {
  const stream = await client.completions.create({ ...params, stream: true });
  const lp = { tokens: [], token_logprobs: [], text_offset: [] };
  let text = '';
  for await (const chunk of stream) {
    for (const ch of chunk.choices) {
      text += ch.text;
      if (!ch.logprobs) continue;
      for (const k of Object.keys(lp)) lp[k].push(...ch.logprobs[k]);
    }
  }
  return { text, lp };
}

test('text_offset points at each token in the text, streamed or not, after an echo', async () => {
  const params = { model, prompt: golden.prompt, max_tokens: 12, temperature: 0, logprobs: 1 };
  const whole = (await client.completions.create(params)).choices[0];
  const l = whole.logprobs;
  assert.equal(l.tokens.length, 12);
  // The golden logits give the first token's logprob independently.
  assert.ok(Math.abs(l.token_logprobs[0] - goldenFirstLogprob(golden.generated_token_ids[0])) < 1e-3);
  for (let i = 0; i < l.tokens.length; i++) {
    // A token decoded alone may lose the leading space it has in the text.
    const at = whole.text.indexOf(l.tokens[i], l.text_offset[i]);
    assert.ok(at === l.text_offset[i] || at === l.text_offset[i] + 1, `token ${i} ${JSON.stringify(l.tokens[i])} at ${l.text_offset[i]}`);
    if (i > 0) assert.ok(l.text_offset[i] > l.text_offset[i - 1]);
  }
  const s = await streamLogprobs(params);
  assert.equal(s.text, whole.text);
  assert.deepEqual(s.lp.text_offset, l.text_offset);
  assert.deepEqual(s.lp.tokens, l.tokens);

  // echo: the prompt's tokens come first, the first without a logprob, and
  // the generated tokens' offsets start after the prompt's text.
  const e = (await client.completions.create({ ...params, echo: true })).choices[0];
  const n = golden.prompt_token_ids.length;
  assert.equal(e.text, golden.prompt + whole.text);
  assert.equal(e.logprobs.tokens.length, n + 12);
  assert.equal(e.logprobs.token_logprobs[0], null);
  assert.equal(e.logprobs.top_logprobs[0], null);
  assert.deepEqual(e.logprobs.tokens.slice(n), l.tokens);
  assert.deepEqual(e.logprobs.text_offset.slice(n), l.text_offset.map((x) => x + golden.prompt.length));
  const se = await streamLogprobs({ ...params, echo: true });
  assert.equal(se.text, e.text);
  assert.deepEqual(se.lp.text_offset, e.logprobs.text_offset);
});

test('prompt_logprobs in vLLM\'s shape, against the reference forward pass', async () => {
  const next = golden.generated_token_ids[0];
  const ids = [...golden.prompt_token_ids, next];
  const c = await client.completions.create({ model, prompt: ids, max_tokens: 1, temperature: 0, prompt_logprobs: 2 });
  const plp = c.choices[0].prompt_logprobs;
  assert.equal(plp.length, ids.length);
  assert.equal(plp[0], null);
  for (let i = 1; i < ids.length; i++) {
    const e = plp[i][String(ids[i])];
    assert.ok(e && e.rank >= 1 && e.logprob <= 0 && typeof e.decoded_token === 'string', `position ${i}`);
  }
  // The last position predicts the golden first token from the whole prompt.
  const last = plp[ids.length - 1];
  assert.equal(last[String(next)].rank, 1);
  assert.ok(Math.abs(last[String(next)].logprob - goldenFirstLogprob(next)) < 1e-3);
  const top2 = Object.entries(last).filter(([, v]) => v.rank <= 2).sort((a, b) => a[1].rank - b[1].rank);
  assert.deepEqual(top2.map(([k]) => Number(k)), golden.first_step_top10.slice(0, 2).map(([id]) => id));
  await assert.rejects(client.completions.create({ model, prompt: 'x', stream: true, prompt_logprobs: 1 }), (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.error.param, 'prompt_logprobs');
    return true;
  });
});

test('n samples with a seed are reproducible', async () => {
  const a = await client.completions.create({ model, prompt: 'Lily', max_tokens: 8, n: 3, seed: 7, temperature: 1 });
  const b = await client.completions.create({ model, prompt: 'Lily', max_tokens: 8, n: 3, seed: 7, temperature: 1 });
  assert.equal(a.choices.length, 3);
  assert.deepEqual(a.choices.map((x) => x.text), b.choices.map((x) => x.text));
});

test('chat completion, streamed and not, with logprobs', async () => {
  const messages = [{ role: 'user', content: 'Tell me a story.' }];
  const chat = await client.chat.completions.create({ model, messages, max_tokens: 16, temperature: 0, logprobs: true, top_logprobs: 2 });
  const msg = chat.choices[0].message;
  assert.equal(msg.role, 'assistant');
  assert.ok(msg.content.length > 0);
  assert.equal(chat.choices[0].logprobs.content.length, 16);
  assert.equal(chat.choices[0].logprobs.content[0].top_logprobs.length, 2);
  const stream = await client.chat.completions.create({ model, messages, max_tokens: 16, temperature: 0, stream: true });
  let text = '';
  let role = null;
  for await (const chunk of stream) {
    for (const ch of chunk.choices) {
      role = role || ch.delta.role;
      text += ch.delta.content || '';
    }
  }
  assert.equal(role, 'assistant');
  assert.equal(text, msg.content);
});

test('errors in OpenAI shape', async () => {
  const cases = [
    [{ model, prompt: 'x', temperature: -1 }, 400, 'temperature'],
    [{ model, prompt: 'x', top_p: 2 }, 400, 'top_p'],
    [{ model, prompt: 'x', max_tokens: 1000000 }, 400, 'max_tokens'],
    [{ model, prompt: 'x', suffix: 'y' }, 400, 'suffix'],
    [{ model: 'no-such-model', prompt: 'x' }, 404, 'model'],
  ];
  for (const [body, status, param] of cases) {
    await assert.rejects(client.completions.create(body), (e) => {
      assert.equal(e.status, status);
      assert.equal(e.error.param, param);
      assert.equal(typeof e.error.message, 'string');
      return true;
    });
  }
});

test('64 concurrent streaming clients get the greedy text they get alone', async () => {
  const prompts = ['Once upon a time', 'Lily and Tom were friends.', 'The little dog', 'One day'];
  const alone = [];
  for (const p of prompts) {
    alone.push((await client.completions.create({ model, prompt: p, max_tokens: 20, temperature: 0 })).choices[0].text);
  }
  const runs = await Promise.all(Array.from({ length: 64 }, (_, i) =>
    streamText({ model, prompt: prompts[i % prompts.length], max_tokens: 20, temperature: 0 })));
  runs.forEach((r, i) => assert.equal(r.texts[0], alone[i % prompts.length], `client ${i}`));
});

test('a client that disconnects mid-stream is aborted and its slot freed', async () => {
  const controller = new AbortController();
  const stream = await client.completions.create(
    { model, prompt: 'Once', max_tokens: 2000, n: 16, temperature: 1, ignore_eos: true, stream: true },
    { signal: controller.signal });
  let got = 0;
  // The client library ends the iteration quietly on abort.
  try {
    for await (const _ of stream) if (++got === 1) controller.abort();
  } catch (e) {
    assert.equal(e.name, 'AbortError');
  }
  let ok = false;
  for (let i = 0; i < 300 && !ok; i++) {
    await new Promise((r) => setTimeout(r, 100));
    const m = await (await fetch(`${base}/metrics`)).text();
    ok = /vllm:request_success_total\{finished_reason="abort"[^}]*\} [1-9]/.test(m) &&
      /vllm:num_requests_running\{[^}]*\} 0\n/.test(m) && /vllm:kv_cache_usage_perc\{[^}]*\} 0\n/.test(m);
  }
  assert.ok(ok, 'abort counted, nothing running, KV cache empty');
});
