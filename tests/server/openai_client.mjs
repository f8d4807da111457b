// The official `openai` npm client (pinned in package.json) against a live `dsflash serve`:
// models list, chat whole and streamed with usage, completions, a tool-call round trip, thinking
// mode, and errors arriving as the client's own error classes.
import OpenAI from 'openai';
import { test, assert, assertEq, run, post } from './harness.mjs';

const [base, key] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: key, maxRetries: 0, timeout: 300000 });
const MODEL = 'deepseek-v41';
const messages = [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Name three colours.' }];

test('models.list reports the served model', async () => {
    const page = await client.models.list();
    const ids = page.data.map((m) => m.id);
    assertEq(ids, [MODEL], 'model ids');
    assert(page.data[0].object === 'model' && page.data[0].owned_by === 'v41', 'model object fields');
});

let chatWhole;
test('chat completion (non-streaming) with usage', async () => {
    const r = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 16, temperature: 0 });
    chatWhole = r;
    assert(r.id.startsWith('chatcmpl-') && r.id.length === 41, `id ${r.id}`);
    assert(r.object === 'chat.completion', 'object');
    const c = r.choices[0];
    assert(c.message.role === 'assistant' && typeof c.message.content === 'string', 'message');
    assert(['stop', 'length'].includes(c.finish_reason), `finish ${c.finish_reason}`);
    const tk = await post(base, '/tokenize', { model: MODEL, messages }, { Authorization: `Bearer ${key}` });
    assert(tk.status === 200, `tokenize ${tk.status}`);
    assertEq(r.usage.prompt_tokens, tk.json.count, 'usage.prompt_tokens equals /tokenize count');
    assertEq(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens, 'total');
    assert(r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= 16, 'completion tokens');
});

test('chat completion streamed with include_usage equals the whole response', async () => {
    const stream = await client.chat.completions.create({
        model: MODEL, messages, max_tokens: 16, temperature: 0, stream: true, stream_options: { include_usage: true },
    });
    let content = '', roles = 0, finish = null, usage = null, chunks = 0;
    for await (const ch of stream) {
        chunks++;
        assert(ch.object === 'chat.completion.chunk', 'chunk object');
        if (ch.choices.length === 0) { usage = ch.usage; continue; }
        assert(ch.usage === null, 'chunks carry usage: null');
        const d = ch.choices[0].delta;
        if (d.role) roles++;
        if (d.content) content += d.content;
        if (ch.choices[0].finish_reason) finish = ch.choices[0].finish_reason;
    }
    assert(chunks >= 3, 'several chunks');
    assertEq(roles, 1, 'one role delta');
    assertEq(content, chatWhole.choices[0].message.content, 'greedy streamed content');
    assertEq(finish, chatWhole.choices[0].finish_reason, 'finish reason');
    assert(usage && usage.prompt_tokens === chatWhole.usage.prompt_tokens &&
           usage.completion_tokens === chatWhole.usage.completion_tokens, 'usage chunk');
});

test('completions: whole, streamed and logprobs agree', async () => {
    const body = { model: MODEL, prompt: 'Once upon a time', max_tokens: 12, temperature: 0, ignore_eos: true, logprobs: 2 };
    const r = await client.completions.create(body);
    assert(r.object === 'text_completion' && r.id.startsWith('cmpl-'), 'object/id');
    assertEq(r.usage.completion_tokens, 12, 'ignore_eos: exactly max_tokens');
    assertEq(r.choices[0].finish_reason, 'length', 'finish');
    const lp = r.choices[0].logprobs;
    assert(lp.tokens.length === 12 && lp.token_logprobs.length === 12 && lp.top_logprobs.length === 12, 'logprob arrays');
    assert(lp.token_logprobs.every((x) => x <= 0), 'logprobs <= 0');
    assert(lp.text_offset.every((x, i) => i === 0 || x >= lp.text_offset[i - 1]), 'text_offset non-decreasing');
    const s = await client.completions.create({ ...body, stream: true });
    let text = '';
    for await (const ch of s) text += ch.choices[0]?.text ?? '';
    assertEq(text, r.choices[0].text, 'streamed text');
});

test('tool-call round trip is accepted and answered', async () => {
    const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather for a city',
        parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
    const first = await client.chat.completions.create({
        model: MODEL, tools, messages: [{ role: 'user', content: 'Weather in Oslo?' }], max_tokens: 8, temperature: 0 });
    assert(first.choices[0].message.role === 'assistant', 'first turn');
    const second = await client.chat.completions.create({
        model: MODEL, tools, max_tokens: 8, temperature: 0, messages: [
            { role: 'user', content: 'Weather in Oslo?' },
            { role: 'assistant', content: null, tool_calls: [{ id: 'call_0', type: 'function',
                function: { name: 'get_weather', arguments: '{"city": "Oslo"}' } }] },
            { role: 'tool', tool_call_id: 'call_0', content: '{"temp_c": 4}' },
        ] });
    assert(['stop', 'length', 'tool_calls'].includes(second.choices[0].finish_reason), 'second turn');
    const tk = await post(base, '/tokenize', { model: MODEL, tools, messages: [{ role: 'user', content: 'x' }], return_text: true },
                          { Authorization: `Bearer ${key}` });
    assert(tk.json.text.includes('## Tools') && tk.json.text.includes('get_weather'), 'tools section rendered');
});

test('thinking mode returns reasoning_content', async () => {
    const r = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 8, temperature: 0, reasoning_effort: 'high' });
    assert(typeof r.choices[0].message.reasoning_content === 'string', 'reasoning_content present');
    assert(typeof r.usage.completion_tokens_details.reasoning_tokens === 'number', 'reasoning_tokens');
});

async function expectError(fn, cls, status, code, param) {
    try {
        await fn();
    } catch (e) {
        assert(e instanceof cls, `expected ${cls.name}, got ${e && e.constructor && e.constructor.name}: ${e.message}`);
        assertEq(e.status, status, 'status');
        if (code) assertEq(e.code, code, 'code');
        if (param !== undefined) assertEq(e.param, param, 'param');
        return;
    }
    throw new Error(`expected ${cls.name}`);
}

test('errors arrive as the client error classes', async () => {
    await expectError(() => client.chat.completions.create({ model: MODEL, messages, temperature: 3 }),
                      OpenAI.BadRequestError, 400, 'invalid_value', 'temperature');
    await expectError(() => client.chat.completions.create({ model: MODEL, messages, n: 65 }),
                      OpenAI.BadRequestError, 400, 'invalid_value', 'n');
    await expectError(() => client.chat.completions.create({ model: 'no-such-model', messages }),
                      OpenAI.NotFoundError, 404, 'model_not_found', 'model');
    await expectError(() => client.completions.create({ model: MODEL, prompt: 'x', max_tokens: 10000000 }),
                      OpenAI.BadRequestError, 400, 'context_length_exceeded');
    const bad = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'wrong-key', maxRetries: 0 });
    await expectError(() => bad.models.list(), OpenAI.AuthenticationError, 401, 'invalid_api_key');
    await expectError(() => client.chat.completions.create({ model: MODEL, messages, tool_choice: 'required',
        tools: [{ type: 'function', function: { name: 'f' } }], max_tokens: 4 }), OpenAI.BadRequestError, 400, 'tool_choice_not_satisfied', 'tool_choice');
});

run();
