#!/usr/bin/env python3
"""A stub OpenAI-compatible server for the bench tests: a second endpoint shape that is not ours.

Why a stub: it proves `dsflash bench` works against any OpenAI-compatible server, and its timing is
known (first text after --ttft seconds, then one text chunk every --itl seconds), so the tests can
check TTFT / TPOT / ITL percentiles against delays we chose.  Its tokenizer is deliberately simple
(one token per 4 code points, plus one start token when special tokens are added) and its
speculation counters are scripted (each finished request adds 10 drafts, 30 draft tokens and 15
accepted tokens: A = 1 + 15/10 = 2.5), so every derived figure has a known value.

Only the standard library.  Writes its port to --port-file once listening; logs every completion
prompt to --prompt-log (one JSON string per line)."""
import argparse, json, threading, time, uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ap = argparse.ArgumentParser()
ap.add_argument("--port-file", required=True)
ap.add_argument("--prompt-log")
ap.add_argument("--model", default="stub-model")
ap.add_argument("--api-key")
ap.add_argument("--ttft", type=float, default=0.1)
ap.add_argument("--itl", type=float, default=0.02)
ap.add_argument("--max-num-seqs", type=int, default=64)
ap.add_argument("--spec-tokens", type=int, default=3)
ap.add_argument("--minimal", action="store_true", help="no /tokenize, /server_info, /metrics, /reset_prefix_cache")
ap.add_argument("--no-drafts-counter", action="store_true", help="omit the drafts counter (fallback A formula)")
ap.add_argument("--restart-after", type=int, default=0, help="change instance_id after N completions")
ap.add_argument("--kernel-fallback", action="store_true")
ap.add_argument("--short-by-one", action="store_true", help="stream one token fewer than asked (measured requests only)")
ap.add_argument("--repetitive", action="store_true", help="every chunk is the same word (degenerate output)")
args = ap.parse_args()

lock = threading.Lock()
state = {"running": 0, "drafts": 0, "draft_tokens": 0, "accepted": 0, "hits": 0, "done": 0,
         "instance": str(uuid.uuid4()), "seen": set()}


def count_tokens(text, special=True):
    return len(text) // 4 + (1 if special else 0)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def log_message(self, *a):
        pass

    def send_json(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def authorized(self):
        if args.api_key and self.headers.get("Authorization") != "Bearer " + args.api_key:
            self.send_json(401, {"error": {"message": "bad key", "type": "authentication_error"}})
            return False
        return True

    def missing(self):
        self.send_json(404, {"error": {"message": "not found", "type": "not_found_error"}})

    def do_GET(self):
        if not self.authorized():
            return
        if self.path == "/health":
            return self.send_json(200, {"status": "ok"})
        if self.path == "/v1/models":
            return self.send_json(200, {"object": "list", "data": [{"id": args.model, "object": "model"}]})
        if args.minimal:
            return self.missing()
        if self.path == "/server_info":
            with lock:
                inst = state["instance"]
            return self.send_json(200, {"instance_id": inst, "max_num_seqs": args.max_num_seqs,
                                        "num_speculative_tokens": args.spec_tokens, "prefix_caching": True,
                                        "version": "stub 1"})
        if self.path == "/metrics":
            with lock:
                s = dict(state)
            lines = ["# HELP stub:num_requests_running running", f"stub:num_requests_running {s['running']}",
                     'stub:num_requests_waiting{queue="main"} 0',
                     f"stub:spec_decode_num_accepted_tokens_total {s['accepted']}",
                     f"stub:spec_decode_num_draft_tokens_total {s['draft_tokens']}",
                     f"stub:prefix_cache_hits_total {s['hits']}",
                     f"stub:kernel_fallback_total {1 if args.kernel_fallback else 0}"]
            if not args.no_drafts_counter:
                lines.append(f"stub:spec_decode_num_drafts_total {s['drafts']}")
            body = ("\n".join(lines) + "\n").encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.missing()

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(n) or b"{}")
        if not self.authorized():
            return
        if self.path == "/v1/completions":
            return self.completion(body)
        if args.minimal:
            return self.missing()
        if self.path == "/tokenize":
            special = body.get("add_special_tokens", True)
            text = body["prompt"]
            c = count_tokens(text, special)
            toks = ([0] if special else []) + [hash(text[i:i + 4]) % 50000 for i in range(0, 4 * (len(text) // 4), 4)]
            return self.send_json(200, {"count": c, "tokens": toks})
        if self.path == "/reset_prefix_cache":
            with lock:
                state["seen"].clear()
            return self.send_json(200, {"status": "ok"})
        self.missing()

    def completion(self, body):
        prompt, max_tokens = body["prompt"], body["max_tokens"]
        if args.prompt_log:
            with lock, open(args.prompt_log, "a") as f:
                f.write(json.dumps(prompt) + "\n")
        with lock:
            state["running"] += 1
            if prompt in state["seen"]:
                state["hits"] += count_tokens(prompt)
            state["seen"].add(prompt)
        n_out = max_tokens - 1 if args.short_by_one and prompt.startswith("[req-") else max_tokens
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        try:
            time.sleep(args.ttft)
            for i in range(n_out):
                if i:
                    time.sleep(args.itl)
                chunk = {"object": "text_completion", "model": args.model,
                         "choices": [{"index": 0, "text": " la" if args.repetitive else f" w{i}",
                                      "finish_reason": None}]}
                self.wfile.write(("data: " + json.dumps(chunk) + "\n\n").encode())
                self.wfile.flush()
            usage = {"prompt_tokens": count_tokens(prompt), "completion_tokens": n_out,
                     "total_tokens": count_tokens(prompt) + n_out}
            self.wfile.write(("data: " + json.dumps({"choices": [], "usage": usage}) + "\n\ndata: [DONE]\n\n").encode())
            self.wfile.flush()
        finally:
            with lock:
                state["running"] -= 1
                state["drafts"] += 10
                state["draft_tokens"] += 30
                state["accepted"] += 15
                state["done"] += 1
                if args.restart_after and state["done"] == args.restart_after:
                    state["instance"] = str(uuid.uuid4())


srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
srv.daemon_threads = True
with open(args.port_file + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
import os
os.rename(args.port_file + ".tmp", args.port_file)
srv.serve_forever()
