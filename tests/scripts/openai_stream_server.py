#!/usr/bin/env python3
"""A minimal OpenAI-compatible completions server (stdlib only) for the
`vllmc bench serve` smoke test: GET /v1/models, POST /v1/completions with
token-id prompts, streamed as Server-Sent Events with a final usage chunk.
Prompt ids at or above VOCAB get a 400, as a real server refuses them.
Prints the port it listens on, then serves until killed."""
import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

VOCAB = 1000


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, obj):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path != "/v1/models":
            return self.reply(404, {"error": {"message": "no route", "code": 404}})
        self.reply(200, {"object": "list", "data": [{"id": "stream-mock", "root": "stream-mock"}]})

    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = req.get("prompt", [])
        if any(not isinstance(t, int) or t < 0 or t >= VOCAB for t in prompt):
            return self.reply(400, {"error": {"message": "token id out of vocabulary",
                                              "type": "BadRequestError", "code": 400}})
        n = int(req.get("max_tokens", 16))
        usage = {"prompt_tokens": len(prompt), "completion_tokens": n,
                 "total_tokens": len(prompt) + n}
        if not req.get("stream"):
            return self.reply(200, {"choices": [{"index": 0, "text": " a" * n}], "usage": usage})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        for i in range(n):
            time.sleep(0.002)
            chunk = {"choices": [{"index": 0, "text": " t%d" % i, "finish_reason": None}]}
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            self.wfile.flush()
        self.wfile.write(b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n")
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
