// Soak test: mixed load on a live `dsflash serve` (tiny model, 127.0.0.1 only) for SOAK_SECONDS,
// then the figures that show whether the server survives its users over time:
//   RSS growth after warm-up, KV pages back to idle (/metrics: no block held by a request; the
//   prefix cache's evictable blocks are counted apart), nothing running or waiting, request counters that agree with what the
//   clients saw, and a SIGTERM drain with in-flight streams (exit code, time, how streams ended).
//
// Why it is built this way: node built-ins only (node:http gives control over the socket, so a
// client can vanish mid-stream or mid-body); every loop is bounded by the deadline and every
// request by a timeout; the server is spawned here so its pid, RSS and exit code are ours to read.
// Usage: node soak.mjs DSFLASH_BIN MODEL_CACHE SECONDS LOGFILE.  Prints the figures, then
// "N passed, N failed" over the checks; exit 1 if any failed.
import http from 'node:http';
import net from 'node:net';
import fs from 'node:fs';
import { spawn } from 'node:child_process';

const [BIN, CACHE, SECS_S, LOG] = process.argv.slice(2);
const SECS = Number(SECS_S);
const MODEL = 'deepseek-v41';
const WORKERS = 8, MAX_BODY = 256 * 1024, REQ_TIMEOUT_MS = 120000;
let seed = 20261201;
const rnd = () => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed / 2147483648; };
const pick = (n) => Math.floor(rnd() * n);

function freePort() {
    return new Promise((res) => { const s = net.createServer(); s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => res(p)); }); });
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// one raw request; abortAfter: {bytes} of response body or {ms} after sending; resolves with what the client saw
function request(port, method, path, body, { abortAfterBytes = -1, abortAfterMs = -1 } = {}) {
    return new Promise((resolve) => {
        const data = body === undefined ? undefined : (typeof body === 'string' ? body : JSON.stringify(body));
        let done = false, got = '';
        const finish = (r) => { if (!done) { done = true; clearTimeout(timer); resolve(r); } };
        const req = http.request({ host: '127.0.0.1', port, method, path, agent: false,
            headers: data === undefined ? {} : { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(data) } }, (res) => {
            res.setEncoding('utf8');
            res.on('data', (c) => {
                got += c;
                if (abortAfterBytes >= 0 && got.length > abortAfterBytes) { req.destroy(); finish({ status: res.statusCode, body: got, aborted: true }); }
            });
            res.on('end', () => finish({ status: res.statusCode, body: got, aborted: false }));
            res.on('error', () => finish({ status: res.statusCode, body: got, aborted: true, error: 'response error' }));
        });
        req.on('error', (e) => finish({ status: 0, body: got, aborted: true, error: String(e.code || e) }));
        const timer = setTimeout(() => { req.destroy(); finish({ status: 0, body: got, aborted: true, error: 'timeout' }); }, REQ_TIMEOUT_MS);
        if (abortAfterMs >= 0) setTimeout(() => { if (!done) { req.destroy(); finish({ status: 0, body: got, aborted: true, error: 'client abort' }); } }, abortAfterMs);
        if (data !== undefined) req.write(data);
        req.end();
    });
}

// prompts: four shared heads of 150..600 words, so repeated and prefix-sharing prompts are common
const WORDS = 'the of and to in is was that for on as with by at from his her an which or be are this had not but what all were when we there can more one'.split(' ');
const HEADS = [150, 300, 450, 600].map((n, h) => Array.from({ length: n }, (_, i) => WORDS[(i * 7 + h * 13) % WORDS.length]).join(' '));
const prompt = () => HEADS[pick(4)] + (rnd() < 0.3 ? '' : ' ' + Array.from({ length: 1 + pick(40) }, () => WORDS[pick(WORDS.length)]).join(' '));

const seen = { ok: 0, stream_ok: 0, disconnect: 0, early_abort: 0, bad_4xx: 0, oversize_413: 0, tokenize_ok: 0, unexpected: [] };
let generationAccepted = 0;   // generation requests the server was given in full and valid (ran or cancelled)
const note = (what) => { if (seen.unexpected.length < 20) seen.unexpected.push(what); };

