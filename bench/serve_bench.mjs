// Concurrency sweep against a running `dsflash serve` (a small stand-in until `dsflash bench`
// exists; metric definitions follow TOOLS.md §4.3).  Each level c sends `reps` batches of c
// concurrent streaming completions with token-id prompts of exactly --prompt-tokens (the first
// tokens are unique per request, so no two requests share a prefix-cache block), greedy,
// ignore_eos, and reports per-stream tok/s (median of (n_out-1)/(t_last-t_first)), aggregate tok/s
// (sum n_out / decode window of the batch), TTFT (median) and the step-time proxy.
// usage: node bench/serve_bench.mjs BASE_URL [--concurrency 1,2,4,8,16,32] [--prompt-tokens 256]
//        [--output-tokens 64] [--reps 2] [--json-out FILE]
import fs from 'node:fs';
import http from 'node:http';

const argv = process.argv.slice(2);
const base = argv[0];
const opt = (name, def) => { const i = argv.indexOf(name); return i > 0 ? argv[i + 1] : def; };
const levels = opt('--concurrency', '1,2,4,8,16,32').split(',').map(Number);
const P = Number(opt('--prompt-tokens', '256')), O = Number(opt('--output-tokens', '64')), reps = Number(opt('--reps', '2'));
const jsonOut = opt('--json-out', null);
const median = (a) => { const s = [...a].sort((x, y) => x - y); const n = s.length; return n ? (n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2) : 0; };

function prompt(rid) {
    const ids = [0];
    for (let k = 0; ids.length < P; k++) ids.push(3 + ((rid * 7919 + k * 131 + (k < 8 ? rid * 17 : 0)) % 240));
    return ids;
}

function one(rid) {
    return new Promise((resolve, reject) => {
        const u = new URL(base + '/v1/completions');
        const body = JSON.stringify({ model: 'deepseek-v41', prompt: prompt(rid), max_tokens: O, temperature: 0, ignore_eos: true,
                                      stream: true, stream_options: { include_usage: true } });
        const t0 = performance.now();
        let tFirst = 0, tLast = 0, nOut = 0, buf = '';
        const req = http.request({ host: u.hostname, port: u.port, path: u.pathname, method: 'POST',
                                   headers: { 'Content-Type': 'application/json' } }, (res) => {
            res.setEncoding('utf8');
            res.on('data', (d) => {
                buf += d;
                let i;
                while ((i = buf.indexOf('\n\n')) >= 0) {
                    const ev = buf.slice(6, i);
                    buf = buf.slice(i + 2);
                    if (ev === '[DONE]') continue;
                    const j = JSON.parse(ev);
                    if (j.choices.length === 0) { nOut = j.usage.completion_tokens; continue; }
                    const now = performance.now();
                    if (!tFirst) tFirst = now;
                    tLast = now;
                }
            });
            res.on('end', () => resolve({ t0, tFirst, tLast, nOut, status: res.statusCode }));
        });
        req.on('error', reject);
        req.end(body);
    });
}

const rows = [];
let rid = 0;
const health = await (await fetch(base + '/server_info')).json().catch(() => ({}));
for (const c of levels) {
    const per = [], agg = [], ttft = [];
    for (let r = 0; r < reps; r++) {
        const res = await Promise.all(Array.from({ length: c }, () => one(rid++)));
        if (res.some((x) => x.status !== 200 || x.nOut !== O)) throw new Error(`level ${c}: a request failed`);
        for (const x of res) { per.push((x.nOut - 1) / ((x.tLast - x.tFirst) / 1000)); ttft.push((x.tFirst - x.t0) / 1000); }
        const win = (Math.max(...res.map((x) => x.tLast)) - Math.min(...res.map((x) => x.tFirst))) / 1000;
        agg.push(res.reduce((s, x) => s + x.nOut, 0) / win);
    }
    rows.push({ conc: c, per_stream_med: median(per), total_decode: median(agg), ttft_med: median(ttft), decode_step_ms: 1000 / median(per) });
}
const a1 = rows.find((r) => r.conc === 1)?.total_decode;
console.log(`prompt ${P} tokens, output ${O} tokens, ${reps} batches per level; server ${health.model_dir ?? ''}`);
console.log('conc | per-stream tok/s | step ms | aggregate tok/s | speedup | TTFT s');
for (const r of rows) {
    r.speedup = a1 ? r.total_decode / a1 : null;
    console.log(`${String(r.conc).padStart(4)} | ${r.per_stream_med.toFixed(1).padStart(16)} | ${r.decode_step_ms.toFixed(1).padStart(7)} | ` +
                `${r.total_decode.toFixed(1).padStart(15)} | ${r.speedup ? r.speedup.toFixed(2).padStart(7) : '      -'} | ${r.ttft_med.toFixed(3)}`);
}
if (jsonOut) {
    const tmp = `${jsonOut}.tmp.${process.pid}`;
    fs.writeFileSync(tmp, JSON.stringify({ schema: 'dsflash-serve-bench/1', prompt_tokens: P, output_tokens: O, reps,
                                            server: health, rows }, null, 1));
    fs.renameSync(tmp, jsonOut);
}
