#!/usr/bin/env python3
"""Checks an ibfabricd capture of RC traffic between two QPs:

- tshark decodes every frame, none malformed at the InfiniBand layer, and
  its BTH (opcode, destination QP, PSN, AckReq), RETH and AETH fields agree
  with the bytes;
- every ICRC and VCRC is recomputed here with this script's own code
  (check_capture.py: zlib's CRC-32 with the variant fields masked, a bitwise
  CRC-16) and matches what is stored and what tshark shows;
- the traffic has what the test needs: SEND first/middle/last/only, RDMA
  WRITE first/middle/last with immediate and only with immediate, READ
  requests and responses first/middle/last/only, ACKs and NAKs (PSN
  sequence error), in the right direction between the two QPs.

tshark guesses what a payload carries (heuristic sub-dissectors: RPC over
RDMA, IPoIB's EtherType...). Our payloads are test patterns, so a guess can
fail: such frames are counted as "payload guessed" and are not errors when
the InfiniBand layer itself decoded whole. A frame tshark calls malformed in
the InfiniBand layer is an error.

check_rc_capture.py FILE --a LID:QPN --b LID:QPN     (a: requester, b: responder)
"""
import argparse
import os
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_capture import crc16_vcrc, icrc, num, read_pcap  # noqa: E402

FIELDS = ["frame.number", "_ws.malformed", "_ws.expert.message", "infiniband.lrh.dlid", "infiniband.lrh.slid",
          "infiniband.bth.opcode", "infiniband.bth.destqp", "infiniband.bth.psn", "infiniband.bth.a",
          "infiniband.reth.dmalen", "infiniband.aeth.syndrome", "infiniband.aeth.msn",
          "infiniband.invariant.crc", "infiniband.variant.crc"]
NAMES = ["frame", "malformed", "expert", "dlid", "slid", "opcode", "destqp", "psn", "ackreq", "dmalen", "syndrome",
         "msn", "icrc", "vcrc"]

RC_NAMES = {0x00: "SEND first", 0x01: "SEND middle", 0x02: "SEND last", 0x04: "SEND only",
            0x06: "WRITE first", 0x07: "WRITE middle", 0x09: "WRITE last with immediate",
            0x0B: "WRITE only with immediate", 0x0C: "READ request", 0x0D: "READ response first",
            0x0E: "READ response middle", 0x0F: "READ response last", 0x10: "READ response only", 0x11: "ACK"}
FROM_REQUESTER = {0x00, 0x01, 0x02, 0x04, 0x06, 0x07, 0x09, 0x0B, 0x0C}
FROM_RESPONDER = {0x0D, 0x0E, 0x0F, 0x10, 0x11}


def tshark_rows(path):
    cmd = ["tshark", "-n", "-r", path, "-T", "fields", "-E", "separator=|", "-E", "occurrence=f"]
    for f in FIELDS:
        cmd += ["-e", f]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return [dict(zip(NAMES, line.split("|"))) for line in out.splitlines()]