const MALFORMED = [
    '{"model":"deepseek-v41","prompt":', '[1,2,3]', '{"model":"deepseek-v41","prompt":"x","max_tokens":-1}',
    '{"model":"deepseek-v41","messages":"hello"}', '{"model":"nope","prompt":"x"}', '{"model":"deepseek-v41","prompt":"x","temperature":"hot"}',
    '{"model":"deepseek-v41","prompt":[999999]}', '\u0000\u0001', '{"model":"deepseek-v41","prompt":"x","logprobs":99}',
];

async function one(port) {
    const k = rnd();
    if (k < 0.30) {            // non-streaming completion, prefix-sharing prompt
        generationAccepted++;
        const r = await request(port, 'POST', '/v1/completions', { model: MODEL, prompt: prompt(), max_tokens: 1 + pick(24), temperature: rnd() < 0.5 ? 0 : 0.8 });
        if (r.status === 200 && JSON.parse(r.body).choices?.[0]?.finish_reason) seen.ok++; else note(`completion ${r.status} ${r.error || ''} ${r.body.slice(0, 120)}`);
    } else if (k < 0.55) {     // streaming chat read to the end
        generationAccepted++;
        const r = await request(port, 'POST', '/v1/chat/completions', { model: MODEL, stream: true, max_tokens: 1 + pick(32),
            messages: [{ role: 'user', content: prompt() }] });
        if (r.status === 200 && r.body.includes('"finish_reason":"') && r.body.trimEnd().endsWith('data: [DONE]')) seen.stream_ok++;
        else note(`stream ${r.status} ${r.error || ''} ${r.body.slice(-120)}`);
    } else if (k < 0.70) {     // streaming, the client vanishes after a few events
        generationAccepted++;
        await request(port, 'POST', '/v1/completions', { model: MODEL, stream: true, prompt: prompt(), max_tokens: 64 }, { abortAfterBytes: pick(600) });
        seen.disconnect++;
    } else if (k < 0.78) {     // non-streaming, the client vanishes before the answer
        generationAccepted++;
        const r = await request(port, 'POST', '/v1/chat/completions', { model: MODEL, max_tokens: 48, messages: [{ role: 'user', content: prompt() }] },
            { abortAfterMs: pick(40) });
        seen.disconnect++;
        if (r.status === 0) seen.early_abort++;   // gone before any answer: maybe before the body was sent in full
    } else if (k < 0.90) {     // malformed
        const r = await request(port, 'POST', rnd() < 0.5 ? '/v1/completions' : '/v1/chat/completions', MALFORMED[pick(MALFORMED.length)]);
        let errOk = false;
        try { errOk = typeof JSON.parse(r.body).error.message === 'string'; } catch { /* not JSON */ }
        if (r.status >= 400 && r.status < 500 && errOk) seen.bad_4xx++; else note(`malformed ${r.status} ${r.body.slice(0, 120)}`);
    } else if (k < 0.95) {     // oversize body
        const r = await request(port, 'POST', '/v1/completions', JSON.stringify({ model: MODEL, prompt: 'x'.repeat(MAX_BODY + pick(4096)) }));
        if (r.status === 413) seen.oversize_413++; else note(`oversize ${r.status} ${r.error || ''}`);
    } else {                   // tokenize / detokenize round trip
        const text = prompt().slice(0, 200);
        const t = await request(port, 'POST', '/tokenize', { model: MODEL, prompt: text, add_special_tokens: false });
        let ok = false;
        if (t.status === 200) {
            const d = await request(port, 'POST', '/detokenize', { model: MODEL, tokens: JSON.parse(t.body).tokens });
            ok = d.status === 200 && JSON.parse(d.body).prompt === text;
        }
        if (ok) seen.tokenize_ok++; else note(`tokenize ${t.status} ${t.body.slice(0, 120)}`);
    }
}

function statusMiB(pid, field) {
    const m = new RegExp(`${field}:\\s+(\\d+) kB`).exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) / 1024 : NaN;
}
const rssMiB = (pid) => statusMiB(pid, 'VmRSS');
// Anonymous memory is what a leak grows; file-backed RSS is the model's mapped pages, which the kernel
// may page in or drop at will, so both are reported and the check reads the anonymous part.
const anonMiB = (pid) => statusMiB(pid, 'RssAnon');
function metrics(text) {   // name{labels} value -> map
    const out = new Map();
    for (const l of text.split('\n')) {
        if (!l || l[0] === '#') continue;
        const i = l.lastIndexOf(' ');
        out.set(l.slice(0, i), Number(l.slice(i + 1)));
    }
    return out;
}
const sumOf = (m, prefix) => [...m].filter(([k]) => k.startsWith(prefix)).reduce((a, [, v]) => a + v, 0);

