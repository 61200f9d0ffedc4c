// Hostile traffic: thousands of malformed requests over raw sockets. Every
// one must get an HTTP answer (4xx for bad input) or a closed connection, the
// server must stay healthy, and its memory must stay flat.
// Needs VLLMC_BASE_URL and VLLMC_PID (for /proc/PID/status).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import { test } from 'node:test';

const url = new URL(process.env.VLLMC_BASE_URL);
const pid = process.env.VLLMC_PID;

function rssKiB() {
  const m = /VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(m[1]);
}

// Sends raw bytes, resolves with the status code, or 0 when the server closed.
function raw(bytes, { timeoutMs = 60000, halfClose = true } = {}) {
  return new Promise((resolve) => {
    const s = net.connect(Number(url.port), url.hostname);
    let data = '';
    const timer = setTimeout(() => { s.destroy(); resolve(-1); }, timeoutMs);
    s.on('connect', () => { s.write(bytes); if (halfClose) s.end(); });
    s.on('data', (d) => { data += d.toString('latin1'); });
    s.on('error', () => {});
    s.on('close', () => {
      clearTimeout(timer);
      const m = /^HTTP\/1\.[01] (\d{3})/.exec(data);
      resolve(m ? Number(m[1]) : 0);
    });
  });
}

function post(path, body, extra = '') {
  const b = Buffer.isBuffer(body) ? body : Buffer.from(body, 'latin1');
  return Buffer.concat([
    Buffer.from(`POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n${extra}Content-Length: ${b.length}\r\nConnection: close\r\n\r\n`),
    b,
  ]);
}

let seed = 12345;
function rand(n) { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n; }
function randomBytes(n) { return Buffer.from(Array.from({ length: n }, () => rand(256))); }

const valid = '{"prompt":"Once upon a time","max_tokens":2,"temperature":0}';
function mutations() {
  const out = [];
  for (let i = 0; i < 700; i++) out.push(['/v1/completions', randomBytes(1 + rand(300))]);
  for (let i = 1; i < valid.length; i++) out.push(['/v1/completions', valid.slice(0, i)]);
  for (let i = 0; i < 300; i++) {
    const b = Buffer.from(valid);
    for (let k = 0; k < 3; k++) b[rand(b.length)] = rand(256);
    out.push(['/v1/completions', b]);
  }
  const deep = (n) => '['.repeat(n) + ']'.repeat(n);
  out.push(['/v1/completions', `{"prompt":${deep(100000)}}`]);
  out.push(['/v1/chat/completions', `{"messages":${deep(50000)}}`]);
  out.push(['/v1/completions', '{"prompt":"x","max_tokens":1e999}']);
  out.push(['/v1/completions', '{"prompt":"x","max_tokens":123456789012345678901234567890}']);
  out.push(['/v1/completions', '{"prompt":"x","temperature":-1e308}']);
  out.push(['/v1/completions', '{"prompt":[99999999999]}']);
  out.push(['/v1/completions', '{"prompt":"\xff\xfe\xc3\x28 invalid utf8"}']);
  out.push(['/v1/completions', '{"prompt":"\\ud800 lone surrogate"}']);
  out.push(['/v1/completions', '{"prompt":"x","n":100000}']);
  out.push(['/v1/completions', '{"prompt":"x","logit_bias":{"99999999":5}}']);
  out.push(['/v1/completions', '{"prompt":"x","stop":["' + 'a'.repeat(10000) + '"]}']);
  out.push(['/v1/chat/completions', '{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}']);
  out.push(['/tokenize', '{"prompt":' + JSON.stringify('\u00e9'.repeat(20000)) + '}']);
  out.push(['/detokenize', '{"tokens":[-1, 1e20, "x"]}']);
  return out;
}

test('malformed bodies all get 4xx answers and the server stays up', async () => {
  const all = mutations();
  let answered = 0;
  let before = 0;
  // Round 0 warms up allocator arenas and thread stacks; memory is compared
  // between the end of round 0 and the end of the last round.
  for (let round = 0; round < 4; round++) {
    if (round === 1) before = rssKiB();
    for (let i = 0; i < all.length; i += 16) {
      const batch = all.slice(i, i + 16).map(([path, body]) => raw(post(path, body)));
      for (const status of await Promise.all(batch)) {
        assert.ok(status === 0 || (status >= 200 && status < 500), `status ${status}`);
        answered++;
      }
    }
  }
  assert.ok(answered > 4000);
  const h = await fetch(`${url.origin}/health`);
  assert.equal(h.status, 200);
  const after = rssKiB();
  // Flat memory: growth bounded well below what leaking each body would cost.
  // Under ThreadSanitizer the first request to reach a KV block also creates
  // its shadow memory (the cache's pages came in without an instrumented
  // write), up to a few times the 32 MiB cache; leaks are LSan's to find.
  const slackKiB = (process.env.VLLMC_TEST_TSAN ? 160 : 32) * 1024;
  assert.ok(after - before < slackKiB, `RSS grew from ${before} to ${after} KiB`);
});

test('garbage request lines, wrong methods and slow clients', async () => {
  const lines = ['GARBAGE\r\n\r\n', 'GET\r\n\r\n', 'DELETE /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n',
    'PUT /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n', 'GET /' + 'a'.repeat(100000) + ' HTTP/1.1\r\n\r\n',
    'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n',
    'POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n'];
  for (const l of lines) {
    const status = await raw(Buffer.from(l));
    assert.ok(status === 0 || (status >= 400 && status < 500), `${JSON.stringify(l.slice(0, 40))} -> ${status}`);
  }
  const wrong = await raw(Buffer.from('DELETE /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'));
  assert.equal(wrong, 405);
  // Slow clients: promise a body and stop sending; they must not block others.
  const sockets = Array.from({ length: 20 }, () => {
    const s = net.connect(Number(url.port), url.hostname);
    s.on('error', () => {});
    s.write('POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{"prompt":');
    return s;
  });
  const r = await fetch(`${url.origin}/v1/completions`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{"prompt":"Once","max_tokens":2}' });
  assert.equal(r.status, 200);
  sockets.forEach((s) => s.destroy());
  assert.equal((await fetch(`${url.origin}/health`)).status, 200);
});
