#!/usr/bin/env python3
"""Checks an ibfabricd capture of IPoIB connected mode (RFC 4755):

- tshark decodes every frame, none malformed at the InfiniBand layer;
- every ICRC and VCRC, recomputed here (check_capture.py's own code), is
  what is stored and what tshark shows;
- the connection manager's MADs are there and decoded (management class
  0x07: REQ, REP, RTU), every REQ for an IPoIB ServiceID (0x10000000 00
  followed by the destination's UD QPN, as Linux ipoib_cm) of one of the
  given UD QPNs;
- RC SEND packets carry IPoIB frames (EtherType IPv4 or IPv6, then zero)
  and tshark decodes IP inside; ACKs come back (AETH syndrome ACK).

check_cm_capture.py FILE --ud-qpn QPN [--ud-qpn QPN ...]
"""
import argparse
import os
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_capture import crc16_vcrc, icrc, num, read_pcap  # noqa: E402

FIELDS = ["frame.number", "_ws.malformed", "frame.protocols", "infiniband.bth.opcode", "infiniband.mad.mgmtclass",
          "infiniband.mad.attributeid", "infiniband.cm.req.serviceid", "infiniband.aeth.syndrome",
          "infiniband.invariant.crc", "infiniband.variant.crc"]
NAMES = ["frame", "malformed", "protocols", "opcode", "mgmtclass", "attribute", "serviceid", "syndrome", "icrc",
         "vcrc"]
CM = {0x10: "REQ", 0x11: "MRA", 0x12: "REJ", 0x13: "REP", 0x14: "RTU", 0x15: "DREQ", 0x16: "DREP"}
SENDS = {0x00, 0x01, 0x02, 0x03, 0x04, 0x05}


def tshark_rows(path):
    cmd = ["tshark", "-n", "-r", path, "-T", "fields", "-E", "separator=|", "-E", "occurrence=f"]
    for f in FIELDS:
        cmd += ["-e", f]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return [dict(zip(NAMES, line.split("|"))) for line in out.splitlines()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("pcap")
    ap.add_argument("--ud-qpn", action="append", default=[], type=lambda t: int(t, 0))
    a = ap.parse_args()
    packets = read_pcap(a.pcap)
    rows = tshark_rows(a.pcap)
    if len(packets) != len(rows):
        sys.exit(f"tshark decoded {len(rows)} frames, the file has {len(packets)}")
    bad = 0
    cm = {}
    sends = ip_sends = acks = 0

    def problem(i, text):
        nonlocal bad
        bad += 1
        if bad <= 20:
            print(f"frame {i + 1}: {text}")

    for i, (pkt, row) in enumerate(zip(packets, rows)):
        if row["malformed"] and ("InfiniBand" in row["malformed"] or not row["opcode"]):
            problem(i, f"malformed in the InfiniBand layer: {row['malformed']}")
            continue
        want_icrc, want_vcrc = icrc(pkt), crc16_vcrc(pkt[:-2])
        stored = (struct.unpack("<I", pkt[-6:-2])[0], struct.unpack("<H", pkt[-2:])[0])
        if stored != (want_icrc, want_vcrc):
            problem(i, f"CRCs stored {stored[0]:#x}/{stored[1]:#x}, computed {want_icrc:#x}/{want_vcrc:#x}")
        shown = (struct.unpack(">I", struct.pack("<I", want_icrc))[0], struct.unpack(">H", struct.pack("<H", want_vcrc))[0])
        if row["icrc"] and row["vcrc"] and (num(row["icrc"]), num(row["vcrc"])) != shown:
            problem(i, f"tshark shows CRCs {row['icrc']}/{row['vcrc']}, computed {shown[0]:#x}/{shown[1]:#x}")
        lnh = pkt[1] & 3
        bth = 8 + (40 if lnh == 3 else 0)
        opcode = pkt[bth]
        if row["mgmtclass"] and num(row["mgmtclass"]) == 7:
            name = CM.get(num(row["attribute"]), f"attribute {row['attribute']}")
            cm[name] = cm.get(name, 0) + 1
            if name == "REQ":
                sid = num(row["serviceid"])
                if sid >> 24 != 0x1000000000 or (a.ud_qpn and (sid & 0xFFFFFF) not in a.ud_qpn):
                    problem(i, f"REQ for ServiceID {sid:#x}, not an IPoIB one of {[hex(q) for q in a.ud_qpn]}")
            continue
        if opcode >> 5 != 0:  # not RC
            continue
        if opcode in SENDS:
            sends += 1
            if opcode in (0x00, 0x04):  # first or only: the IPoIB header leads
                payload = pkt[bth + 12:]
                ethertype, reserved = struct.unpack(">HH", payload[:4])
                if ethertype not in (0x0800, 0x86DD, 0x0806) or reserved != 0:
                    problem(i, f"RC SEND payload starts {payload[:4].hex()}, not an IPoIB header")
                elif opcode == 0x04 and ("ip" in row["protocols"].split(":") or "ipv6" in row["protocols"].split(":")):
                    ip_sends += 1
        elif opcode == 0x11 and pkt[bth + 12] >> 5 == 0:
            acks += 1
    missing = [m for m in ("REQ", "REP", "RTU") if m not in cm]
    if sends == 0:
        missing.append("RC SENDs")
    if ip_sends == 0:
        missing.append("RC SEND only packets tshark decodes as IP")
    if acks == 0:
        missing.append("ACKs")
    for m in missing:
        print("missing:", m)
    summary = ", ".join(f"{k} {v}" for k, v in sorted(cm.items()))
    print(f"check_cm_capture: {len(packets)} frames; CM {summary}; RC SENDs {sends} ({ip_sends} decoded as IP), "
          f"ACKs {acks}; CRCs recomputed; {bad} bad, {len(missing)} missing")
    return 0 if bad == 0 and not missing else 1


if __name__ == "__main__":
    sys.exit(main())
