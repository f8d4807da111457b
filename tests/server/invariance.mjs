// Invariance (SERVING.md §15): greedy tokens and logprobs must not depend on chunk size, prefix
// caching or concurrency.  `collect` sends a fixed prompt set at a given client concurrency and
// writes what came back; `compare` checks two collections for exact equality, one case per
// configuration.  Prompts are token ids (no tokenizer in the loop), with shared heads so the
// prefix cache has something to hit, and lengths covering every residue mod 2 and several mod bs.
import fs from 'node:fs';
import { test, assert, run, post } from './harness.mjs';

const [cmd, ...args] = process.argv.slice(2);
const N = Number(process.env.INV_PROMPTS || 32);

function prompts() {
    const out = [];
    for (let i = 0; i < N; i++) {
        const head = Array.from({ length: 130 }, (_, k) => 3 + ((k * 31 + (i % 4) * 7) % 250));
        const len = 37 + ((i * 53) % 170);
        const tail = Array.from({ length: len }, (_, k) => 3 + ((k * 17 + i * 101) % 250));
        out.push(i % 2 ? head.concat(tail) : tail);
    }
    return out;
}

async function collect(base, conc, file) {
    const ps = prompts();
    const res = new Array(ps.length);
    let next = 0;
    async function worker() {
        for (;;) {
            const i = next++;
            if (i >= ps.length) return;
            const body = { model: 'deepseek-v41', prompt: ps[i], max_tokens: 10, temperature: 0, ignore_eos: true, logprobs: 1 };
            if (i % 4 === 0) body.prompt_logprobs = 1;
            const r = await post(base, '/v1/completions', body);
            if (r.status !== 200) throw new Error(`prompt ${i}: HTTP ${r.status} ${r.text.slice(0, 200)}`);
            const c = r.json.choices[0];
            res[i] = { text: c.text, tokens: c.logprobs.tokens, lps: c.logprobs.token_logprobs,
                       plp: c.prompt_logprobs ?? null, cached: r.json.usage.prompt_tokens_details.cached_tokens };
        }
    }
    await Promise.all(Array.from({ length: conc }, worker));
    fs.writeFileSync(file, JSON.stringify(res));
}

if (cmd === 'collect') {
    collect(args[0], Number(args[1]), args[2]).then(() => process.exit(0), (e) => { console.error(e); process.exit(1); });
} else {
    const [baseFile, ...others] = args;
    const base = JSON.parse(fs.readFileSync(baseFile));
    for (const f of others) {
        test(`identical greedy tokens and logprobs: ${f.replace(/.*\//, '').replace('.json', '')}`, () => {
            const got = JSON.parse(fs.readFileSync(f));
            assert(got.length === base.length, 'count');
            for (let i = 0; i < base.length; i++) {
                const a = base[i], b = got[i];
                assert(JSON.stringify(a.tokens) === JSON.stringify(b.tokens), `prompt ${i}: tokens differ`);
                assert(JSON.stringify(a.lps) === JSON.stringify(b.lps), `prompt ${i}: logprobs differ ${JSON.stringify(a.lps)} vs ${JSON.stringify(b.lps)}`);
                assert(JSON.stringify(a.plp) === JSON.stringify(b.plp), `prompt ${i}: prompt logprobs differ`);
                assert(a.text === b.text, `prompt ${i}: text differs`);
            }
        });
    }
    if (others.some((f) => f.includes('prefix-on'))) {
        test('the prefix cache was actually hit', () => {
            const hits = others.filter((f) => f.includes('prefix-on')).map((f) => JSON.parse(fs.readFileSync(f)))
                .flat().reduce((s, r) => s + r.cached, 0);
            assert(hits > 0, 'no cached tokens reported');
        });
    }
    run();
}