async function main() {
    const port = await freePort();
    const log = fs.openSync(LOG, 'w');
    const srv = spawn(BIN, ['serve', '--model-cache', CACHE, '--host', '127.0.0.1', '--port', String(port), '--self-check', 'quick',
        '--kv-cache-memory', '64MiB', '--max-request-body', String(MAX_BODY), '--max-num-seqs', '16'], { stdio: ['ignore', log, log] });
    let exitCode = null, exitSignal = null, exitedAt = 0;
    const exited = new Promise((r) => srv.on('exit', (c, s) => { exitCode = c; exitSignal = s; exitedAt = Date.now(); r(); }));
    for (let i = 0; ; i++) {   // READY within 300 s
        if (exitedAt) throw new Error(`server exited during start-up (see ${LOG})`);
        if (fs.readFileSync(LOG, 'utf8').includes('\nREADY ')) break;
        if (i > 3000) { srv.kill('SIGKILL'); throw new Error('server not READY after 300 s'); }
        await sleep(100);
    }
    const t0 = Date.now(), end = t0 + SECS * 1000, warm = t0 + SECS * 200;   // warm-up: the first 20 %
    const rssStart = rssMiB(srv.pid), anonStart = anonMiB(srv.pid);
    let rssWarm = NaN, anonWarm = NaN, rssMax = rssStart, requests = 0, ticks = 0;
    const sampler = setInterval(() => {
        const r = rssMiB(srv.pid), a = anonMiB(srv.pid);
        rssMax = Math.max(rssMax, r);
        if (Number.isNaN(rssWarm) && Date.now() >= warm) { rssWarm = r; anonWarm = a; }
        if (++ticks % 30 === 0) console.error(`soak t=${((Date.now() - t0) / 1000).toFixed(0)} s rss=${r.toFixed(1)} MiB anon=${a.toFixed(1)} MiB requests=${requests}`);
    }, 1000);
    await Promise.all(Array.from({ length: WORKERS }, async () => { while (Date.now() < end) { await one(port); requests++; } }));
    clearInterval(sampler);
    // idle: nothing running or waiting, then read the counters
    let m = new Map(), idleMs = 0;
    for (const tIdle = Date.now(); Date.now() - tIdle < 60000; await sleep(250)) {
        m = metrics((await request(port, 'GET', '/metrics')).body);
        idleMs = Date.now() - tIdle;
        if (m.get('dsflash_num_requests_running') === 0 && m.get('dsflash_num_requests_waiting') === 0 &&
            m.get('dsflash_kv_cache_blocks_used') === 0) break;
    }
    const rssEnd = rssMiB(srv.pid), anonEnd = anonMiB(srv.pid);
    const success = sumOf(m, 'dsflash_request_success_total'), cancelled = m.get('dsflash_requests_cancelled_total') ?? NaN;
    const genHttp = (re) => sumOf(new Map([...m].filter(([k]) => /^dsflash_http_requests_total\{endpoint="\/v1\/(chat\/)?completions"/.test(k) && re.test(k))), '');
    const submitted = genHttp(/code="(200|5\d\d)"/);   // each request handed to the engine is counted once, 200 or 5xx
    const http4xx = sumOf(new Map([...m].filter(([k]) => /^dsflash_http_requests_total\{endpoint="\/v1\/(chat\/)?completions",code="4/.test(k))), '');
    const http413 = sumOf(new Map([...m].filter(([k]) => /code="413"/.test(k))), '');

    // SIGTERM with streams in flight
    const inflight = Array.from({ length: 4 }, () => request(port, 'POST', '/v1/completions', { model: MODEL, stream: true, prompt: prompt(), max_tokens: 2000, ignore_eos: true }));
    await sleep(1500);
    const tTerm = Date.now();
    srv.kill('SIGTERM');
    const killTimer = setTimeout(() => srv.kill('SIGKILL'), 120000);
    await exited;
    clearTimeout(killTimer);
    const drainS = (exitedAt - tTerm) / 1000;
    const streams = await Promise.all(inflight);
    const cleanEnds = streams.filter((r) => r.body.trimEnd().endsWith('data: [DONE]') && /"finish_reason":"[a-z_]+"/.test(r.body)).length;

    const figures = {
        seconds: SECS, requests, client_view: { ...seen, unexpected: seen.unexpected.length },
        rss_mib: { start: +rssStart.toFixed(1), after_warmup: +rssWarm.toFixed(1), max: +rssMax.toFixed(1), end: +rssEnd.toFixed(1),
            growth_after_warmup: +(rssEnd - rssWarm).toFixed(1),
            anon: { start: +anonStart.toFixed(1), after_warmup: +anonWarm.toFixed(1), end: +anonEnd.toFixed(1),
                growth_after_warmup: +(anonEnd - anonWarm).toFixed(1) } },
        kv_idle: { blocks_total: m.get('dsflash_kv_cache_blocks_total'), used: m.get('dsflash_kv_cache_blocks_used'),
            evictable_prefix_cache: m.get('dsflash_kv_cache_blocks_evictable'), running: m.get('dsflash_num_requests_running'),
            waiting: m.get('dsflash_num_requests_waiting'), seconds_to_idle: idleMs / 1000 },
        counters: { generation_requests_sent_valid: generationAccepted, server_submitted: submitted, server_success: success, server_cancelled: cancelled,
            client_completed: seen.ok + seen.stream_ok, client_4xx_malformed: seen.bad_4xx, server_generation_4xx: http4xx,
            client_413: seen.oversize_413, server_413: http413,
            prefix_cache_hits: m.get('dsflash_prefix_cache_hits_total'), prefix_cache_queries: m.get('dsflash_prefix_cache_queries_total') },
        sigterm: { exit_code: exitCode, signal: exitSignal, drain_seconds: drainS, inflight_streams: streams.length, streams_ended_cleanly: cleanEnds },
    };
    console.log(JSON.stringify(figures, null, 2));
    for (const u of seen.unexpected) console.log(`  unexpected: ${u}`);

    let pass = 0, fail = 0;
    const check = (ok, what) => { console.log(`${ok ? 'ok' : 'not ok'} ${what}`); ok ? pass++ : fail++; };
    check(seen.unexpected.length === 0, 'every response was what its request called for (no unexpected status, body or timeout)');
    check(rssEnd - rssWarm <= 32, `RSS growth after warm-up ${(rssEnd - rssWarm).toFixed(1)} MiB <= 32 MiB`);
    check(m.get('dsflash_num_requests_running') === 0 && m.get('dsflash_num_requests_waiting') === 0, 'idle: no request running or waiting');
    check(m.get('dsflash_kv_cache_blocks_used') === 0, `no leaked KV pages: ${m.get('dsflash_kv_cache_blocks_used')} blocks held at idle (the ${m.get('dsflash_kv_cache_blocks_evictable')} prefix-cache blocks are evictable, counted apart)`);
    check(success + cancelled === submitted, `every submitted request ended: success ${success} + cancelled ${cancelled} = submitted ${submitted} (HTTP 200/5xx on the generation endpoints)`);
    check(generationAccepted - submitted >= 0 && generationAccepted - submitted <= seen.early_abort,
        `valid generation requests sent ${generationAccepted} - submitted ${submitted} = ${generationAccepted - submitted}, at most the ${seen.early_abort} clients that left before any answer`);
    check(success >= seen.ok + seen.stream_ok, `server success ${success} >= requests the clients saw complete ${seen.ok + seen.stream_ok}`);
    check(http4xx === seen.bad_4xx + seen.oversize_413, `server 4xx on generation endpoints ${http4xx} = client 4xx ${seen.bad_4xx} + 413 ${seen.oversize_413}`);
    check(exitCode === 0 && drainS <= 60, `SIGTERM: exit code ${exitCode}${exitSignal ? ' signal ' + exitSignal : ''} after ${drainS.toFixed(1)} s (want 0 within 60 s)`);
    check(cleanEnds === streams.length, `SIGTERM: ${cleanEnds}/${streams.length} in-flight streams ended with a finish_reason and [DONE]`);
    console.log(`${pass} passed, ${fail} failed`);
    process.exit(fail ? 1 : 0);
}
main().catch((e) => { console.log(`not ok soak could not run: ${e.message}`); console.log('0 passed, 1 failed'); process.exit(1); });
