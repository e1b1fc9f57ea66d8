"""Fault-injecting HTTP/1.1 reverse proxy between the operator's AWS SDK and moto, for e2e tests.

Requests are forwarded unchanged (Host included, so SigV4 signatures still verify) except that, at
rates set at runtime, it injects what real AWS does: 5xx errors, throttling, a full quota (IAM's
LimitExceeded, S3's TooManyBuckets), latency, and connections dropped before forwarding or after
the change already landed upstream.

Usage: python3 hack/fault_proxy.py --upstream http://127.0.0.1:PORT [--listen 127.0.0.1:0]
                                   [--seed N] [--verbose]
Prints `listening on 127.0.0.1:<port>` once bound, then serves until SIGTERM.

Control API (same port; never forwarded or faulted), each answering {"rates": ..., "stats": ...}:
  GET  /__faults        current rates and stats
  PUT  /__faults        any of drop_before, drop_after, error5xx, throttle, quota, latency (rates in
                        [0, 1]), latency_ms ([lo, hi]), only (operation substrings to restrict
                        faults to); 400 naming the key on an unknown key or bad value
  POST /__faults/reset  zeroes the stats
One draw per request picks at most one fault, in the order drop_before, drop_after, error5xx,
throttle, quota, latency. Operations: the Action for query protocol (IAM, STS); for S3
`METHOD service|bucket|object[?subresources]`, e.g. "PUT bucket?tagging".
"""

import argparse
import contextlib
import copy
import http.client
import ipaddress
import json
import random
import signal
import socket
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Optional
from urllib.parse import parse_qs, parse_qsl, urlsplit

Headers = list[tuple[str, str]]
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade"}
FAULTS = ("drop_before", "drop_after", "error5xx", "throttle", "quota", "latency")
S3_SUBRESOURCE_PARAMS = {"list-type", "uploadId", "partNumber", "versionId"}
ERRORS = {  # (fault, query protocol) -> status, error type, code, message
    ("error5xx", True): (500, "Receiver", "ServiceFailure", "Injected service failure"),
    ("throttle", True): (400, "Sender", "Throttling", "Rate exceeded"),
    ("error5xx", False): (500, "", "InternalError", "We encountered an internal error."),
    ("throttle", False): (503, "", "SlowDown", "Please reduce your request rate."),
    ("quota", True): (409, "Sender", "LimitExceeded", "Cannot exceed quota (injected)"),
    ("quota", False): (400, "", "TooManyBuckets",
                       "You have attempted to create more buckets than allowed"),
}


def is_number(value: Any, hi: float) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= hi


def invalid(key: str, value: Any) -> Optional[str]:
    """Why a PUT /__faults key or value is rejected, or None."""
    if key in FAULTS:
        return None if is_number(value, 1) else f"{key}: rate must be a number in [0, 1]"
    if key == "latency_ms":
        ok = isinstance(value, list) and len(value) == 2 and all(is_number(v, 60000) for v in value)
        ok = ok and value[0] <= value[1]
        return None if ok else "latency_ms: must be [lo, hi] with 0 <= lo <= hi <= 60000"
    if key == "only":
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        return None if ok else "only: must be a list of strings"
    return f"{key}: unknown key (expected {', '.join(FAULTS)}, latency_ms or only)"


