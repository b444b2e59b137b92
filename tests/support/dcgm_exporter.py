"""A fake dcgm-exporter on loopback: serves a /metrics body that tests change (status, delay,
redirect, a dripped, endless or chunked body) and counts requests, peers and bytes sent."""

import http.server
import threading
import time

GOOD = """# HELP DCGM_FI_PROF_GR_ENGINE_ACTIVE Ratio of time the graphics engine is active.
# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge
DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-a",GPU_I_PROFILE="1g.10gb",GPU_I_ID="7",Hostname="n"} 0.600000
DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-a",GPU_I_PROFILE="1g.10gb",GPU_I_ID="8",Hostname="n"} NaN
# HELP DCGM_FI_PROF_SM_ACTIVE The ratio of cycles an SM has at least 1 warp assigned.
# TYPE DCGM_FI_PROF_SM_ACTIVE gauge
DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-a",GPU_I_ID="8"} 0.2
DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-a",GPU_I_ID="7"} 0.9
DCGM_FI_PROF_SM_ACTIVE{gpu="1",UUID="GPU-b"} 0.5
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a"} 40
"""  # noqa: E501 - exposition lines as dcgm-exporter writes them; wrapping would change the body


class Exporter:
    def __init__(self, keep_alive: bool = False):
        self.body = GOOD.encode()
        self.delay = 0.0
        self.status = 200
        self.location = None             # sent as Location: (a redirect, with a 3xx status)
        self.drip_seconds = 0.0          # > 0: the body goes out one byte at a time
        self.endless = False             # the body never ends: 64 KiB blocks until refused
        self.chunked = False             # Transfer-Encoding: chunked, as Go's net/http sends
        self.sent = 0                    # body bytes written
        self.requests = 0
        self.peers = set()               # client (address, port): one per connection
        handler = self._handler()
        handler.protocol_version = "HTTP/1.1" if keep_alive else "HTTP/1.0"
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server.server_address[1]}/metrics"

    def _handler(self):
        exporter = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                exporter.requests += 1
                exporter.peers.add(self.client_address)
                time.sleep(exporter.delay)      # measures: a slow peer's answer
                self.send_response(exporter.status)
                self.send_header("Content-Type", "text/plain")
                if exporter.location:
                    self.send_header("Location", exporter.location)
                if exporter.chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    body = exporter.body
                    for i in range(0, len(body), 700):
                        piece = body[i:i + 700]
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                    self.wfile.write(b"0\r\n\r\n")
                    exporter.sent += len(body)
                    return
                if not exporter.drip_seconds and not exporter.endless:
                    self.send_header("Content-Length", str(len(exporter.body)))
                    self.end_headers()
                    self.wfile.write(exporter.body)
                    exporter.sent += len(exporter.body)
                    return
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                if exporter.endless:
                    block = b"# filler line, never an activity series\n" * 1600
                    try:
                        while True:
                            self.wfile.write(block)
                            exporter.sent += len(block)
                    except OSError:
                        return          # the client stopped reading and hung up

                for i in range(len(exporter.body)):
                    try:
                        self.wfile.write(exporter.body[i:i + 1])
                        self.wfile.flush()
                    except OSError:
                        return          # the client gave up
                    time.sleep(exporter.drip_seconds)   # measures: a slow peer's drip

            def log_message(self, *args):
                pass

        return Handler

    def close(self):
        self.server.shutdown()
        self.server.server_close()
