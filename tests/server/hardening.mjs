// Hardening regressions against a live `dsflash serve` on the tiny model (issue: a server that
// survives its users).  Linear id arrays on the real tokenizer (80k ids < 1 s, a 5M-id body
// < 5 s or 413), NUL bytes in /detokenize output and "\u0000" in request text, 405 with Allow,
// HEAD /health, /version and /v1/models/{id}, and the official openai client reading several
// choices (n, lists of prompts).  Expected values are the HTTP and OpenAI rules and the
// tokenizer's byte-level ids (35 'A', 191 byte 0x00, 36 'B' in the tiny vocabulary).
import http from 'node:http';
import net from 'node:net';
import OpenAI from 'openai';
import { test, assert, assertEq, run, post, get } from './harness.mjs';

const [base] = process.argv.slice(2);
const MODEL = 'deepseek-v41';

// ids 100..999 (the tiny vocabulary has 1024): 4 bytes each with the comma, a 20 MB body for 5M ids
function idsBody(n) {
    const parts = new Array(n);
    for (let i = 0; i < n; i++) parts[i] = 100 + (i % 900);
    return Buffer.from(`{"tokens":[${parts.join(',')}]}`);
}

// Request to last byte of the reply, raw bytes (no client-side decoding in the timing).
function rawPost(path, buf) {
    return new Promise((resolve, reject) => {
        const u = new URL(base + path);
        const t0 = performance.now();
        const req = http.request({ host: u.hostname, port: u.port, path: u.pathname, method: 'POST',
                                   headers: { 'Content-Type': 'application/json', 'Content-Length': buf.length } }, (res) => {
            const chunks = [];
            res.on('data', (d) => chunks.push(d));
            res.on('end', () => resolve({ status: res.statusCode, s: (performance.now() - t0) / 1000, body: Buffer.concat(chunks) }));
        });
        req.on('error', reject);
        req.end(buf);
    });
}

async function timedDetok(n) {
    const body = idsBody(n);
    const r = await rawPost('/detokenize', body);
    return { r, s: r.s, bytes: body.length };
}

// The absolute 5 s limit for 5M ids is enforced in process (tests/unit/test_server_hardening.c);
// here, on a live server over loopback with a shared, busy host, the 5M-id time must scale
// linearly from a 400k-id request of the same run (12.5x the ids: linear <= 3 x 12.5, quadratic
// would be 156x), and is printed against the limit.
test('80k-id /detokenize under 1 s, 5M ids linear (printed against 5 s; or 413)', async () => {
    const a = await timedDetok(80000);
    assert(a.r.status === 200, `80k: ${a.r.status}`);
    const m = await timedDetok(400000);
    assert(m.r.status === 200, `400k: ${m.r.status}`);
    const b = await timedDetok(5000000);
    assert(b.r.status === 200 || b.r.status === 413, `5M: ${b.r.status}`);
    console.log(`  timing (live tiny model, busy host): 80k ids ${a.s.toFixed(3)} s (limit 1), 400k ids ${m.s.toFixed(3)} s, ` +
                `5M ids (${(b.bytes / 1e6).toFixed(1)} MB body, ${(b.r.body.length / 1e6).toFixed(1)} MB reply) ${b.s.toFixed(3)} s ` +
                `status ${b.r.status} (limit 5; ratio 5M/400k ${(b.s / m.s).toFixed(1)}, linear 12.5)`);
    assert(a.s < 1, `80k ids took ${a.s} s`);
    assert(b.s <= 3 * 12.5 * m.s, `5M ids took ${b.s} s, ${(b.s / m.s).toFixed(1)}x the 400k-id time: not linear`);
});

test('/detokenize keeps text after a NUL byte; "\\u0000" in requests is text', async () => {
    const r = await post(base, '/detokenize', { tokens: [35, 191, 36] });
    assertEq(r.json, { prompt: 'A\u0000B' }, '[35,191,36]');
    const t = await post(base, '/tokenize', { prompt: 'A\u0000B', add_special_tokens: false });
    assertEq(t.json && t.json.tokens, [35, 191, 36], 'tokenize of "A\\u0000B"');
    const rt = await post(base, '/tokenize', { prompt: 'A\u0000B', add_special_tokens: false, return_text: true });
    assertEq(rt.json && rt.json.text, 'A\u0000B', '/tokenize return_text keeps the text after a NUL');
    const c = await post(base, '/v1/chat/completions', { model: MODEL, max_tokens: 2,
                                                         messages: [{ role: 'user', content: 'a\u0000b' }] });
    assert(c.status === 200, `chat with NUL: ${c.status} ${c.text.slice(0, 200)}`);
});

