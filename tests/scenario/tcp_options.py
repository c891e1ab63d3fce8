#!/usr/bin/env python3
"""TCP over IPv6 with a Destination Options header on every packet.

  tcp_options.py serve ADDR PORT BYTES SECONDS   accept one connection, read
                                                  BYTES, print their SHA-256
  tcp_options.py send ADDR PORT BYTES SECONDS    connect with IPV6_DSTOPTS set,
                                                  send BYTES of a fixed pattern,
                                                  print their SHA-256

The sender's kernel puts the header in every segment it makes, and in the
TSO super-packets it hands an offloading TUN; the tunnel must cut those
with the header copied into each datagram. Every wait is bounded by SECONDS.
"""
import hashlib
import socket
import sys

IPV6_DSTOPTS = getattr(socket, "IPV6_DSTOPTS", 59)  # <linux/in6.h>


def pattern(n):
    block = bytes(range(251)) * 64
    out = bytearray()
    while len(out) < n:
        out += block
    return bytes(out[:n])


def main():
    mode, addr, port, size, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
    if mode == "serve":
        srv = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind((addr, port))
        srv.listen(1)
        srv.settimeout(seconds)
        conn, _ = srv.accept()
        conn.settimeout(seconds)
        digest, got = hashlib.sha256(), 0
        while got < size:
            chunk = conn.recv(65536)
            if not chunk:
                break
            digest.update(chunk)
            got += len(chunk)
        print(got, digest.hexdigest())
        return 0 if got == size else 1
    sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    # Next Header (the kernel fills it in), length 0 (8 bytes), PadN over 6.
    sock.setsockopt(socket.IPPROTO_IPV6, IPV6_DSTOPTS, bytes([0, 0, 1, 4, 0, 0, 0, 0]))
    sock.settimeout(seconds)
    sock.connect((addr, port))
    data = pattern(size)
    sock.sendall(data)
    sock.shutdown(socket.SHUT_WR)
    print(size, hashlib.sha256(data).hexdigest())
    return 0


if __name__ == "__main__":
    sys.exit(main())