def lid_qpn(text):
    lid, qpn = text.split(":")
    return int(lid, 0), int(qpn, 0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("pcap")
    ap.add_argument("--a", required=True, type=lid_qpn, help="the requester's LID:QPN")
    ap.add_argument("--b", required=True, type=lid_qpn, help="the responder's LID:QPN")
    a = ap.parse_args()
    (lid_a, qpn_a), (lid_b, qpn_b) = a.a, a.b

    packets = read_pcap(a.pcap)
    rows = tshark_rows(a.pcap)
    if len(packets) != len(rows):
        sys.exit(f"tshark decoded {len(rows)} frames, the file has {len(packets)}")
    bad = guessed = rc_frames = 0
    seen = set()

    def problem(i, text):
        nonlocal bad
        bad += 1
        if bad <= 20:
            print(f"frame {i + 1}: {text}")

    for i, (pkt, row) in enumerate(zip(packets, rows)):
        payload_guess_failed = False
        if row["malformed"]:
            if "InfiniBand" in row["malformed"] or not row["opcode"]:
                problem(i, f"malformed in the InfiniBand layer: {row['malformed']}")
                continue
            guessed += 1
            payload_guess_failed = True  # tshark stopped before the CRCs: ours are still checked
        want_icrc, want_vcrc = icrc(pkt), crc16_vcrc(pkt[:-2])
        stored_icrc = struct.unpack("<I", pkt[-6:-2])[0]
        stored_vcrc = struct.unpack("<H", pkt[-2:])[0]
        shown_icrc = struct.unpack(">I", struct.pack("<I", want_icrc))[0]
        shown_vcrc = struct.unpack(">H", struct.pack("<H", want_vcrc))[0]
        if (stored_icrc, stored_vcrc) != (want_icrc, want_vcrc):
            problem(i, f"CRCs stored {stored_icrc:#x}/{stored_vcrc:#x}, computed {want_icrc:#x}/{want_vcrc:#x}")
        destqp = num(row["destqp"])
        if not payload_guess_failed and (destqp not in (0, 1) or row["icrc"] or row["vcrc"]):
            if (num(row["icrc"]), num(row["vcrc"])) != (shown_icrc, shown_vcrc):
                problem(i, f"tshark shows CRCs {row['icrc']}/{row['vcrc']}, computed {shown_icrc:#x}/{shown_vcrc:#x}")
        lnh = pkt[1] & 3
        bth = 8 + (40 if lnh == 3 else 0)
        opcode = pkt[bth]
        if opcode >> 5 != 0:  # not RC
            continue
        rc_frames += 1
        dlid, slid = struct.unpack(">HH", pkt[2:4] + pkt[6:8])
        b_destqp = int.from_bytes(pkt[bth + 5:bth + 8], "big")
        b_psn = int.from_bytes(pkt[bth + 9:bth + 12], "big")
        b_ackreq = pkt[bth + 8] >> 7
        if (num(row["opcode"]), destqp, num(row["psn"]), num(row["ackreq"])) != (opcode, b_destqp, b_psn, b_ackreq):
            problem(i, f"tshark BTH {row['opcode']}/{row['destqp']}/{row['psn']}/{row['ackreq']} differs from "
                       f"the bytes {opcode}/{b_destqp}/{b_psn}/{b_ackreq}")
        if (num(row["dlid"]), num(row["slid"])) != (dlid, slid):
            problem(i, f"tshark LIDs {row['dlid']}/{row['slid']} differ from the bytes {dlid}/{slid}")
        if opcode in (0x06, 0x0B, 0x0C):  # RETH
            if num(row["dmalen"]) != int.from_bytes(pkt[bth + 12 + 12:bth + 12 + 16], "big"):
                problem(i, f"tshark RETH DMA length {row['dmalen']} differs from the bytes")
        if opcode in (0x0D, 0x0F, 0x10, 0x11):  # AETH
            syndrome = pkt[bth + 12]
            msn = int.from_bytes(pkt[bth + 13:bth + 16], "big")
            if (num(row["syndrome"]), num(row["msn"])) != (syndrome, msn):
                problem(i, f"tshark AETH {row['syndrome']}/{row['msn']} differs from the bytes {syndrome}/{msn}")
            if opcode == 0x11 and syndrome >> 5 == 3:
                seen.add(("NAK", syndrome & 0x1F))
            if opcode == 0x11 and syndrome >> 5 == 0:
                seen.add(("ACK",))
        name = RC_NAMES.get(opcode)
        if name is None:
            problem(i, f"RC opcode {opcode:#x} this test does not send")
            continue
        want = ((lid_a, lid_b, qpn_b) if opcode in FROM_REQUESTER else (lid_b, lid_a, qpn_a))
        if (slid, dlid, b_destqp) != want:
            problem(i, f"{name} from LID {slid:#x} to LID {dlid:#x} QP {b_destqp:#x}, expected {want}")
        seen.add(name)
    missing = [n for n in RC_NAMES.values() if n not in seen]
    if ("NAK", 0) not in seen:
        missing.append("NAK PSN sequence error")
    for m in missing:
        print("missing:", m)
    print(f"check_rc_capture: {len(packets)} frames, {rc_frames} RC, {guessed} payload guessed by tshark, "
          f"{bad} bad, {len(missing)} missing")
    return 0 if bad == 0 and not missing and rc_frames > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