test('wrong method is 405 with Allow; HEAD /health; /version; /v1/models/{id}', async () => {
    const r = await fetch(base + '/v1/chat/completions');
    assert(r.status === 405 && r.headers.get('allow') === 'POST', `GET chat: ${r.status} ${r.headers.get('allow')}`);
    const h = await fetch(base + '/health', { method: 'HEAD' });
    assert(h.status === 200 && (await h.text()) === '', `HEAD /health: ${h.status}`);
    const v = await get(base, '/version');
    assert(v.status === 200 && typeof v.json.version === 'string', `/version: ${v.text}`);
    const m = await get(base, `/v1/models/${MODEL}`);
    assert(m.status === 200 && m.json.id === MODEL && m.json.object === 'model', `/v1/models/id: ${m.text}`);
    const nf = await get(base, '/v1/models/nope');
    assert(nf.status === 404, `/v1/models/nope: ${nf.status}`);
});

test('openai client: n=2 chat choices, a list of prompts, echo, integral max_tokens', async () => {
    const client = new OpenAI({ baseURL: base + '/v1', apiKey: 'unused', maxRetries: 0 });
    const chat = await client.chat.completions.create({ model: MODEL, n: 2, max_tokens: 4, seed: 3,
                                                        messages: [{ role: 'user', content: 'hi' }] });
    assertEq(chat.choices.map((c) => c.index), [0, 1], 'chat choice indexes');
    const cmpl = await client.completions.create({ model: MODEL, prompt: ['one', 'two'], max_tokens: 3, temperature: 0 });
    assertEq(cmpl.choices.map((c) => c.index), [0, 1], 'completion choice indexes');
    const alone = await client.completions.create({ model: MODEL, prompt: 'two', max_tokens: 3, temperature: 0 });
    assertEq(cmpl.choices[1].text, alone.choices[0].text, 'second prompt alone gives the same text');
    const echo = await client.completions.create({ model: MODEL, prompt: 'two', max_tokens: 3, temperature: 0, echo: true });
    assertEq(echo.choices[0].text, 'two' + alone.choices[0].text, 'echo');
    const two = await post(base, '/v1/completions', { model: MODEL, prompt: 'x', max_tokens: 2.0, ignore_eos: true });
    assert(two.status === 200 && two.json.usage.completion_tokens === 2, `max_tokens 2.0: ${two.status}`);
});

// A Content-Length that is not a number is refused by libmicrohttpd itself, before our handler runs.
// Version 0.9.75 (Debian 12) writes its header block twice in that reply (a library defect, see
// docs/DECISIONS.md); what we guarantee is the status line (400, or 413 for a huge value) and the close.
function rawExchange(text) {
    return new Promise((resolve) => {
        const u = new URL(base);
        const sock = net.connect(Number(u.port), u.hostname, () => sock.end(text));
        const chunks = [];
        const timer = setTimeout(() => { sock.destroy(); resolve({ text: Buffer.concat(chunks).toString(), closed: false }); }, 5000);
        sock.on('data', (d) => chunks.push(d));
        sock.on('close', () => { clearTimeout(timer); resolve({ text: Buffer.concat(chunks).toString(), closed: true }); });
        sock.on('error', () => {});
    });
}
test('bad Content-Length: 400 (413 when huge) and the connection closes', async () => {
    for (const [cl, code] of [['abc', 400], ['-5', 400], ['5, 6', 400], ['99999999999999999999999', 413]]) {
        const r = await rawExchange(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${cl}\r\n\r\n{}`);
        assert(r.text.startsWith(`HTTP/1.1 ${code} `), `Content-Length ${cl}: ${JSON.stringify(r.text.slice(0, 40))}`);
        assert(r.closed, `Content-Length ${cl}: connection not closed within 5 s`);
    }
});

run();
