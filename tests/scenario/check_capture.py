#!/usr/bin/env python3
"""Checks an ibfabricd capture two ways: tshark decodes it (no options) and
this script reads the pcap itself, recomputing every ICRC and VCRC with its
own code (zlib's CRC-32 with the variant fields masked, a bitwise CRC-16),
independent of the C++ implementation.

check_capture.py FILE --lid L --qpn Q [--lid L --qpn Q] --qkey K [--mlid M --mgid G]
Exit 0 when every frame's CRCs match and the expected traffic is there."""
import argparse
import ipaddress
import struct
import subprocess
import sys
import zlib


def _vcrc_table():
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0xD008 if c & 1 else c >> 1  # 0x100B reflected
        table.append(c)
    return table


VCRC_TABLE = _vcrc_table()


def crc16_vcrc(data: bytes) -> int:
    crc = 0xFFFF
    for byte in data:
        crc = VCRC_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFF


def icrc(packet: bytes) -> int:
    body = bytearray(packet[:-6])
    lnh = body[1] & 3
    if lnh == 3:  # global: whole LRH, GRH TClass/FlowLabel/HopLmt
        body[0:8] = b"\xff" * 8
        body[8] |= 0x0F
        body[9:12] = b"\xff\xff\xff"
        body[15] = 0xFF
        bth = 48
    else:
        body[0] |= 0xF0
        bth = 8
    body[bth + 4] = 0xFF
    return zlib.crc32(bytes(body)) & 0xFFFFFFFF


def read_pcap(path):
    with open(path, "rb") as f:
        data = f.read()
    magic, _, _, _, _, _, linktype = struct.unpack("<IHHiIII", data[:24])
    if magic != 0xA1B2C3D4 or linktype != 197:
        sys.exit(f"{path}: not a pcap of link type ERF (magic {magic:#x}, link type {linktype})")
    off, packets = 24, []
    while off < len(data):
        _, _, incl, _ = struct.unpack("<IIII", data[off:off + 16])
        rec = data[off + 16:off + 16 + incl]
        off += 16 + incl
        if rec[8] != 21:
            sys.exit(f"ERF record type {rec[8]}, expected 21 (InfiniBand)")
        packets.append(rec[16:])
    return packets


def tshark_fields(path):
    fields = ["infiniband.lrh.dlid", "infiniband.lrh.slid", "infiniband.bth.opcode", "infiniband.bth.destqp",
              "infiniband.deth.q_key", "infiniband.deth.srcqp", "infiniband.grh.dgid",
              "infiniband.invariant.crc", "infiniband.variant.crc"]
    cmd = ["tshark", "-n", "-r", path, "-T", "fields", "-E", "separator=|"]
    for f in fields:
        cmd += ["-e", f]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        cols = line.split("|")
        rows.append(dict(zip(["dlid", "slid", "opcode", "destqp", "qkey", "srcqp", "dgid", "icrc", "vcrc"], cols)))
    return rows


def check_sa_join(path, mgid, mlid):
    """tshark decodes the SA's MCMemberRecords in the capture: the join (a
    SubnAdmSet, method 0x02) with the MGID, JoinState FullMember and Q_Key
    0x1234, and the GetResp (0x81) with the MLID the SA gave."""
    fields = ["infiniband.mad.method", "infiniband.mcmemberrecord.mgid", "infiniband.mcmemberrecord.joinstate",
              "infiniband.mcmemberrecord.q_key", "infiniband.mcmemberrecord.mlid"]
    cmd = ["tshark", "-n", "-r", path, "-Y", "infiniband.mcmemberrecord.mgid", "-T", "fields", "-E", "separator=|",
           "-E", "occurrence=f"]
    for f in fields:
        cmd += ["-e", f]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    want = ipaddress.IPv6Address(mgid)
    saw_set = saw_resp = False
    for line in out.splitlines():
        method, g, join_state, qkey, got_mlid = (line.split("|") + [""] * 5)[:5]
        if not g or ipaddress.IPv6Address(g) != want:
            continue
        if num(method) == 0x02 and num(join_state) == 1 and num(qkey) == 0x1234:
            saw_set = True
        if num(method) == 0x81 and num(got_mlid) == mlid and num(join_state) == 1:
            saw_resp = True
    missing = []
    if not saw_set:
        missing.append(f"SA join (Set) of {mgid}, JoinState 1, Q_Key 0x1234, decoded by tshark")
    if not saw_resp:
        missing.append(f"SA GetResp for {mgid} with MLID {mlid:#x}, decoded by tshark")
    return missing


