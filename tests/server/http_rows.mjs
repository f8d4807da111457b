// Raw HTTP against a live server started with --api-key k --max-request-body 64KiB
// --max-pending-requests 6: every error row of SERVING.md §10.6 as an exact status + OpenAI
// error body, plus SSE framing and the readiness/open endpoints.
import net from 'node:net';
import { test, assert, assertEq, run, post, get, parseSSE, sleep } from './harness.mjs';

const [base] = process.argv.slice(2);
const AUTH = { Authorization: 'Bearer k' };
const MODEL = 'deepseek-v41';

function expectError(r, status, type, code, param) {
    assertEq(r.status, status, `status (${r.text.slice(0, 200)})`);
    assert(r.json && r.json.error, `error body: ${r.text.slice(0, 200)}`);
    const e = r.json.error;
    assertEq(Object.keys(e).sort(), ['code', 'message', 'param', 'type'], 'error keys');
    assertEq(e.type, type, 'type');
    assertEq(e.code, code, 'code');
    if (param !== undefined) assertEq(e.param, param, 'param');
    assert(typeof e.message === 'string' && e.message.length > 0, 'message');
}

test('open endpoints: /health and /metrics need no key; /v1 does', async () => {
    const h = await get(base, '/health');
    assert(h.status === 200 && h.json.status === 'ok' && h.json.model === MODEL && h.json.instance_id, 'health');
    const m = await get(base, '/metrics');
    assert(m.status === 200 && m.text.includes('dsflash_engine_ready 1'), 'metrics');
    const si = await get(base, '/server_info', AUTH);
    assert(si.status === 200 && si.json.instance_id === h.json.instance_id && si.json.flags['max-pending-requests'] === '6',
           'server_info carries the effective flags and the instance id');
});

test('401 missing or bad API key, with WWW-Authenticate', async () => {
    for (const hdr of [{}, { Authorization: 'Bearer wrong' }]) {
        const r = await post(base, '/v1/completions', { model: MODEL, prompt: 'x' }, hdr);
        expectError(r, 401, 'authentication_error', 'invalid_api_key');
        assertEq(r.headers.get('www-authenticate'), 'Bearer', 'WWW-Authenticate');
    }
    const t = await post(base, '/tokenize', { prompt: 'x' });
    assertEq(t.status, 401, '/tokenize is guarded');
});

test('400 malformed JSON and wrong field types', async () => {
    expectError(await post(base, '/v1/chat/completions', '{"model": "deepseek-v41", "messages": [', AUTH),
                400, 'invalid_request_error', 'invalid_json', null);
    expectError(await post(base, '/v1/chat/completions', { model: MODEL, messages: 'hello' }, AUTH),
                400, 'invalid_request_error', 'invalid_type', 'messages');
    expectError(await post(base, '/v1/completions', { model: MODEL, prompt: 'x', max_tokens: 'ten' }, AUTH),
                400, 'invalid_request_error', 'invalid_type', 'max_tokens');
});

