#!/usr/bin/env python3
"""Compares the SA answers of OpenSM and ibfabricd to the same request list.

Usage: compare.py OPENSM.jsonl IBFABRICD.jsonl

Each input holds one JSON object per request, as `ibsaquery -j batch`
prints them, in the order of tests/opensm/compare-requests.txt. For every
request the MAD status, the response method, the AttributeOffset and every
field of every record must agree, except the differences listed in ALLOWED
below, each with the reason it is not a disagreement between the two SAs.

Prints one block per request and a summary; exit 0 when nothing disagrees,
1 otherwise, 2 on bad input.
"""
import json
import sys

IPOIB_SIGNATURES = ("401b", "601b")

# ibsim's links are 4x SDR, 10 Gb/s (rate code 3); the soft fabric's ports
# report 4x QDR, 40 Gb/s (code 7; transport/sma.h). Both SAs give a path
# the rate of its slowest link and a new group the rate of the creating
# port, so those rates follow the simulated hardware, not the SA.
IBSIM_LINK_RATE = 3
SOFT_LINK_RATE = 7


def is_ipoib_mgid(mgid):
    parts = mgid.split(":")
    return len(parts) > 1 and parts[0] == "ff12" and parts[1] in IPOIB_SIGNATURES


def rate_follows_links(ctx, field, ours, theirs):
    if field != "rate" or theirs != IBSIM_LINK_RATE or ours != SOFT_LINK_RATE:
        return False
    if ctx["kind"] == "path":
        return True
    # Groups created by this test outside IPoIB: their rate is the creating
    # port's (IPoIB groups take the broadcast group's, which both set to
    # 10 Gb/s, so they are compared).
    return ctx["kind"] == "mcmr" and not is_ipoib_mgid(ctx["theirs_record"].get("mgid", ""))


def sa_named_mgid(ctx, field, ours, theirs):
    # A join with MGID 0 lets the SA name the group; IBA leaves the form of
    # the name to the SA beyond the 0xA01B signature. OpenSM writes the
    # subnet prefix at bytes 4-11 with a counter over bytes 10-13
    # (ff12:a01b:fe80::); ibfabricd writes the P_Key and a counter
    # (ff12:a01b:ffff::1). Both must carry the signature and link-local
    # scope.
    return (field == "mgid" and ctx["request"].split()[1] == "::"
            and str(ours).startswith("ff12:a01b:") and str(theirs).startswith("ff12:a01b:"))


def inform_info_offset(ctx, field, ours, theirs):
    # OpenSM computes AttributeOffset as the record's size in 8-byte words
    # rounded down: 4 (32 bytes) for the 36-byte InformInfo, which would cut
    # it; IBA 15.2.1.1 pads a record to whole words (5). Only a table's
    # stride depends on it, and InformInfo comes one record at a time.
    return field == "attribute_offset" and ctx["attribute"] == "InformInfo" and theirs == 4 and ours == 5


ALLOWED = [
    (rate_follows_links, "rates follow the links: ibsim's are 4x SDR (10 Gb/s), "
                         "the soft fabric's 4x QDR (40 Gb/s)"),
    (sa_named_mgid, "an SA-named MGID: only the 0xA01B signature and the scope are the spec's"),
    (inform_info_offset, "OpenSM rounds InformInfo's AttributeOffset down (36 bytes: 4 words), IBA pads (5)"),
]

HEADER_FIELDS = ("status", "response_method", "attribute_offset")


def load(path):
    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as e:
                sys.exit(f"compare: {path}:{n}: not JSON: {e}")
    return out


def status_words(r):
    if r.get("failure"):
        return "no answer (" + r["failure"] + ")"
    return r.get("status_text", "?")


class Tally:
    def __init__(self):
        self.compared = self.agree = self.allowed = 0
        self.disagreements = []
        self.allowances = {}

    def field(self, req_no, ctx, name, theirs, ours, lines):
        self.compared += 1
        if theirs == ours:
            self.agree += 1
            return
        for predicate, reason in ALLOWED:
            if predicate(ctx, name, ours, theirs):
                self.allowed += 1
                self.allowances[reason] = self.allowances.get(reason, 0) + 1
                lines.append(f"      allowed  {ctx['where']}{name}: OpenSM {theirs!r}, ibfabricd {ours!r} ({reason})")
                return
        self.disagreements.append((req_no, ctx["request"], ctx["where"] + name, theirs, ours))
        lines.append(f"      DISAGREE {ctx['where']}{name}: OpenSM {theirs!r}, ibfabricd {ours!r}")


def compare_request(no, theirs, ours, tally):
    request = theirs.get("request", "?")
    lines = [f"{no:3} {request}"]
    if ours.get("request") != request:
        sys.exit(f"compare: result {no} answers '{ours.get('request')}' on the ibfabricd side, "
                 f"'{request}' on the OpenSM side: the runs did not use the same list")
    ctx = {"request": request, "attribute": theirs.get("attribute"), "kind": "", "where": "", "theirs_record": {}}
    for name in HEADER_FIELDS:
        tally.field(no, ctx, name, theirs.get(name), ours.get(name), lines)
    trecs, orecs = theirs.get("records", []), ours.get("records", [])
    kind = "path" if theirs.get("attribute") == "PathRecord" else "mcmr"
    if theirs.get("truncated"):
        # libumad2sim carries only the first 224 bytes of a MAD and no RMPP:
        # OpenSM's table arrives cut after its last whole record.
        lines.append(f"      note     OpenSM's table cut by libumad2sim after {len(trecs)} records; "
                     f"comparing those of ibfabricd's {len(orecs)}")
        orecs = orecs[:len(trecs)]
    ctx_count = dict(ctx, where="")
    tally.field(no, ctx_count, "record count", len(trecs), len(orecs), lines)
    for i, (t, o) in enumerate(zip(trecs, orecs)):
        rctx = dict(ctx, kind=kind, where=f"record {i + 1} " if len(trecs) > 1 else "", theirs_record=t)
        for name in t:
            tally.field(no, rctx, name, t.get(name), o.get(name), lines)
    n_rec = len(trecs)
    if len(lines) == 1:
        lines.append(f"      agree    {status_words(theirs)}, {theirs.get('response_method', '-')}, "
                     f"{n_rec} record{'s' if n_rec != 1 else ''}")
    else:
        lines.insert(1, f"      status   OpenSM {status_words(theirs)}; ibfabricd {status_words(ours)}")
    print("\n".join(lines))


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    theirs_all, ours_all = load(sys.argv[1]), load(sys.argv[2])
    if len(theirs_all) != len(ours_all) or not theirs_all:
        print(f"compare: {len(theirs_all)} OpenSM results, {len(ours_all)} ibfabricd results", file=sys.stderr)
        return 2
    tally = Tally()
    for no, (t, o) in enumerate(zip(theirs_all, ours_all), 1):
        compare_request(no, t, o, tally)
    statuses = sum(1 for t, o in zip(theirs_all, ours_all) if t.get("status") == o.get("status"))
    print(f"\nsummary: {len(theirs_all)} requests, status codes agree on {statuses}; "
          f"{tally.compared} fields compared: {tally.agree} agree, {tally.allowed} allowed to differ, "
          f"{len(tally.disagreements)} disagree")
    for reason, n in tally.allowances.items():
        print(f"  allowed ({n}): {reason}")
    if tally.disagreements:
        print("disagreements (request: field: OpenSM vs ibfabricd):")
        for no, request, where, theirs, ours in tally.disagreements:
            print(f"  {no:3} {request}: {where}: {theirs!r} vs {ours!r}")
        return 1
    print("compare: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
