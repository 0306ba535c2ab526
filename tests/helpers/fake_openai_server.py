"""A small OpenAI-compatible chat server on loopback, so tests run litellm's real HTTP path.

Script it with `reply(...)` (a chat completion, with content and/or tool calls) and `fail(...)`
(an HTTP error, or a slow answer to trip a client timeout); each POST takes the next step.
`model_info` adds fields to the model's GET /models entry (a window: {"max_model_len": 8192}), `props`
answers GET /props (llama-server's). Every request is recorded (path, lower-cased headers, parsed
body). When the script is empty it answers 400 so a test that asks for more than it scripted fails
fast instead of retrying.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeOpenAIServer:
    def __init__(self, model: str = "fake-model"):
        self.model = model
        self.model_info: dict[str, Any] = {}  # more fields of the /models entry
        self.props: dict[str, Any] | None = None  # GET /props, as llama-server answers it; None: 404
        self.script: deque[dict] = deque()
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True  # a deliberately slow answer must not block shutdown
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    @property
    def chat_requests(self) -> list[dict]:
        return [r for r in self.requests if r["path"].endswith("/chat/completions")]

    def start(self) -> FakeOpenAIServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- scripting ------------------------------------------------------------------------------

    def reply(
        self,
        content: str | None = None,
        tool_calls: list[dict] | None = None,
        prompt_tokens: int = 11,
        completion_tokens: int = 7,
        finish_reason: str | None = None,
        delay_s: float = 0.0,
    ) -> None:
        """tool_calls: [{"name", "arguments" (dict or raw str), "id"?}]."""
        calls = [
            {
                "id": c.get("id", f"call_{len(self.script)}_{i}"),
                "type": "function",
                "function": {
                    "name": c["name"],
                    "arguments": c["arguments"] if isinstance(c["arguments"], str) else json.dumps(c["arguments"]),
                },
            }
            for i, c in enumerate(tool_calls or [])
        ]
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = calls
        body = {
            "id": f"chatcmpl-{len(self.script)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model,
            "choices": [
                {"index": 0, "message": message, "finish_reason": finish_reason or ("tool_calls" if calls else "stop")}
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
        self.script.append({"status": 200, "body": body, "delay_s": delay_s})

    def fail(
        self,
        status: int,
        message: str = "scripted failure",
        times: int = 1,
        code: str | None = None,
        echo_auth: bool = False,
    ) -> None:
        """An OpenAI-style error body. echo_auth puts the request's Authorization header in the
        message, as careless providers do, to prove the client never repeats it."""
        for _ in range(times):
            self.script.append(
                {
                    "status": status,
                    "delay_s": 0.0,
                    "echo_auth": echo_auth,
                    "body": {"error": {"message": message, "type": "error", "code": code}},
                }
            )

    def _next(self, path: str, headers: dict, body: Any) -> dict:
        with self._lock:
            self.requests.append({"path": path, "headers": headers, "body": body})
            if self.script:
                return self.script.popleft()
        return {
            "status": 400,
            "delay_s": 0.0,
            "body": {"error": {"message": "fake server: no scripted response left", "type": "error"}},
        }


def _handler_for(server: FakeOpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # keep pytest output clean
            pass

        def _send(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path.rstrip("/").endswith("/models"):
                self._send(
                    200,
                    {
                        "object": "list",
                        "data": [{"id": server.model, "object": "model", "owned_by": "fake", **server.model_info}],
                    },
                )
            elif self.path.rstrip("/") == "/props" and server.props is not None:
                self._send(200, server.props)
            else:
                self._send(404, {"error": {"message": f"no route {self.path}", "type": "error"}})

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            try:
                body = json.loads(raw or b"{}")
            except json.JSONDecodeError:
                body = {"unparsed": raw.decode(errors="replace")}
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._send(404, {"error": {"message": f"no route {self.path}", "type": "error"}})
                return
            step = server._next(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            if step["delay_s"]:
                time.sleep(step["delay_s"])
            reply = step["body"]
            if step.get("echo_auth"):
                auth = self.headers.get("Authorization", "")
                reply = {"error": {**reply["error"], "message": f"{reply['error']['message']} (key: {auth})"}}
            try:
                self._send(step["status"], reply)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout test); nothing to answer

    return Handler
