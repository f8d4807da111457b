// llama.cpp beside dsflash (run by bench/llamacpp_bench.sh; see there).
//
// Why this shape: llama.cpp is driven through node-llama-cpp's prebuilt CPU backend, installed
// at bench time outside the repository, on a GGUF that reads as many weight bytes per token as
// the dsflash checkpoint (bench/make_gguf.py).  One generation gives both figures: the time to
// the first yielded token is prompt processing (same prompt length and batch as our chunked
// prefill), the gaps between later tokens are decode steps (greedy, head included).  Decode
// efficiency is judged against the read bandwidth dsflash measured in its own run, so both
// engines are compared with one limit.
//
// usage: node llamacpp_run.mjs --lib DIR --gguf FILE --info FILE.json --ours FILE.json --threads N
//                              [--tokens N]
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { performance } from "node:perf_hooks";

function args() {
    const a = {}, v = process.argv.slice(2);
    for (let i = 0; i < v.length; i += 2) {
        if (!v[i].startsWith("--") || v[i + 1] === undefined) throw new Error(`bad argument '${v[i]}'`);
        a[v[i].slice(2)] = v[i + 1];
    }
    const need = a.unavailable ? ["ours"] : ["lib", "gguf", "info", "ours", "threads"];
    for (const k of need) if (!a[k]) throw new Error(`--${k} is required`);
    return a;
}

function median(xs) {
    const s = [...xs].sort((x, y) => x - y), n = s.length;
    return n % 2 ? s[(n - 1) / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

async function measure(a, ours, info) {
    const lib = await import(pathToFileURL(join(a.lib, "node_modules", "node-llama-cpp", "dist", "index.js")).href);
    const threads = Number(a.threads), tokens = Number(a.tokens || 32);
    const prompt = ours.tiers[0].prefill.prompt_tokens, batch = ours.tiers[0].prefill.chunk;
    const llama = await lib.getLlama({ gpu: false, build: "never", usePrebuiltBinaries: true, skipDownload: true,
                                       logLevel: lib.LlamaLogLevel.error, maxThreads: threads });
    const model = await llama.loadModel({ modelPath: a.gguf, gpuLayers: 0 });
    // dispatch each batch at once (one sequence: nothing to wait for), not on the next event-loop cycle
    const ctx = await model.createContext({ contextSize: prompt + tokens + 64, batchSize: batch, threads, sequences: 1,
                                            batching: { dispatchSchedule: (dispatch) => dispatch() } });
    const seq = ctx.getSequence();
    const ids = Array.from({ length: prompt }, (_, i) => 259 + ((i * 7919 + 17) % (info.vocab - 259)));
    const run = async (p, n) => {   // times of the first n+1 yielded tokens after feeding p
        const t0 = performance.now(), times = [];
        for await (const _ of seq.evaluate(p, { temperature: 0 })) {
            times.push(performance.now());
            if (times.length > n) break;
        }
        return { t0, times };
    };
    await run(ids.slice(0, 16), 2);           // warm-up: pages in the weights, sizes the buffers
    await seq.clearHistory();
    const { t0, times } = await run(ids, tokens);
    const gaps = times.slice(1).map((t, i) => (t - times[i]) / 1e3);
    const ttft = (times[0] - t0) / 1e3;
    const r = { version: "3.22.1", threads, prompt, batch, ttft_s: ttft, pp_tok_s: prompt / ttft,
                decode_steps: gaps.length, decode_tok_s: 1 / median(gaps),
                decode_tok_s_wall: gaps.length / gaps.reduce((x, y) => x + y, 0) };
    await ctx.dispose(); await model.dispose(); await llama.dispose();
    return r;
}

function pct(x, lim, what, probe, warn) {
    const p = 100 * x / lim;
    if (p > 100) warn.push(`WARNING: ${what} reached ${p.toFixed(1)}% of the ${probe}: that probe under-reports this host's limit`);
    return p;
}

function report(ours, info, r, reason) {
    const bw = ours.limits.read_bw_gbs, warn = [];
    const probe = "read-bandwidth probe (ds_bench_read_bw, src/kernels/membench.c)";
    console.log(`\nllama.cpp beside dsflash (same read bandwidth ${bw.toFixed(1)} GB/s, ${ours.threads} threads)`);
    const cols = ["llama.cpp", ...ours.tiers.map(t => `dsflash ${t.numerics}`)];
    console.log(`| metric | ${cols.join(" | ")} |\n|---|${cols.map(() => "---").join("|")}|`);
    const ourDec = ours.tiers.map(t => t.concurrency[0]);
    const ourEff = ourDec.map(c => 100 * c.tok_s * c.bytes_per_step / (bw * 1e9));
    const na = `unavailable (${reason})`;
    const llEff = r ? pct(r.decode_tok_s * info.bytes_per_token, bw * 1e9, "llama.cpp decode", probe, warn) : null;
    const row = (name, ll, vals) => console.log(`| ${name} | ${r ? ll : na} | ${vals.join(" | ")} |`);
    row("weight MB read per token", info ? (info.bytes_per_token / 1e6).toFixed(1) : "",
        ourDec.map(c => (c.bytes_per_step / 1e6).toFixed(1)));
    row("decode tok/s (median token)", r && r.decode_tok_s.toFixed(2), ourDec.map(c => c.tok_s.toFixed(2)));
    row("decode, % of read bandwidth", r && `${llEff.toFixed(1)}%`, ourEff.map(e => `${e.toFixed(1)}%`));
    row(`prompt processing tok/s (${ours.tiers[0].prefill.prompt_tokens} tokens, batch ${ours.tiers[0].prefill.chunk})`,
        r && r.pp_tok_s.toFixed(1), ours.tiers.map(t => t.prefill.tok_s.toFixed(1)));
    row("TTFT s", r && r.ttft_s.toFixed(2), ours.tiers.map(t => t.prefill.ttft_s.toFixed(2)));
    if (r) {
        row("dsflash / llama.cpp: decode efficiency", "1.00x", ourEff.map(e => `${(e / llEff).toFixed(2)}x`));
        row("dsflash / llama.cpp: prompt processing", "1.00x", ours.tiers.map(t => `${(t.prefill.tok_s / r.pp_tok_s).toFixed(2)}x`));
        console.log(`(llama.cpp: node-llama-cpp ${r.version} prebuilt CPU backend, GGUF ${info.formats}, FFN ${info.ffn};` +
                    ` decode median of ${r.decode_steps} tokens, wall ${r.decode_tok_s_wall.toFixed(2)} tok/s)`);
    }
    for (const w of warn) console.log(w);
}

const a = args();
const ours = JSON.parse(readFileSync(a.ours, "utf8"));
let info = null, r = null, reason = a.unavailable || "";
try {
    info = JSON.parse(readFileSync(a.info, "utf8"));
    if (!reason) r = await measure(a, ours, info);
} catch (e) {
    reason = reason || `llama.cpp run failed: ${String(e.message || e).split("\n")[0]}`;
}
if (!r) console.log(`llama.cpp: UNAVAILABLE: ${reason}`);
report(ours, info, r, reason);
process.exitCode = r ? 0 : 1;