def num(text):
    return int(text, 0) if text else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("pcap")
    ap.add_argument("--lid", action="append", default=[])
    ap.add_argument("--qpn", action="append", default=[])
    ap.add_argument("--qkey", required=True)
    ap.add_argument("--mlid")
    ap.add_argument("--mgid")
    ap.add_argument("--forger-lid", help="frames from this LID are forged on purpose: not checked")
    ap.add_argument("--sa-join-mgid", help="an SA join for this MGID (Set, FullMember, Q_Key 0x1234) and its GetResp")
    ap.add_argument("--sa-join-mlid", help="the MLID the SA gave that group")
    a = ap.parse_args()

    packets = read_pcap(a.pcap)
    rows = tshark_fields(a.pcap)
    if len(packets) != len(rows):
        sys.exit(f"tshark decoded {len(rows)} frames, the file has {len(packets)}")
    if not packets:
        sys.exit("empty capture")
    bad = forged = 0
    seen = set()
    forger = int(a.forger_lid, 0) if a.forger_lid else None
    for i, (pkt, row) in enumerate(zip(packets, rows)):
        if len(pkt) < 26 or (forger is not None and struct.unpack(">H", pkt[6:8])[0] == forger):
            forged += 1  # too short to be a packet, or sent by the forger
            continue
        want_icrc, want_vcrc = icrc(pkt), crc16_vcrc(pkt[:-2])
        stored_icrc = struct.unpack("<I", pkt[-6:-2])[0]
        stored_vcrc = struct.unpack("<H", pkt[-2:])[0]
        # tshark shows the wire bytes as a big-endian number; ours are LSB first.
        shown_icrc = struct.unpack(">I", struct.pack("<I", want_icrc))[0]
        shown_vcrc = struct.unpack(">H", struct.pack("<H", want_vcrc))[0]
        # tshark 4.0 shows no CRC fields for some MADs (SA class): then
        # only the stored CRCs are checked against our recomputation.
        shown_ok = (not row["icrc"] and not row["vcrc"] and num(row["destqp"]) in (0, 1)) or \
            (num(row["icrc"]) == shown_icrc and num(row["vcrc"]) == shown_vcrc)
        if (stored_icrc, stored_vcrc) != (want_icrc, want_vcrc) or not shown_ok:
            bad += 1
            print(f"frame {i + 1}: ICRC stored {stored_icrc:#x} computed {want_icrc:#x} tshark {row['icrc']}; "
                  f"VCRC stored {stored_vcrc:#x} computed {want_vcrc:#x} tshark {row['vcrc']}")
        dlid, slid = struct.unpack(">HH", pkt[2:4] + pkt[6:8])
        if (num(row["dlid"]), num(row["slid"])) != (dlid, slid):
            bad += 1
            print(f"frame {i + 1}: tshark LIDs {row['dlid']}/{row['slid']} differ from the bytes {dlid}/{slid}")
        opcode, destqp, qkey, srcqp = num(row["opcode"]), num(row["destqp"]), num(row["qkey"]), num(row["srcqp"])
        if opcode == 0x64 and destqp == 0 and dlid == 0xFFFF:
            seen.add("dr_smp")
        if opcode == 0x64 and qkey == int(a.qkey, 0):
            seen.add(("ud", slid, srcqp, dlid, destqp))
            if a.mlid and dlid == int(a.mlid, 0):
                dgid = ipaddress.IPv6Address(row["dgid"]) if row["dgid"] else None
                if dgid == ipaddress.IPv6Address(a.mgid) and destqp == 0xFFFFFF:
                    seen.add("multicast")
    lids = [int(x, 0) for x in a.lid]
    qpns = [int(x, 0) for x in a.qpn]
    missing = []
    if "dr_smp" not in seen:
        missing.append("directed-route SMPs from the SM")
    if len(lids) == 2:
        for (l1, q1), (l2, q2) in [((lids[1], qpns[1]), (lids[0], qpns[0])), ((lids[0], qpns[0]), (lids[1], qpns[1]))]:
            if ("ud", l1, q1, l2, q2) not in seen:
                missing.append(f"UD from LID {l1:#x} QPN {q1:#x} to LID {l2:#x} QPN {q2:#x} with Q_Key {a.qkey}")
    if a.mlid and "multicast" not in seen:
        missing.append(f"multicast to MLID {a.mlid} DGID {a.mgid}")
    if a.sa_join_mgid:
        missing += check_sa_join(a.pcap, a.sa_join_mgid, int(a.sa_join_mlid, 0))
    for m in missing:
        print("missing:", m)
    print(f"check_capture: {len(packets)} frames ({forged} forged, not checked), {bad} bad, {len(missing)} missing")
    return 0 if bad == 0 and not missing else 1


if __name__ == "__main__":
    sys.exit(main())
