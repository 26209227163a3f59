#!/usr/bin/env python3
"""A mirror that is not on the same machine, as far as its clients can tell: serves a
directory over HTTP/1.1 on 127.0.0.1, each response held back by one round trip (--rtt-ms)
and its body paced at --mbps megabits per second, as a public mirror a few countries away
answers. The benchmarks use it where the real mirror cannot be reached (this machine reaches
only Debian's), so that what overlaps network waits shows; a local http.server answers in
microseconds and hides it.

    far_mirror.py DIR PORT --rtt-ms 50 --mbps 100

Each connection has its thread; a new connection costs one more round trip (TCP's handshake),
a request on a kept-alive one costs one. The access log goes to stderr in http.server's format.
"""
import argparse
import http.server
import os
import socketserver
import time


def handler(rtt, bytes_per_second):
    class Far(http.server.SimpleHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self):
            # The handshake of a new connection.
            time.sleep(rtt)
            super().setup()

        def send_head(self):
            # The request's way there and the first byte's way back.
            time.sleep(rtt)
            return super().send_head()

        def copyfile(self, source, outputfile):
            chunk = 64 << 10
            started = time.monotonic()
            sent = 0
            while True:
                data = source.read(chunk)
                if not data:
                    break
                outputfile.write(data)
                sent += len(data)
                ahead = sent / bytes_per_second - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)

    return Far


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dir")
    p.add_argument("port", type=int)
    p.add_argument("--rtt-ms", type=float, default=50)
    p.add_argument("--mbps", type=float, default=100)
    a = p.parse_args()
    os.chdir(a.dir)
    far = handler(a.rtt_ms / 1000, a.mbps * 1e6 / 8)
    Server(("127.0.0.1", a.port), far).serve_forever()


if __name__ == "__main__":
    main()
