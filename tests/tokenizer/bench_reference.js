// Encode throughput of the reference (HF tokenizers, npm tokenizers@0.23.2) on a corpus given as a
// JSONL file of documents, used by bench/tokenizer_bench.sh beside dsflash's own figure.
// Usage: node bench_reference.js TOKENIZER_JSON DOCS_JSONL
// Prints: "reference sequential: B bytes in S s = X MB/s" and the same for encodeBatch (all cores).
'use strict';
const fs = require('fs');
const { Tokenizer } = require('tokenizers');
(async () => {
  const tok = Tokenizer.fromFile(process.argv[2]);
  const docs = fs.readFileSync(process.argv[3], 'utf8').split('\n').filter((l) => l.length).map((l) => JSON.parse(l));
  const bytes = docs.reduce((a, d) => a + Buffer.byteLength(d), 0);
  let t0 = process.hrtime.bigint(), tokens = 0;
  for (const d of docs) tokens += (await tok.encode(d, null, { addSpecialTokens: false })).getIds().length;
  let dt = Number(process.hrtime.bigint() - t0) / 1e9;
  console.log(`reference sequential: ${bytes} bytes -> ${tokens} tokens in ${dt.toFixed(3)} s = ${(bytes / dt / 1e6).toFixed(2)} MB/s`);
  t0 = process.hrtime.bigint();
  const all = await tok.encodeBatch(docs, { addSpecialTokens: false });
  dt = Number(process.hrtime.bigint() - t0) / 1e9;
  console.log(`reference encodeBatch (all cores): ${all.length} docs in ${dt.toFixed(3)} s = ${(bytes / dt / 1e6).toFixed(2)} MB/s`);
})();
