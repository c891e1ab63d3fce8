#!/usr/bin/env python3
"""A NOTIFY_SOCKET for tests: binds a Unix datagram socket at PATH and
appends every sd_notify datagram it receives to LOG, one per line, prefixed
by the CLOCK_MONOTONIC time in seconds. Runs until killed (or SECONDS pass).

notify_listener.py PATH LOG [SECONDS]"""
import os
import socket
import sys
import time

path, log = sys.argv[1], sys.argv[2]
limit = float(sys.argv[3]) if len(sys.argv) > 3 else 600.0
try:
    os.unlink(path)
except FileNotFoundError:
    pass
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(path)
s.settimeout(0.5)
end = time.monotonic() + limit
with open(log, "a", buffering=1) as out:
    while time.monotonic() < end:
        try:
            data = s.recv(4096)
        except socket.timeout:
            continue
        for line in data.decode(errors="replace").splitlines():
            out.write(f"{time.monotonic():.3f} {line}\n")
