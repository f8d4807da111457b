// Minimal test harness for the server suites: named async cases run in order, each failure is
// printed with its message, and the run ends with the line "N passed, N failed" that
// tests/run.sh sums.  Helpers talk to the server directly (no proxy settings are consulted:
// node's fetch ignores HTTP_PROXY), bounded by timeouts.
import http from 'node:http';

const cases = [];
export function test(name, fn) { cases.push({ name, fn }); }
export function assert(cond, msg) { if (!cond) throw new Error(msg); }
export function assertEq(a, b, msg) {
    const ja = JSON.stringify(a), jb = JSON.stringify(b);
    if (ja !== jb) throw new Error(`${msg}: ${ja.slice(0, 300)} !== ${jb.slice(0, 300)}`);
}

export async function run() {
    let passed = 0, failed = 0;
    for (const c of cases) {
        try {
            await c.fn();
            console.log(`ok ${c.name}`);
            passed++;
        } catch (e) {
            console.log(`not ok ${c.name}: ${e && e.stack ? e.stack.split('\n').slice(0, 3).join(' | ') : e}`);
            failed++;
        }
    }
    console.log(`${passed} passed, ${failed} failed`);
    process.exit(failed ? 1 : 0);
}

export async function post(base, path, body, headers = {}) {
    const r = await fetch(base + path, {
        method: 'POST', headers: { 'Content-Type': 'application/json', ...headers },
        body: typeof body === 'string' ? body : JSON.stringify(body), signal: AbortSignal.timeout(300000),
    });
    const text = await r.text();
    let json = null;
    try { json = JSON.parse(text); } catch { /* not JSON */ }
    return { status: r.status, headers: r.headers, text, json };
}

export async function get(base, path, headers = {}) {
    const r = await fetch(base + path, { headers, signal: AbortSignal.timeout(60000) });
    const text = await r.text();
    let json = null;
    try { json = JSON.parse(text); } catch { /* not JSON */ }
    return { status: r.status, headers: r.headers, text, json };
}

// SSE body -> list of parsed events; checks the `data: ...\n\n` framing and the final [DONE].
export function parseSSE(text) {
    const events = [];
    let done = false;
    for (const block of text.split('\n\n')) {
        if (block === '' || block.startsWith(':')) continue; // a comment (the server's keep-alive)
        assert(block.startsWith('data: '), `bad SSE block: ${block.slice(0, 80)}`);
        const payload = block.slice(6);
        if (payload === '[DONE]') { done = true; continue; }
        assert(!done, 'event after [DONE]');
        events.push(JSON.parse(payload));
    }
    assert(done && text.endsWith('data: [DONE]\n\n'), 'stream did not end with data: [DONE]');
    return events;
}

export async function metrics(base) {
    const r = await get(base, '/metrics');
    const m = {};
    for (const line of r.text.split('\n')) {
        if (!line || line.startsWith('#')) continue;
        const i = line.lastIndexOf(' ');
        m[line.slice(0, i)] = Number(line.slice(i + 1));
    }
    return m;
}

// A streaming request whose client can be dropped: resolves with the received text; `dropAfter`
// bytes (0 = right after sending) destroys the socket.
export function streamRaw(base, path, body, dropAfter = -1) {
    return new Promise((resolve, reject) => {
        const u = new URL(base + path);
        const req = http.request({ host: u.hostname, port: u.port, path: u.pathname, method: 'POST',
                                   headers: { 'Content-Type': 'application/json' }, timeout: 300000 }, (res) => {
            let got = '';
            res.setEncoding('utf8');
            res.on('data', (d) => {
                got += d;
                if (dropAfter > 0 && got.length >= dropAfter) { req.destroy(); resolve({ dropped: true, text: got }); }
            });
            res.on('end', () => resolve({ dropped: false, status: res.statusCode, text: got }));
            res.on('error', () => resolve({ dropped: true, text: got }));
        });
        req.on('error', (e) => { if (dropAfter >= 0) resolve({ dropped: true, text: '' }); else reject(e); });
        req.end(JSON.stringify(body));
        if (dropAfter === 0) setTimeout(() => { req.destroy(); resolve({ dropped: true, text: '' }); }, 50);
    });
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
