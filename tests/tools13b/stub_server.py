#!/usr/bin/env python3
"""A second OpenAI-compatible endpoint for the probe and gate tests: a scripted stub whose answers
are known in advance, so the tools' decisions (exit codes, verdicts, signatures) can be checked
against what the script says they must be.  Standard library only.

usage: stub_server.py PORTFILE MODE [GSM8K_TABLE.json]
MODE: normal | restart (instance id changes after the first /server_info) | badmode (rendered chat
prompt ends in thinking mode) | jitter (top-1 logprob varies) | flaky (answers change when several
requests are in flight) | needle-no | needle-err"""
import itertools, json, re, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORTFILE, MODE = sys.argv[1], sys.argv[2]
TABLE = json.load(open(sys.argv[3])) if len(sys.argv) > 3 else {}
lock = threading.Lock()
chat_counter = itertools.count()
state = {"inflight": 0, "info_calls": 0}

AGENT_SCRIPT = [  # one turn per agent-gate sample, in order; expected outcome in the comment
    {"tool_calls": [("read", '{"path":"DESIGN.md"}')]},                 # pass, DESIGN.md
    {"tool_calls": [("read", '{"path":"docs/DESIGN.md"}')]},            # pass
    {"content": "Let me think about", "finish": "length"},             # truncated
    {"content": ""},                                                   # empty_output
    {"content": '<｜DSML｜ invoke name="read">'},                       # malformed_tool_call
    {"tool_calls": [("read", "not json")]},                             # malformed_tool_call
    {"tool_calls": [("bash", '{"command":"cat DESIGN.md"}')]},          # wrong_tool
    {"content": "Читаю файл DESIGN.md"},                               # mixed_script
    {"content": " ".join(["read"] * 25)},                              # repetitive
    {"content": "Here is a summary of README.md."},                    # no_tool_call
]


def message(content=None, reasoning=None, tool_calls=None, finish="stop", logprobs=None, usage_tokens=5):
    msg = {"role": "assistant", "content": content}
    if reasoning is not None:
        msg["reasoning_content"] = reasoning
    if tool_calls:
        msg["tool_calls"] = [{"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": a}}
                             for i, (n, a) in enumerate(tool_calls)]
        finish = "tool_calls" if finish == "stop" else finish
    choice = {"index": 0, "message": msg, "finish_reason": finish}
    if logprobs is not None:
        choice["logprobs"] = {"content": logprobs}
    return {"id": "chatcmpl-stub", "object": "chat.completion", "model": "stub-model", "choices": [choice],
            "usage": {"prompt_tokens": 10, "completion_tokens": usage_tokens, "total_tokens": 10 + usage_tokens}}


def text_answer(msgs, flaky):
    """Answers of the multibatch and determinism scripts, from the conversation itself."""
    users = [m["content"] for m in msgs if m["role"] == "user"]
    last = users[-1]
    nums = re.findall(r"\d{10}", users[0])
    if last.startswith("Remember"):
        return "OK"
    m = re.search(r"What was the (first|second|third) number", last)
    if m:
        return nums[["first", "second", "third"].index(m.group(1))]
    if last.startswith("List all three"):
        return " ".join(nums)
    m = re.search(r"What is (\d+) (plus|times) (\d+)", last)
    if m:
        a, b = int(m.group(1)), int(m.group(3))
        ans = str(a + b if m.group(2) == "plus" else a * b)
        return ans + (" (batched)" if flaky else "")
    if last.endswith("Continue the text above."):
        return " ".join(f"word{i}" for i in range(40))
    return "A"


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def send(self, obj, status=200):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/health":
            return self.send({"status": "ok"})
        if self.path == "/v1/models":
            return self.send({"object": "list", "data": [{"id": "stub-model", "object": "model"}]})
        if self.path == "/server_info":
            with lock:
                state["info_calls"] += 1
                n = state["info_calls"]
            iid = "stub-2" if MODE == "restart" and n > 1 else "stub-1"
            return self.send({"instance_id": iid, "max_num_seqs": 32, "admission_gate": True})
        self.send({"error": {"message": "not found"}}, 404)

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
        if self.path == "/tokenize":
            return self.tokenize(body)
        if self.path == "/v1/chat/completions":
            with lock:
                state["inflight"] += 1
                k = next(chat_counter)
            try:
                time.sleep(0.05)   # lets concurrent requests overlap
                with lock:
                    flaky = MODE == "flaky" and state["inflight"] > 1
                return self.chat(body, k, flaky)
            finally:
                with lock:
                    state["inflight"] -= 1
        if self.path == "/v1/completions" and body.get("stream"):
            return self.stream()
        self.send({"error": {"message": "unsupported"}}, 400)

    def tokenize(self, body):
        text = body.get("prompt") if "prompt" in body else json.dumps(body.get("messages"), ensure_ascii=False)
        count = len(text) // 2 + 1
        out = {"count": count, "max_model_len": 1000000, "tokens": [i % 1000 for i in range(count)]}
        if body.get("return_text"):
            thinking = (body.get("chat_template_kwargs") or {}).get("enable_thinking", False)
            if MODE == "badmode":
                thinking = not thinking
            out["text"] = "<｜begin▁of▁sentence｜>...<｜Assistant｜>" + ("<think>" if thinking else "</think>")
        self.send(out)

    def chat(self, body, k, flaky):
        msgs = body["messages"]
        if any(m.get("role") == "tool" for m in msgs):
            tool_text = [m for m in msgs if m.get("role") == "tool"][0]["content"]
            if "ZQ-7749" in tool_text or "内部代号" in tool_text:
                return self.needle(k)
            t = AGENT_SCRIPT[k % len(AGENT_SCRIPT)]
            return self.send(message(t.get("content"), None, t.get("tool_calls"), t.get("finish", "stop")))
        q = msgs[-1]["content"]
        if q in TABLE:   # gsm8k: the answer written for this question
            return self.send(message(TABLE[q]))
        if body.get("logprobs"):
            n = body.get("max_tokens", 1)
            lp = -0.5 - (1e-6 * (k % 2) if MODE == "jitter" else 0)
            e = {"token": "A", "logprob": lp, "bytes": [65], "top_logprobs": [{"token": "A", "logprob": lp, "bytes": [65]}]}
            return self.send(message("A" * n, logprobs=[e] * n, usage_tokens=n))
        return self.send(message(text_answer(msgs, flaky)))

    def needle(self, k):
        if MODE == "needle-err" and k % 2:
            return self.send({"error": {"message": "scripted failure"}}, 500)
        if MODE == "needle-no":
            return self.send(message("不知道", "我没有找到。"))
        return self.send(message("ZQ-7749", "文档中写着内部代号是 ZQ-7749。"))

    def stream(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            for _ in range(600):
                ev = {"choices": [{"index": 0, "text": "x", "finish_reason": None}]}
                self.wfile.write(b"data: " + json.dumps(ev).encode() + b"\n\n")
                self.wfile.flush()
                time.sleep(0.05)
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True


srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
srv.daemon_threads = True
with open(PORTFILE + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
import os
os.rename(PORTFILE + ".tmp", PORTFILE)
srv.serve_forever()
