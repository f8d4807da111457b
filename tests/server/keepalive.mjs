// A stream that waits behind another request longer than --http-timeout (the server runs with
// --http-timeout 1 --max-num-seqs 1) must stay open: the server sends SSE comment lines while no
// token is ready, and the stream ends with its tokens and [DONE].  Without the keep-alive,
// libmicrohttpd closes the silent connection and the client sees a cut stream.
// The request holding the slot streams with a length no machine finishes in seconds, and the test
// drops it after HOLD_MS: the wait is set by the test, not by how fast the host decodes.
import http from 'node:http';
import { test, assert, assertEq, run, post, get, parseSSE, sleep } from './harness.mjs';

// A streaming POST the caller can drop: { req, done } where done resolves with the text received.
function openStream(base, path, body) {
    let req;
    const done = new Promise((resolve) => {
        const u = new URL(base + path);
        req = http.request({ host: u.hostname, port: u.port, path: u.pathname, method: 'POST',
                             headers: { 'Content-Type': 'application/json' } }, (res) => {
            let got = '';
            res.setEncoding('utf8');
            res.on('data', (d) => { got += d; });
            res.on('end', () => resolve({ text: got }));
            res.on('error', () => resolve({ text: got }));
            res.on('close', () => resolve({ text: got }));
        });
        req.on('error', () => resolve({ text: '' }));
        req.end(JSON.stringify(body));
    });
    return { req, done };
}

const [base] = process.argv.slice(2);
const MODEL = 'deepseek-v41';

test('a queued stream gets keep-alive comments and completes', async () => {
    const HOLD_MS = 2500;
    const models = (await get(base, '/v1/models')).json;
    const maxTokens = Math.min(models.data[0].max_model_len - 16, 100000);
    // Several holds queue in order (the server runs one sequence at a time): at ~2,000 tokens/s the
    // tiny model decodes one 4,080-token hold in ~2 s, so six cover the HOLD_MS on any host we know.
    const holds = [];
    for (let i = 0; i < 6; i++) {
        holds.push(openStream(base, '/v1/completions', { model: MODEL, prompt: `hold the only slot ${i}`,
                                                          max_tokens: maxTokens, ignore_eos: true, temperature: 0, stream: true }));
        await sleep(30);
    }
    await sleep(200);
    const t0 = Date.now();
    const queued = post(base, '/v1/completions', { model: MODEL, prompt: 'wait my turn', max_tokens: 5, ignore_eos: true,
                                                   temperature: 0, stream: true, stream_options: { include_usage: true } });
    await sleep(HOLD_MS);
    for (const h of holds) h.req.destroy();     // free the slot: the server cancels dropped requests
    const holdTexts = await Promise.all(holds.map((h) => h.done));
    const r = await queued;
    const waited = (Date.now() - t0) / 1000;
    assertEq(r.status, 200, 'status');
    const finished = holdTexts.filter((h) => h.text.includes('data: [DONE]')).length;
    assert(finished < holds.length, `all ${holds.length} holds of ${maxTokens} tokens finished within ${HOLD_MS} ms: the test proves nothing`);
    assert(waited > 1.5, `the stream did not wait behind the other request (${waited} s): the test proves nothing`);
    assert(r.text.includes(': keep-alive\n\n'), 'keep-alive comments were sent while the stream waited');
    const ev = parseSSE(r.text);
    assertEq(ev[ev.length - 1].usage.completion_tokens, 5, 'all five tokens arrived');
    console.log(`  waited ${waited.toFixed(1)} s behind ${holds.length} queued ${maxTokens}-token requests (${finished} finished, the rest dropped); ${r.text.split(': keep-alive').length - 1} keep-alive comments`);
});

run();
