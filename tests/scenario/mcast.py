#!/usr/bin/env python3
"""Multicast with real sockets, for scenario tests (bounded in time).

mcast.py recv GROUP PORT IFNAME SECONDS OUT   join GROUP on IFNAME, write each
                                               datagram received to OUT, leave
                                               after SECONDS (or a STOP file)
mcast.py send GROUP PORT IFNAME COUNT TEXT     send COUNT datagrams, 0.1 s apart"""
import os
import socket
import struct
import sys
import time


def family(group):
    return socket.AF_INET6 if ":" in group else socket.AF_INET


def recv(group, port, ifname, seconds, out):
    fam = family(group)
    s = socket.socket(fam, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("::" if fam == socket.AF_INET6 else "0.0.0.0", port))
    index = socket.if_nametoindex(ifname)
    if fam == socket.AF_INET:
        mreq = struct.pack("=4s4si", socket.inet_aton(group), socket.inet_aton("0.0.0.0"), index)
        s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreq)
    else:
        mreq = struct.pack("=16si", socket.inet_pton(socket.AF_INET6, group), index)
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_JOIN_GROUP, mreq)
    s.settimeout(0.2)
    end = time.monotonic() + seconds
    stop = out + ".stop"
    with open(out, "a", buffering=1) as f:
        f.write("joined\n")
        while time.monotonic() < end and not os.path.exists(stop):
            try:
                data, src = s.recvfrom(2048)
            except socket.timeout:
                continue
            f.write(f"{src[0]} {data.decode(errors='replace')}\n")
    s.close()  # leaves the group: the kernel sends the IGMP/MLD leave


def send(group, port, ifname, count, text):
    fam = family(group)
    s = socket.socket(fam, socket.SOCK_DGRAM)
    index = socket.if_nametoindex(ifname)
    if fam == socket.AF_INET:
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, struct.pack("=4s4si", b"\0" * 4, b"\0" * 4, index))
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 1)
    else:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_IF, index)
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, 1)
    for i in range(count):
        s.sendto(f"{text} {i}".encode(), (group, port))
        time.sleep(0.1)


if __name__ == "__main__":
    if sys.argv[1] == "recv":
        recv(sys.argv[2], int(sys.argv[3]), sys.argv[4], float(sys.argv[5]), sys.argv[6])
    else:
        send(sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]), sys.argv[6])
