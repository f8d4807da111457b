// Byte-exact comparison of dsflash's tokenizer with an implementation we did not write:
// Hugging Face `tokenizers` (Rust, npm tokenizers@0.23.2, pinned in package-lock.json).
//
// Usage: node compare_reference.js DSFLASH_BIN TOKENIZER_JSON SCRATCH_DIR GROUP...
//   GROUP: edge (hand-picked edge cases), fuzz (3000 seeded random strings),
//          moby (Moby Dick, whole text as one input), sotu (each State of the Union address).
// For every input the ids of `dsflash tokenize --lines` must equal HF encode(text,
// add_special_tokens=false); `dsflash detokenize --lines` of those ids must equal HF decode(ids),
// plain and with skip_special_tokens, and give back the input exactly unless the environment sets
// LOSSY=1 (tokenizers whose normalizer or Removed split changes the text).
// Each group is one test case; prints "ok|not ok GROUP: ..." lines and "N passed, N failed".
'use strict';
const fs = require('fs');
const path = require('path');
const { execFileSync } = require('child_process');
const { Tokenizer } = require('tokenizers');

const [bin, tokPath, scratch, ...groups] = process.argv.slice(2);
const DATA = path.join(__dirname, '..', '..', '.cache', 'tokenizer-data');

const EDGE = [
  '', ' ', '  ', '   ', '\t', '\t\t', '\n', '\n\n', '\r\n', ' \n ', '\n \n', 'a\n\n\nb', 'x  \ty', '  leading', 'trailing  ',
  'Hello world', 'Hello, world!', "it's don't we'll they're I'M", 'a.b.c', '...', '!!!???', '(parens) [brackets] {braces}',
  '0', '7', '12', '123', '1234', '12345678901234567890', '3.14159', '-42', '1,000,000', '1e10', 'v1.2.3', 'x2y3z',
  '٠١٢٣٤٥٦٧٨٩', '१२३', '１２３４５', '²³¹', 'Ⅻ Ⅳ', '¼ ½ ¾',
  '你好，世界！', '日本語のテキスト', 'カタカナとひらがな', '한국어 텍스트', '中文English混合123', '漢字かな交じり文',
  '😀', '😀😃😄', '👍🏽', '👨‍👩‍👧‍👦', '🇫🇷🇯🇵', '❤️', 'a😀b', '🏳️‍🌈',
  'e\u0301', 'e\u0301\u0302\u0303', '\u0301', 'Å', 'A\u030A', 'ñ n\u0303', 'ǅ', 'ﬁ ﬂ', 'İstanbul', 'ΣΑΣ σας',
  'ＡＢＣ　ｄｅｆ', 'ｶﾀｶﾅ', '！？', '\u00a0x\u00a0', '\u3000full\u3000width', '\u2028\u2029', '\u200b\u200c\u200d', '\u180e',
  '\u0085next', '\u202fnarrow', 'tab\u000bvt\u000cff', '\u0001\u0002\u001f', '\u007f', 'عربي مع English', 'עברית', 'हिन्दी', 'ไทย',
  '<｜User｜>', '<｜Assistant｜>', '<｜begin▁of▁sentence｜>hi<｜end▁of▁sentence｜>', 'x<｜User｜>y<｜Assistant｜>z',
  '<｜User', '｜User｜>', '<｜User｜<｜User｜>>', '<think></think>', '</think>', '<｜place▁holder▁no▁5｜>', '<|EOT|>',
  '<｜▁pad▁｜>', '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>', '<｜System｜>', '<｜latest_reminder｜>', '｜DSML｜', '<｜DSML｜ calls>',
  '<｜deepseek_image｜>', '<\u200b｜User｜>', 'a  <mask>  b', '<mask>\n\tx', ' \u3000<mask>', 'https://example.com/a/b?c=1&d=2#frag', 'user@example.com', 'C:\\path\\to\\file.txt',
  'def f(x):\n    return x ** 2\n', '    indented\n\tcode', 'SELECT * FROM t WHERE a = 1;', '{"json": [1, 2, {"k": null}]}',
  '<html><body class="x">Hi</body></html>', 'x'.repeat(300), ' '.repeat(100), '\n'.repeat(50), 'ab '.repeat(200),
  '🙂'.repeat(40), '中'.repeat(120), '1'.repeat(61),
];

function fuzzStrings(n) {
  let s = 0x2545F491;
  const rnd = () => { s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0; return s; };
  const pool = [...' \t\n\r\u000b\u000c\u00a0\u3000\u0085\u2028\u2029\u200b\u180e\u2009\u202f', ...'abcXYZ019_\'"!?.,;:-()[]{}<>/\\|@#$%^&*+=~`',
    ...'٠١٢۴५１２３²³¼Ⅻ〇', ...'你好世界日本語カタカナひらがな한국어ㄱ', '😀', '👍🏽', '👨‍👩‍👧', '🇫🇷', '❤️', '\u0301', 'e\u0301', '\u0308', 'ﬁ', 'Å', 'ß',
    'İ', 'Σ', 'ς', ...'αβγДЖЯعربيעבריתहिन्दीไทย', '<｜User｜>', '<｜Assistant｜>', '<｜end▁of▁sentence｜>', '<｜begin▁of▁sentence｜>',
    '<｜place▁holder▁no▁7｜>', '<｜User', '｜>', '<think>', '</think>', '｜DSML｜', '<｜System｜>', '<｜deepseek_image｜>', '<|EOT|>',
    "'s", "'re", "'ll", "n't", 'https://x.y/z?a=1&b=2', '3.14159', '1,000,000', '0x1F', '   ', '\n\n', '\r\n', '\t\t'];
  const out = [];
  for (let i = 0; i < n; i++) {
    const len = 1 + (rnd() % 30);
    let t = '';
    for (let k = 0; k < len; k++) t += pool[rnd() % pool.length];
    out.push(t);
  }
  return out;
}

