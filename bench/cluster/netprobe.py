#!/usr/bin/python3
"""Latency and bandwidth probe between two bench/cluster namespaces.

  netprobe.py serve --bind IP [--port P] [--ready FILE]
      Accept connections until killed. A connection's first byte picks the
      test: b"L" echoes 64-byte messages (ping-pong), b"B" is a sink that
      reads until the sender closes, then answers one JSON line with what it
      received after a warm-up (receiver-side rate: the sender's socket
      buffers would otherwise count as sent).
  netprobe.py latency --connect IP:P [--count N]
  netprobe.py bulk --connect IP:P [--seconds S] [--warmup W] [--counter F]

Both clients print one JSON object on stdout. Python's standard library
only, so it runs wherever the script runs.
"""
import argparse
import json
import socket
import statistics
import sys
import threading
import time

MSG = 64


def recv_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("peer closed the connection")
        buf += chunk
    return bytes(buf)


def serve_one(conn, warmup):
    try:
        kind = recv_exact(conn, 1)
        if kind == b"L":
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while True:
                try:
                    msg = recv_exact(conn, MSG)
                except ConnectionError:
                    return
                conn.sendall(msg)
        elif kind == b"B":
            # The sender says how long to skip at the start (tbf's burst
            # and TCP's slow start), as one line of text.
            line = b""
            while not line.endswith(b"\n"):
                line += recv_exact(conn, 1)
            skip = float(line.decode())
            total = 0
            counted = 0
            t_first = None
            t_from = None
            t_last = None
            while True:
                chunk = conn.recv(1 << 20)
                now = time.monotonic()
                if not chunk:
                    break
                if t_first is None:
                    t_first = now
                total += len(chunk)
                if now - t_first >= skip:
                    if t_from is None:
                        t_from = now
                    else:
                        counted += len(chunk)
                    t_last = now
            seconds = (t_last - t_from) if t_from and t_last else 0.0
            res = {
                "bytes": total,
                "counted_bytes": counted,
                "seconds": seconds,
                "bps": 8.0 * counted / seconds if seconds > 0 else 0.0,
            }
            conn.sendall((json.dumps(res) + "\n").encode())
    except (ConnectionError, OSError, ValueError):
        pass
    finally:
        conn.close()


def serve(args):
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((args.bind, args.port))
    srv.listen(8)
    if args.ready:
        with open(args.ready, "w") as f:
            f.write("%s:%d\n" % srv.getsockname())
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=serve_one, args=(conn, 0), daemon=True).start()


def connect(ep):
    host, _, port = ep.rpartition(":")
    if not host or not port.isdigit():
        sys.exit("netprobe: --connect wants IP:PORT, not %r" % ep)
    return socket.create_connection((host, int(port)), timeout=30)


def latency(args):
    s = connect(args.connect)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(b"L")
    msg = b"x" * MSG
    rtts = []
    for i in range(args.count + 10):
        t = time.monotonic()
        s.sendall(msg)
        recv_exact(s, MSG)
        if i >= 10:  # the first round trips pay for cold caches
            rtts.append(time.monotonic() - t)
    s.close()
    rtt = statistics.median(rtts)
    print(json.dumps({"rtt_s": rtt, "latency_s": rtt / 2,
                      "rtt_min_s": min(rtts), "count": len(rtts),
                      "message_bytes": MSG}))


def read_counter(path):
    with open(path) as f:
        return int(f.read())


def bulk(args):
    s = connect(args.connect)
    s.sendall(b"B" + ("%g\n" % args.warmup).encode())
    buf = b"\0" * (1 << 16)
    start = time.monotonic()
    end = start + args.seconds + args.warmup
    sent = 0
    c0 = c1 = t0 = t1 = None
    while True:
        now = time.monotonic()
        if now >= end:
            break
        if args.counter and c0 is None and now - start >= args.warmup:
            c0, t0 = read_counter(args.counter), now
        s.sendall(buf)
        sent += len(buf)
    if c0 is not None:
        # Sampled while the sender still keeps the link busy, so the
        # counter's rate is the shaped rate on the wire (headers included).
        c1, t1 = read_counter(args.counter), time.monotonic()
    s.shutdown(socket.SHUT_WR)
    line = b""
    while not line.endswith(b"\n"):
        chunk = s.recv(4096)
        if not chunk:
            break
        line += chunk
    s.close()
    if not line:
        sys.exit("netprobe: the server sent no result")
    res = json.loads(line)
    res["sent_bytes"] = sent
    if c0 is not None and t1 > t0:
        res["wire_bps"] = 8.0 * (c1 - c0) / (t1 - t0)
        res["wire_seconds"] = t1 - t0
    print(json.dumps(res))


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    sv = sub.add_parser("serve")
    sv.add_argument("--bind", required=True)
    sv.add_argument("--port", type=int, default=0)
    sv.add_argument("--ready")
    la = sub.add_parser("latency")
    la.add_argument("--connect", required=True)
    la.add_argument("--count", type=int, default=200)
    bu = sub.add_parser("bulk")
    bu.add_argument("--connect", required=True)
    bu.add_argument("--seconds", type=float, default=2.0)
    bu.add_argument("--warmup", type=float, default=0.5)
    bu.add_argument("--counter",
                    help="a byte counter file (e.g. /sys/class/net/eth0/"
                    "statistics/tx_bytes) to sample after the warm-up and at "
                    "the end: wire_bps in the result")
    args = p.parse_args()
    {"serve": serve, "latency": latency, "bulk": bulk}[args.cmd](args)


if __name__ == "__main__":
    main()