class FaultState:
    def __init__(self, seed: Optional[int]) -> None:
        self.lock = threading.Lock()
        self.rng = random.Random(seed)
        self.rates: dict[str, Any] = {f: 0.0 for f in FAULTS}
        self.rates.update(latency_ms=[50, 300], only=[])
        self.stats: dict[str, Any] = {}
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.stats = {k: 0 for k in ("requests", "forwarded") + FAULTS}
            self.stats["by_operation"] = {}

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return copy.deepcopy({"rates": self.rates, "stats": self.stats})

    def update(self, changes: Any) -> Optional[str]:
        """Applies a PUT body all-or-nothing; returns an error message or None."""
        if not isinstance(changes, dict):
            return "body must be a JSON object"
        errors = [e for k, v in changes.items() if (e := invalid(k, v))]
        if errors:
            return errors[0]
        with self.lock:
            self.rates.update({k: float(v) if k in FAULTS else v for k, v in changes.items()})
        return None

    def choose(self, operation: str) -> tuple[Optional[str], float]:
        """Counts the request and picks at most one fault, with its latency in seconds."""
        with self.lock:
            self.stats["requests"] += 1
            by_op = self.stats["by_operation"]
            by_op[operation] = by_op.get(operation, 0) + 1
            only = self.rates["only"]
            if only and not any(s in operation for s in only):
                return None, 0.0
            draw, cumulative = self.rng.random(), 0.0
            for fault in FAULTS:  # draw < 1, so rates summing past 1 are clamped
                cumulative += self.rates[fault]
                if draw < cumulative:
                    self.stats[fault] += 1
                    lo, hi = self.rates["latency_ms"]
                    return fault, (self.rng.uniform(lo, hi) / 1000 if fault == "latency" else 0.0)
            return None, 0.0

    def count_forwarded(self) -> None:
        with self.lock:
            self.stats["forwarded"] += 1


class ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state: ClassVar[FaultState]
    upstream: ClassVar[tuple[str, int]]
    verbose: ClassVar[bool] = False
    conn: Optional[http.client.HTTPConnection] = None  # this client connection's upstream one

    def log_message(self, format: str, *args: Any) -> None:
        if self.verbose:
            sys.stderr.write(f"fault_proxy: {format % args}\n")

    def finish(self) -> None:
        if self.conn is not None:
            self.conn.close()
        super().finish()

    def read_body(self) -> bytes:
        if "chunked" not in self.headers.get("Transfer-Encoding", "").lower():
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))
        chunks = []
        while size := int(self.rfile.readline().split(b";")[0].strip(), 16):
            chunks.append(self.rfile.read(size))
            self.rfile.readline()
        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
            pass  # trailers
        return b"".join(chunks)

    def operation(self, body: bytes) -> tuple[str, bool]:
        """Returns the operation name and whether it is query protocol (IAM, STS)."""
        form = self.headers.get("Content-Type", "").startswith("application/x-www-form-urlencoded")
        if self.command == "POST" and form:
            action = parse_qs(body.decode("utf-8", "replace")).get("Action")
            if action:
                return action[0], True
        url = urlsplit(self.path)
        depth = len([s for s in url.path.split("/", 2)[1:] if s])
        level = ("service", "bucket", "object")[depth]
        params = parse_qsl(url.query, keep_blank_values=True)
        subs = sorted({k for k, v in params if v == "" or k in S3_SUBRESOURCE_PARAMS})
        return f"{self.command} {level}" + (f"?{'&'.join(subs)}" if subs else ""), False

    def reply(self, status: int, headers: Headers, body: bytes) -> None:
        self.send_response_only(status)
        for name, value in headers:
            self.send_header(name, value)
        has_length = any(n.lower() == "content-length" for n, _ in headers)
        if status >= 200 and status != 204 and not has_length:
            self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def drop(self) -> None:
        """Closes the client connection without a response: the client sees EOF."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)
        self.connection.close()

    def fault_reply(self, fault: str, query: bool) -> None:
        (status, kind, code, message), rid = ERRORS[fault, query], uuid.uuid4().hex
        xml = (f"<ErrorResponse><Error><Type>{kind}</Type><Code>{code}</Code><Message>{message}"
               f"</Message></Error><RequestId>{rid}</RequestId></ErrorResponse>" if query else
               f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
               f"<Message>{message}</Message><RequestId>{rid}</RequestId></Error>")
        headers = [("Content-Type", "text/xml" if query else "application/xml"),
                   ("x-amz-request-id", rid)]
        self.reply(status, headers, xml.encode())

    def forward(self, body: bytes) -> tuple[int, Headers, bytes]:
        named = {t.strip().lower() for t in self.headers.get("Connection", "").split(",")}
        headers = [(n, v) for n, v in self.headers.items()
                   if n.lower() not in HOP_BY_HOP | named and not n.lower().startswith("proxy-")]
        if body and not any(n.lower() == "content-length" for n, _ in headers):
            headers.append(("Content-Length", str(len(body))))  # the body came chunked
        reused, conn = self.conn is not None, self.conn
        conn, self.conn = conn or http.client.HTTPConnection(*self.upstream, timeout=120), None
        try:
            conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for name, value in headers:
                conn.putheader(name, value)
            conn.endheaders(body or None)
            resp = conn.getresponse()
            data = resp.read()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            if reused and isinstance(e, ConnectionError):
                return self.forward(body)  # upstream closed an idle keep-alive connection
            raise
        if resp.will_close:
            conn.close()
        else:
            self.conn = conn
        return resp.status, resp.getheaders(), data

    def control(self, body: bytes) -> None:
        path, status, error = urlsplit(self.path).path.rstrip("/"), 200, None
        if (self.command, path) == ("PUT", "/__faults"):
            try:
                error = self.state.update(json.loads(body or b"null"))
            except ValueError as e:
                error = f"invalid JSON: {e}"
            status = 400 if error else 200
        elif (self.command, path) == ("POST", "/__faults/reset"):
            self.state.reset()
        elif (self.command, path) != ("GET", "/__faults"):
            status, error = 404, f"no control endpoint {self.command} {path}"
        payload = {"error": error} if error else self.state.snapshot()
        self.reply(status, [("Content-Type", "application/json")], json.dumps(payload).encode())

    def handle_request(self) -> None:
        body = self.read_body()
        if self.path.startswith("/__faults"):
            return self.control(body)
        operation, query = self.operation(body)
        fault, delay = self.state.choose(operation)
        if fault == "drop_before":
            return self.drop()
        if fault in ("error5xx", "throttle", "quota"):
            return self.fault_reply(fault, query)
        time.sleep(delay)
        try:
            status, headers, data = self.forward(body)
        except (OSError, http.client.HTTPException) as e:
            self.log_message("upstream failed: %r", e)
            return self.reply(502, [("Content-Type", "text/plain")], f"upstream: {e}\n".encode())
        self.state.count_forwarded()
        if fault == "drop_after":
            return self.drop()
        keep_length = self.command == "HEAD" or status == 304  # HEAD: the length GET would have
        headers = [(n, v) for n, v in headers if n.lower() not in HOP_BY_HOP
                   and (keep_length or n.lower() != "content-length")]
        self.reply(status, headers, b"" if status in (204, 304) else data)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_PATCH = do_OPTIONS = handle_request


def is_loopback(host: str) -> bool:
    with contextlib.suppress(OSError, ValueError):
        return ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
    return False


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True
    verbose = False

    def handle_error(self, request: Any, client_address: Any) -> None:
        if self.verbose:
            super().handle_error(request, client_address)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--upstream", required=True, help="moto's URL, e.g. http://127.0.0.1:5000")
    parser.add_argument("--listen", default="127.0.0.1:0", help="loopback HOST:PORT")
    parser.add_argument("--seed", type=int, default=None, help="seed for the fault draws")
    parser.add_argument("--verbose", action="store_true", help="log requests and errors to stderr")
    args = parser.parse_args()
    upstream, (host, _, port) = urlsplit(args.upstream), args.listen.rpartition(":")
    if upstream.scheme != "http" or not is_loopback(upstream.hostname or ""):
        parser.error("--upstream must be http://LOOPBACK-HOST:PORT")
    if not is_loopback(host) or not port.isdigit():
        parser.error("--listen must be a loopback HOST:PORT")
    ProxyHandler.state = FaultState(args.seed)
    ProxyHandler.upstream = (upstream.hostname or "", upstream.port or 80)
    ProxyHandler.verbose = QuietServer.verbose = args.verbose
    server = QuietServer((host, int(port)), ProxyHandler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print("listening on %s:%d" % server.socket.getsockname()[:2], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
