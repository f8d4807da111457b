// A stream that waits behind another request longer than --http-timeout (the server runs with
// --http-timeout 1 --max-num-seqs 1) must stay open: the server sends SSE comment lines while no
// token is ready, and the stream ends with its tokens and [DONE].  Without the keep-alive,
// libmicrohttpd closes the silent connection and the client sees a cut stream.
import { test, assert, assertEq, run, post, parseSSE } from './harness.mjs';

const [base] = process.argv.slice(2);
const MODEL = 'deepseek-v41';

test('a queued stream gets keep-alive comments and completes', async () => {
    const hold = post(base, '/v1/completions', { model: MODEL, prompt: 'hold the only slot', max_tokens: 3000,
                                                 ignore_eos: true, temperature: 0 });
    await new Promise((r) => setTimeout(r, 200));
    const t0 = Date.now();
    const r = await post(base, '/v1/completions', { model: MODEL, prompt: 'wait my turn', max_tokens: 5, ignore_eos: true,
                                                   temperature: 0, stream: true, stream_options: { include_usage: true } });
    const waited = (Date.now() - t0) / 1000;
    assertEq(r.status, 200, 'status');
    const first = (await hold);
    assertEq(first.status, 200, 'the request holding the slot');
    assert(waited > 1.5, `the stream did not wait behind the other request (${waited} s): the test proves nothing`);
    assert(r.text.includes(': keep-alive\n\n'), 'keep-alive comments were sent while the stream waited');
    const ev = parseSSE(r.text);
    assertEq(ev[ev.length - 1].usage.completion_tokens, 5, 'all five tokens arrived');
    console.log(`  waited ${waited.toFixed(1)} s behind a 3000-token request; ${r.text.split(': keep-alive').length - 1} keep-alive comments`);
});

run();