test('400 parameter ranges name the field', async () => {
    const msgs = [{ role: 'user', content: 'hi' }];
    const rows = [
        [{ temperature: 3 }, 'invalid_value', 'temperature'], [{ top_p: 0 }, 'invalid_value', 'top_p'],
        [{ logprobs: true, top_logprobs: 21 }, 'invalid_value', 'top_logprobs'], [{ n: 65 }, 'invalid_value', 'n'],
        [{ top_logprobs: 5 }, 'invalid_value', 'top_logprobs'], [{ logprobs: false, top_logprobs: 1 }, 'invalid_value', 'top_logprobs'],
        [{ top_k: -5 }, 'invalid_value', 'top_k'], [{ presence_penalty: 2.5 }, 'invalid_value', 'presence_penalty'],
        [{ repetition_penalty: 0 }, 'invalid_value', 'repetition_penalty'], [{ max_tokens: 0 }, 'invalid_value', 'max_tokens'],
        [{ logit_bias: { 5: 101 } }, 'invalid_value', 'logit_bias'], [{ min_p: 1.5 }, 'invalid_value', 'min_p'],
        [{ stop: ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i', 'j', 'k', 'l', 'm', 'n', 'o', 'p', 'q'] }, 'invalid_value', 'stop'],
        [{ chat_template_kwargs: { enable_thinking: false }, reasoning_effort: 'high' }, 'invalid_value', undefined],
        [{ reasoning_effort: 101 }, 'invalid_value', undefined],
    ];
    for (const [extra, code, param] of rows) {
        const r = await post(base, '/v1/chat/completions', { model: MODEL, messages: msgs, ...extra }, AUTH);
        expectError(r, 400, 'invalid_request_error', code, param);
    }
    const zero = await post(base, '/v1/chat/completions', { model: MODEL, messages: msgs, max_tokens: 1, top_logprobs: 0 }, AUTH);
    assert(zero.status === 200 && zero.json.choices[0].logprobs == null, `top_logprobs 0 without logprobs: ${zero.status}`);
    expectError(await post(base, '/v1/completions', { model: MODEL, prompt: 'x', logprobs: 21 }, AUTH),
                400, 'invalid_request_error', 'invalid_value', 'logprobs');
    expectError(await post(base, '/v1/completions', { model: MODEL, prompt: 'x', best_of: 2 }, AUTH),
                400, 'invalid_request_error', 'unsupported_parameter', 'best_of');
});

test('400 invalid messages: unknown role, part type, unmatched tool_call_id', async () => {
    const rows = [
        [{ role: 'robot', content: 'x' }],
        [{ role: 'user', content: [{ type: 'audio', data: 'x' }] }],
        [{ role: 'user', content: 'x' }, { role: 'tool', tool_call_id: 'nope', content: 'r' }],
    ];
    for (const messages of rows)
        expectError(await post(base, '/v1/chat/completions', { model: MODEL, messages }, AUTH), 400, 'invalid_request_error', 'invalid_messages');
});

test('400 context_length_exceeded with the spec message', async () => {
    const info = (await get(base, '/v1/models', AUTH)).json.data[0];
    const M = info.max_model_len;
    const r = await post(base, '/v1/completions', { model: MODEL, prompt: [0, 5, 6, 7], max_tokens: M }, AUTH);
    expectError(r, 400, 'invalid_request_error', 'context_length_exceeded');
    assertEq(r.json.error.message, `This model's maximum context length is ${M} tokens. However, you requested ${M + 4} tokens (4 in the messages, ${M} in the completion).`, 'message');
    const long = Array.from({ length: M }, (_, i) => 3 + (i % 200));
    expectError(await post(base, '/v1/completions', { model: MODEL, prompt: long, max_tokens: 1 }, AUTH),
                400, 'invalid_request_error', 'context_length_exceeded');
});

test('BOS and PAD are never generated, not even under logit_bias +100, nor listed in top_logprobs', async () => {
    // BOS is a chat-control token (the encoder writes it), and the mask once spared it with the others
    const r = await post(base, '/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 6,
        temperature: 0, logit_bias: { 0: 100, 2: 100 }, logprobs: true, top_logprobs: 20, skip_special_tokens: false }, AUTH);
    assertEq(r.status, 200, `status (${r.text.slice(0, 200)})`);
    const content = r.json.choices[0].logprobs.content;
    assertEq(content.length, 6, 'six tokens');
    const specials = ['<｜begin▁of▁sentence｜>', '<｜▁pad▁｜>'];
    for (const t of content) {
        assert(!specials.includes(t.token), `generated ${t.token}`);
        for (const tt of t.top_logprobs) assert(!specials.includes(tt.token), `listed ${tt.token}`);
    }
    assert(!r.json.choices[0].message.content.includes('begin▁of▁sentence'), 'no BOS literal in the text');
});

test('CORS (default --allowed-origins *): preflight 204 without the key, answers and streams carry Allow-Origin', async () => {
    const pre = await fetch(base + '/v1/chat/completions', { method: 'OPTIONS', headers: { Origin: 'http://localhost:3000',
        'Access-Control-Request-Method': 'POST', 'Access-Control-Request-Headers': 'authorization,content-type' } });
    assertEq(pre.status, 204, 'preflight status (it was 405)');
    assertEq(pre.headers.get('access-control-allow-origin'), '*', 'Allow-Origin');
    assert(pre.headers.get('access-control-allow-methods').includes('POST'), 'Allow-Methods');
    assertEq(pre.headers.get('access-control-allow-headers'), 'authorization,content-type', 'Allow-Headers echo the request');
    const h = { ...AUTH, Origin: 'http://localhost:3000' };
    const m = await get(base, '/v1/models', h);
    assert(m.status === 200 && m.headers.get('access-control-allow-origin') === '*', 'GET /v1/models with an Origin');
    const st = await fetch(base + '/v1/completions', { method: 'POST', headers: { ...h, 'Content-Type': 'application/json' },
        body: JSON.stringify({ model: MODEL, prompt: 'x', max_tokens: 2, stream: true }) });
    assert(st.status === 200 && st.headers.get('access-control-allow-origin') === '*', 'a stream with an Origin');
    await st.text();
    const no = await post(base, '/v1/completions', { model: MODEL, prompt: 'x' }, { Origin: 'http://localhost:3000' });
    assert(no.status === 401 && no.headers.get('access-control-allow-origin') === '*', 'the 401 is readable by the page too');
});

test('404 unknown model', async () => {
    expectError(await post(base, '/v1/completions', { model: 'gpt-5', prompt: 'x' }, AUTH), 404, 'not_found_error', 'model_not_found', 'model');
});

test('413 body over --max-request-body', async () => {
    const r = await post(base, '/v1/completions', { model: MODEL, prompt: 'x'.repeat(70 * 1024) }, AUTH);
    expectError(r, 413, 'invalid_request_error', 'request_too_large');
    // a body far over the limit is still read before the reply: the client gets the 413, not a
    // broken pipe from a socket closed under its upload
    const big = await post(base, '/v1/completions', { model: MODEL, prompt: 'x'.repeat(8 << 20) }, AUTH);
    expectError(big, 413, 'invalid_request_error', 'request_too_large');
});

// Headers only, the socket left open (no half-close): what comes back within 5 s.
function headersOnly(head) {
    return new Promise((resolve) => {
        const u = new URL(base);
        const sock = net.connect(Number(u.port), u.hostname, () => sock.write(head));
        const chunks = [];
        const t0 = Date.now();
        const timer = setTimeout(() => { sock.destroy(); resolve({ text: Buffer.concat(chunks).toString(), closed: false }); }, 5000);
        sock.on('data', (d) => chunks.push(d));
        sock.on('close', () => { clearTimeout(timer); resolve({ text: Buffer.concat(chunks).toString(), closed: true, ms: Date.now() - t0 }); });
        sock.on('error', () => {});
    });
}
test('413 at once for a declared 100 GB body and for Expect: 100-continue, the connection closed', async () => {
    const heads = [
        'POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nContent-Type: application/json\r\nContent-Length: 99999999999\r\n\r\n{',
        'POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nExpect: 100-continue\r\nContent-Type: application/json\r\nContent-Length: 70000\r\n\r\n'];
    for (const h of heads) {
        const r = await headersOnly(h);
        assert(r.text.startsWith('HTTP/1.1 413 ') && r.text.includes('"code":"request_too_large"'), `reply: ${JSON.stringify(r.text.slice(0, 60))}`);
        assert(r.closed, 'connection closed within 5 s (it waited for --http-timeout, 30 s, with no reply)');
    }
});

test('429 when running + waiting reaches --max-pending-requests, with Retry-After', async () => {
    const long = { model: MODEL, prompt: 'keep the queue busy', max_tokens: 4000, ignore_eos: true, stream: true };
    const started = [];
    const ctrl = [];
    for (let i = 0; i < 6; i++) {
        const ac = new AbortController();
        ctrl.push(ac);
        started.push(fetch(base + '/v1/completions', { method: 'POST', headers: { 'Content-Type': 'application/json', ...AUTH },
            body: JSON.stringify(long), signal: ac.signal }).then((r) => r.status).catch(() => 'aborted'));
    }
    // wait (by the clock, not a try count: a busy CI host is slow) until the server counts all six,
    // then one more request must be refused
    const pending = async () => {
        const m = (await get(base, '/metrics')).text;
        const num = (name) => Number((m.match(new RegExp(`^dsflash_${name}(?:\\{[^}]*\\})? (\\d+)`, 'm')) || [])[1] || 0);
        return num('num_requests_running') + num('num_requests_waiting');
    };
    for (const deadline = Date.now() + 60000; Date.now() < deadline && (await pending()) < 6;) await sleep(50);
    let r;
    for (const deadline = Date.now() + 60000; Date.now() < deadline;) {
        r = await post(base, '/v1/completions', { model: MODEL, prompt: 'one more', max_tokens: 1 }, AUTH);
        if (r.status === 429) break;
        await sleep(50);
    }
    expectError(r, 429, 'rate_limit_error', 'too_many_requests');
    assertEq(r.headers.get('retry-after'), '1', 'Retry-After');
    for (const ac of ctrl) ac.abort();
    await Promise.all(started);
});

test('SSE framing of a completion stream with include_usage', async () => {
    let r;
    for (let t = 0; t < 100; t++) { // wait for the aborted streams of the previous case to drain
        r = await post(base, '/v1/completions', { model: MODEL, prompt: 'abc', max_tokens: 5, temperature: 0, ignore_eos: true,
                                                 stream: true, stream_options: { include_usage: true } }, AUTH);
        if (r.status !== 429) break;
        await sleep(100);
    }
    assertEq(r.status, 200, 'status');
    assertEq(r.headers.get('content-type'), 'text/event-stream', 'content type');
    assertEq(r.headers.get('cache-control'), 'no-cache', 'cache control');
    const ev = parseSSE(r.text);
    const last = ev[ev.length - 1];
    assert(Array.isArray(last.choices) && last.choices.length === 0 && last.usage.completion_tokens === 5, 'usage chunk last');
    for (const e of ev.slice(0, -1)) assert(e.usage === null && e.object === 'text_completion', 'usage: null on choice chunks');
    assertEq(ev[ev.length - 2].choices[0].finish_reason, 'length', 'finish on the last choice chunk');
});

run();
