// Load behaviour against a live server (--max-num-batched-tokens 256): 64 streams with half the
// clients dropped (some during prefill) — the others finish exactly as alone, and KV usage
// returns to idle — and the admission gate: a long prefill beside 8 running decodes never makes
// a decode wait more than one chunk, and the invariant counter stays 0.
import { test, assert, assertEq, run, post, metrics, parseSSE, streamRaw, sleep } from './harness.mjs';

const [base] = process.argv.slice(2);
const MODEL = 'deepseek-v41';
const prompt = (i) => `[req-${String(i).padStart(5, '0')}] The river ran past the old mill and on to the sea, ${i}`;

async function waitIdle(timeoutMs) {
    const t0 = Date.now();
    for (;;) {
        const m = await metrics(base);
        if (m.dsflash_num_requests_running === 0 && m.dsflash_num_requests_waiting === 0 && m.dsflash_kv_cache_blocks_used === 0)
            return { m, ms: Date.now() - t0 };
        if (Date.now() - t0 > timeoutMs) return { m, ms: Date.now() - t0 };
        await sleep(20);
    }
}

test('64 streams, half dropped mid-stream: others exact, KV back to idle', async () => {
    const before = await metrics(base);
    const jobs = [];
    for (let i = 0; i < 64; i++) {
        const keep = i % 2 === 0;
        const body = { model: MODEL, prompt: prompt(i), temperature: 0, stream: true,
                       max_tokens: keep ? 40 : 2000, ignore_eos: !keep };
        jobs.push(streamRaw(base, '/v1/completions', body, keep ? -1 : (i % 4 === 1 ? 0 : 400)));
    }
    const res = await Promise.all(jobs);
    const tDone = Date.now();
    const idle = await waitIdle(5000);
    assert(idle.m.dsflash_kv_cache_blocks_used === 0 && idle.m.dsflash_num_requests_running === 0,
           `KV not idle: ${JSON.stringify(idle.m.dsflash_kv_cache_blocks_used)} blocks used`);
    assert(Date.now() - tDone <= 1500, `KV idle only after ${Date.now() - tDone} ms`);
    const cancelled = idle.m.dsflash_requests_cancelled_total - (before.dsflash_requests_cancelled_total || 0);
    assert(cancelled >= 16, `cancelled ${cancelled}`);  // the 16 dropped after 400 bytes at least
    for (let i = 0; i < 64; i += 2) {
        assert(!res[i].dropped && res[i].status === 200, `stream ${i} failed`);
        const ev = parseSSE(res[i].text);
        const text = ev.map((e) => e.choices[0]?.text ?? '').join('');
        const alone = await post(base, '/v1/completions', { model: MODEL, prompt: prompt(i), temperature: 0, max_tokens: 40 });
        assertEq(text, alone.json.choices[0].text, `stream ${i} equals its serial run`);
    }
});

test('admission gate: long prefill beside 8 decodes waits at most one chunk per decode step', async () => {
    const before = await metrics(base);
    const decoders = [];
    let started = 0;
    for (let i = 0; i < 8; i++)
        decoders.push(streamRaw(base, '/v1/completions', { model: MODEL, prompt: prompt(100 + i), max_tokens: 600,
                                ignore_eos: true, temperature: 0, stream: true }));
    for (let t = 0; t < 600 && started < 8; t++) {
        await sleep(50);
        const m = await metrics(base);
        started = m.dsflash_num_requests_running;
        if (m.dsflash_generation_tokens_total - (before.dsflash_generation_tokens_total || 0) < 8 * 4) started = 0;
    }
    const longPrompt = Array.from({ length: 2300 }, (_, i) => 3 + ((i * 7919) % 300));
    const r = await post(base, '/v1/completions', { model: MODEL, prompt: longPrompt, max_tokens: 4, temperature: 0 });
    assertEq(r.status, 200, 'long request');
    const m = await metrics(base);
    const prefillSteps = m.dsflash_admission_gate_prefill_steps_total - before.dsflash_admission_gate_prefill_steps_total;
    assert(prefillSteps >= 9, `the 2300-token prompt took ${prefillSteps} prefill steps (256-token chunks)`);
    assertEq(m.dsflash_admission_gate_invariant_violations_total, 0, 'invariant violations');
    assertEq(m.dsflash_admission_gate_max_decode_stall_chunks, 1, 'prefill chunks between two decode steps (max)');
    const done = await Promise.all(decoders);
    for (const d of done) assertEq(d.status, 200, 'decoder');
});

run();