function groupInputs(g) {
  if (g === 'edge') return EDGE;
  if (g === 'fuzz') return fuzzStrings(3000);
  if (g === 'moby') return [fs.readFileSync(path.join(DATA, 'moby_dick.txt'), 'utf8')];
  if (g === 'sotu') {
    const dir = path.join(DATA, 'sotu');
    return fs.readdirSync(dir).sort().map((f) => fs.readFileSync(path.join(dir, f), 'utf8'));
  }
  throw new Error('unknown group ' + g);
}

function run(args) {
  return execFileSync(bin, args, { maxBuffer: 1 << 30, encoding: 'utf8' });
}

(async () => {
  const tok = Tokenizer.fromFile(tokPath);
  let passed = 0, failed = 0;
  fs.mkdirSync(scratch, { recursive: true });
  for (const g of groups) {
    const inputs = groupInputs(g).filter((s) => s.length > 0 || g === 'edge');
    const casesFile = path.join(scratch, `${g}.jsonl`);
    const nonEmpty = inputs.filter((s) => s.length > 0);
    fs.writeFileSync(casesFile, nonEmpty.map((s) => JSON.stringify(s)).join('\n') + '\n');
    let problems = [];
    let ours;
    try {
      ours = run(['tokenize', '--tokenizer', tokPath, '--lines', casesFile]).split('\n').slice(0, nonEmpty.length);
    } catch (e) {
      problems.push('dsflash tokenize failed: ' + e.message);
    }
    let bytes = 0, tokens = 0;
    const oursIds = [], refSkip = [], refPlain = [];
    for (let i = 0; ours && i < nonEmpty.length; i++) {
      const s = nonEmpty[i];
      bytes += Buffer.byteLength(s);
      const enc = await tok.encode(s, null, { addSpecialTokens: false });
      const ref = Array.from(enc.getIds());
      const got = ours[i] === '' ? [] : ours[i].split(' ').map(Number);
      tokens += got.length;
      oursIds.push(got);
      refSkip.push(await tok.decode(ref, true));
      refPlain.push(await tok.decode(ref, false));
      if (ref.length !== got.length || ref.some((v, k) => v !== got[k])) {
        let k = 0;
        while (k < ref.length && ref[k] === got[k]) k++;
        problems.push(`input ${i} ${JSON.stringify(s.slice(0, 60))}: first difference at token ${k}: ` +
                      `reference ${JSON.stringify(ref.slice(k, k + 5))} dsflash ${JSON.stringify(got.slice(k, k + 5))}`);
      }
    }
    if (ours && problems.length === 0) {
      // round trips through our decoder, plain and skipping special tokens
      const idsFile = path.join(scratch, `${g}.ids`);
      fs.writeFileSync(idsFile, oursIds.map((ids) => JSON.stringify(ids)).join('\n') + '\n');
      const plain = run(['detokenize', '--tokenizer', tokPath, '--lines', '--file', idsFile]).split('\n');
      const skip = run(['detokenize', '--tokenizer', tokPath, '--lines', '--skip-special', '--file', idsFile]).split('\n');
      for (let i = 0; i < nonEmpty.length; i++) {
        if (JSON.parse(plain[i]) !== refPlain[i]) problems.push(`input ${i}: decode differs from the reference`);
        if (!process.env.LOSSY && JSON.parse(plain[i]) !== nonEmpty[i]) problems.push(`input ${i}: decode does not round-trip`);
        if (JSON.parse(skip[i]) !== refSkip[i]) problems.push(`input ${i}: skip-special decode differs from the reference`);
      }
    }
    // the empty string encodes to nothing on both sides
    if (g === 'edge') {
      const e = await tok.encode('', null, { addSpecialTokens: false });
      if (e.getIds().length !== 0) problems.push('reference encodes "" to ids');
    }
    const name = `${path.basename(path.dirname(tokPath))}/${g}`;
    if (problems.length === 0) {
      passed++;
      console.log(`ok ${name}: ${nonEmpty.length} inputs, ${bytes} bytes, ${tokens} tokens identical; decode ` +
                  (process.env.LOSSY ? 'equals the reference' : 'round-trips'));
    } else {
      failed++;
      console.log(`not ok ${name}: ${problems.length} problems`);
      for (const p of problems.slice(0, 10)) console.log('  ' + p);
    }
  }
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
})().catch((e) => { console.log('error: ' + e.stack); console.log('0 passed, 1 failed'); process.exit(1); });
