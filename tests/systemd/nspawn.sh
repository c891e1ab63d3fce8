#!/usr/bin/env bash
# The package under a real systemd: three Debian containers booted with
# systemd-nspawn, the .deb installed with dpkg, the shipped units driven
# with systemctl. The containers' network namespaces share one link, a
# bridge in a namespace of its own (the "switch"):
#
#   fab  ibfabricd.service, /etc/default/ibfabricd    underlay 198.18.100.100
#   a    ipoibd@ib0, /etc/ipoibd/ib0.conf: ib0 198.18.0.1 2001:db8::1 (198.18.100.1)
#        and its P_Key child ib0.8001 198.18.1.1 ([child ib0.8001])
#   b    ipoibd@ib0, /etc/ipoibd/ib0.conf: ib0 198.18.0.2 2001:db8::2 (198.18.100.2)
#        and ib0.8001 198.18.1.2
#   (ibfabricd's partitions put a and b in 0x8001 too)
#
# Checks, in order:
#  1. the installed units are the ones in systemd/ of this tree;
#  2. ibfabricd.service starts, is active, and survives a reload, which
#     re-reads its partitions file;
#  3. in a and b, `systemctl start ipoibd@ib0` returns only once the link is
#     up (Type=notify: ipoibctl says so right after), is-active says active;
#  4. ping and ping6 between a and b over ib0, ping over ib0.8001;
#  5. `journalctl -u ipoibd@ib0 -o json` holds the start (with the config
#     file), link-up and group-join MESSAGE_IDs with their IPOIB_*/IB_* fields,
#     ib0.8001's link-up with IPOIB_IFNAME=ib0.8001 and IB_PKEY=0x8001;
#  6. `systemctl reload` applies an address added to /etc/ipoibd/ib0.conf,
#     then removes the child (its device goes) and adds it back (it pings);
#  7. `systemctl kill -s KILL`: systemd restarts the daemon
#     (Restart=on-failure) and b reaches a again;
#  8. `systemctl stop`: the daemon logs leaving the broadcast group, the
#     port is gone from it (ibsaquery from the fabric container), and so is
#     ib0.
#
# Everything it starts is stopped on any exit: containers halted, their
# cgroups removed, namespaces deleted, /run/systemd/nspawn/propagate/NAME
# removed. Recipe and gotchas: shared/reference/systemd-in-ci.md; how to run
# it and what it costs: docs/systemd.md.
#
#   tests/systemd/nspawn.sh SOURCE_DIR
#
# IPOIBD_NSPAWN_DEB=FILE uses that .deb instead of packaging/build-deb.sh.
set -euo pipefail
SRC=$(cd "$1" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
. "$SRC/tests/scenario/lib.sh"
scenario_init systemd_nspawn
. "$HERE/nspawn_lib.sh"

for tool in systemd-nspawn debootstrap nsenter python3 flock; do
  command -v $tool >/dev/null || fail "$tool is missing (scripts/install-deps.sh installs it)"
done
T0=$SECONDS
step() { echo "[$((SECONDS - T0)) s] $*"; }

# --- the package and the root ----------------------------------------------------
if [ -n "${IPOIBD_NSPAWN_DEB:-}" ]; then
  DEB=$IPOIBD_NSPAWN_DEB
else
  step "packaging/build-deb.sh"
  DEB=$("$SRC/packaging/build-deb.sh" "$WORK/deb" 2>"$WORK/build-deb.log" | tail -n1) ||
    fail "packaging/build-deb.sh failed"
fi
[ -f "$DEB" ] || fail "no package at '$DEB'"
# The runtime Depends go into the root: the containers have no network.
mapfile -t depends < <(dpkg-deb -f "$DEB" Depends | tr ',' '\n' | sed 's/|.*//; s/(.*)//; s/[[:space:]]//g' | grep .)
step "root: bookworm + ${depends[*]}"
TARBALL=$(bash "$HERE/nspawn_root.sh" "${depends[@]}" 2>"$WORK/root.log" | tail -n1) ||
  { cat "$WORK/root.log" >&2; fail "no root (tests/systemd/nspawn_root.sh)"; }
ROOT=$WORK/root
mkdir "$ROOT"
tar -C "$ROOT" --numeric-owner --xattrs --xattrs-include='*' -xzf "$TARBALL"
cp "$DEB" "$ROOT/tmp/ipoibd.deb"
chroot "$ROOT" dpkg -i /tmp/ipoibd.deb >"$WORK/dpkg.log" 2>&1 || { cat "$WORK/dpkg.log" >&2; fail "dpkg -i"; }
rm "$ROOT/tmp/ipoibd.deb"

# --- 1. the units are the shipped ones ------------------------------------------------
for unit in ipoibd@.service ibfabricd.service; do
  cmp -s "$SRC/systemd/$unit" "$ROOT/usr/lib/systemd/system/$unit" ||
    fail "the package's $unit differs from systemd/$unit"
done
pass "dpkg -i $(basename "$DEB"); its units are systemd/ipoibd@.service and systemd/ibfabricd.service"

# --- the link and the containers ------------------------------------------------------------
FABRIC=198.18.100.100:18516
BCAST=ff12:401b:ffff::ffff:ffff
declare -A UNDERLAY=([fab]=198.18.100.100 [a]=198.18.100.1 [b]=198.18.100.2)
declare -A GUID=([a]=0x0002c90300b0000a [b]=0x0002c90300b0000b)
declare -A IDX=([a]=1 [b]=2)
sweep_stale_runs
SW=nsp$$sw
ip netns add "$SW"; NAMESPACES+=("$SW")
ip -n "$SW" link add br0 type bridge
ip -n "$SW" link set br0 up
for h in fab a b; do
  ns=nsp$$$h
  ip netns add "$ns"; NAMESPACES+=("$ns")
  ip link add "u$h$$" netns "$ns" type veth peer name "p$h$$" netns "$SW"
  ip -n "$SW" link set "p$h$$" master br0 up
  ip -n "$ns" addr add "${UNDERLAY[$h]}/24" dev "u$h$$"
  ip -n "$ns" link set "u$h$$" up
  # lo comes up when the container's systemd boots.
done

step "booting fab, a, b"
for h in fab a b; do container_boot "$h" "nsp$$$h"; done
for h in fab a b; do container_wait_running "$h" 60; done
step "booted"

# --- 2. ibfabricd.service ---------------------------------------------------------------
printf 'Default=0x7fff, ipoib : ALL=full ;\nP8001=0x8001, ipoib : %s=full, %s=full ;\n' "${GUID[a]}" "${GUID[b]}" |
  ctr_write fab /etc/ibfabricd/partitions.conf
echo "IBFABRICD_OPTIONS=\"--listen $FABRIC --partitions /etc/ibfabricd/partitions.conf\"" | ctr_write fab /etc/default/ibfabricd
ctr fab timeout 30 systemctl start ibfabricd.service || fail "systemctl start ibfabricd"
[ "$(ctr fab systemctl is-active ibfabricd.service)" = active ] || fail "ibfabricd.service is not active"
ctr fab timeout 30 systemctl reload ibfabricd.service || fail "systemctl reload ibfabricd (SIGHUP)"
[ "$(ctr fab systemctl is-active ibfabricd.service)" = active ] || fail "ibfabricd.service died on reload"
deadline=$((SECONDS + 10))
until reloaded=$(ctr fab journalctl -b -u ibfabricd --no-pager -o cat 2>/dev/null || true); grep -q "partitions reloaded" <<<"$reloaded"; do
  [ $SECONDS -lt $deadline ] || fail "systemctl reload ibfabricd did not re-read the partitions: $reloaded"
  sleep 0.2
done
pass "fab: ibfabricd.service active, options from /etc/default/ibfabricd; reload (SIGHUP) re-reads the partitions and keeps it"


# --- 3. ipoibd@ib0: start returns once the link is up ---------------------------------
write_config() {  # HOST [EXTRA_ADDRESS [CHILD: yes|no]]
  {
    printf '# written by tests/systemd/nspawn.sh\n[fabric]\ntransport = soft\n'
    printf 'address = %s\nport-guid = %s\n' "$FABRIC" "${GUID[$1]}"
    printf '[interface]\naddress = 198.18.0.%s/24\naddress = 2001:db8::%s/64\n' "${IDX[$1]}" "${IDX[$1]}"
    [ -z "${2:-}" ] || printf 'address = %s\n' "$2"
    printf '[daemon]\nlog-level = debug\n'
    [ "${3:-yes}" = no ] || printf '[child ib0.8001]\npkey = 0x8001\naddress = 198.18.1.%s/24\n' "${IDX[$1]}"
  } | ctr_write "$1" /etc/ipoibd/ib0.conf
}
child_up() {  # HOST SECONDS: ib0.8001's link is up
  local deadline=$((SECONDS + $2)) out
  while :; do
    out=$(ctr "$1" ipoibctl -i ib0 -I ib0.8001 -j status 2>/dev/null || true)
    grep -q '"link":"up"' <<<"$out" && return 0
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.2
  done
}
status_field() {  # HOST FIELD: from `ipoibctl -i ib0 -j status`
  ctr "$1" ipoibctl -i ib0 -j status | python3 -c "import json,sys; print(json.load(sys.stdin)['$2'])"
}
declare -A PORT_GID
for h in a b; do
  write_config $h
  ctr $h timeout 60 systemctl start ipoibd@ib0 || fail "$h: systemctl start ipoibd@ib0"
  [ "$(status_field $h link)" = up ] || fail "$h: systemctl start returned before the link was up"
  [ "$(ctr $h systemctl is-active ipoibd@ib0)" = active ] || fail "$h: ipoibd@ib0 is not active"
  PORT_GID[$h]=$(status_field $h gid)
done
pass "a, b: systemctl start ipoibd@ib0 returned with the link up (Type=notify), is-active: active"

# --- 4. ping and ping6 ---------------------------------------------------------------------
ping_ok() {  # FROM TO_ADDRESS SECONDS: one reply within SECONDS
  local deadline=$((SECONDS + $3))
  until ctr "$1" ping -c 1 -W 1 "$2" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.2
  done
}
for pair in "a b" "b a"; do
  read -r from to <<<"$pair"
  ctr $from ping -c 2 -i 0.2 -W 2 "198.18.0.${IDX[$to]}" >/dev/null || fail "ping $from -> $to"
  ctr $from ping -6 -c 2 -i 0.2 -W 2 "2001:db8::${IDX[$to]}" >/dev/null || fail "ping6 $from -> $to"
done
for h in a b; do child_up $h 20 || fail "$h: ib0.8001 not up"; done
ping_ok a 198.18.1.2 10 || fail "ping a -> b over ib0.8001"
ping_ok b 198.18.1.1 10 || fail "ping b -> a over ib0.8001"
pass "ping and ping6 between a and b over ib0, ping over their P_Key child ib0.8001"

# --- 5. journald --------------------------------------------------------------------------
journal_check() {  # HOST
  ctr "$1" journalctl -b -u ipoibd@ib0 -o json --no-pager >"$WORK/$1-journal.json" 2>/dev/null || true
  python3 - "$WORK/$1-journal.json" <<'PY'
import json, sys
entries = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ours = [e for e in entries if e.get("SYSLOG_IDENTIFIER") == "ipoibd"]
assert ours, "no ipoibd entries under -u ipoibd@ib0"
def one(message_id, fields):
    found = [e for e in ours if e.get("MESSAGE_ID") == message_id]
    assert found, f"no entry with MESSAGE_ID={message_id}"
    for f in fields:
        assert f in found[0], f"MESSAGE_ID={message_id} lacks {f}"
    return found[0]
# docs/journal.md's ids, with the fields tests/scenario/ipoibd_hosts.sh
# checks too.
up = one("e6679c3ea3fe4299bcf2506d6fa52b6e", ("IPOIB_IFNAME", "IB_MGID", "IB_QPN", "IB_GID", "IB_PKEY", "IPOIB_MTU"))
one("3ff5632345524794ad1af2e3ae2e654c", ("IPOIB_IFNAME", "IB_MGID", "IB_MLID"))
started = one("10144f72cd0944f39aef5ac09da7e6d1", ("IPOIB_VERSION", "IPOIB_CONFIG_FILE"))
assert started["IPOIB_CONFIG_FILE"] == "/etc/ipoibd/ib0.conf", started["IPOIB_CONFIG_FILE"]
assert up.get("_SYSTEMD_UNIT") == "ipoibd@ib0.service", up.get("_SYSTEMD_UNIT")
assert up.get("IPOIB_IFNAME") == "ib0"
child = [e for e in ours if e.get("MESSAGE_ID") == "e6679c3ea3fe4299bcf2506d6fa52b6e" and e.get("IPOIB_IFNAME") == "ib0.8001"]
assert child, "no link-up entry for ib0.8001"
assert child[0].get("IB_PKEY") == "0x8001", child[0].get("IB_PKEY")
assert child[0].get("_SYSTEMD_UNIT") == "ipoibd@ib0.service", child[0].get("_SYSTEMD_UNIT")
print(f"{len(ours)} entries; link up QPN {up['IB_QPN']}, ib0.8001's {child[0]['IB_QPN']}")
PY
}
for h in a b; do
  deadline=$((SECONDS + 5))
  until journal_check $h >"$WORK/$h-journal.txt" 2>&1; do
    [ $SECONDS -lt $deadline ] || { cat "$WORK/$h-journal.txt" >&2; fail "$h: journalctl -u ipoibd@ib0 -o json"; }
    sleep 0.3
  done
done
pass "journalctl -u ipoibd@ib0 -o json: start, link-up and group-join MESSAGE_IDs with IPOIB_*/IB_* fields"

# --- 6. reload -------------------------------------------------------------------------------
write_config a 198.18.0.11/24
ctr a timeout 30 systemctl reload ipoibd@ib0 || fail "systemctl reload ipoibd@ib0"
deadline=$((SECONDS + 10))
until ctr a ip addr show dev ib0 | grep -q "inet 198.18.0.11/24"; do
  [ $SECONDS -lt $deadline ] || fail "reload did not add 198.18.0.11 to a's ib0"
  sleep 0.2
done
ping_ok b 198.18.0.11 10 || fail "b cannot reach a's reloaded address 198.18.0.11"
[ "$(ctr a systemctl is-active ipoibd@ib0)" = active ] || fail "a: not active after reload"
pass "systemctl reload: 198.18.0.11 from the edited ib0.conf is on a's ib0, b reaches it"
write_config a 198.18.0.11/24 no
ctr a timeout 30 systemctl reload ipoibd@ib0 || fail "systemctl reload ipoibd@ib0 (child removed)"
deadline=$((SECONDS + 10))
while ctr a ip link show ib0.8001 >/dev/null 2>&1; do
  [ $SECONDS -lt $deadline ] || fail "reload did not remove a's ib0.8001"
  sleep 0.2
done
write_config a 198.18.0.11/24 yes
ctr a timeout 30 systemctl reload ipoibd@ib0 || fail "systemctl reload ipoibd@ib0 (child added)"
child_up a 20 || fail "a's ib0.8001 did not come back up after the reload added it"
ping_ok b 198.18.1.1 15 || fail "b cannot reach a's re-added ib0.8001"
pass "systemctl reload: a's ib0.8001 removed (device gone), added back (up, b reaches it)"

# --- 7. a killed daemon is restarted ------------------------------------------------------------
old_pid=$(ctr a systemctl show -P MainPID ipoibd@ib0)
ctr a systemctl kill -s KILL ipoibd@ib0
deadline=$((SECONDS + 30))
until [ "$(ctr a systemctl is-active ipoibd@ib0)" = active ] &&
      new_pid=$(ctr a systemctl show -P MainPID ipoibd@ib0) && [ "$new_pid" != 0 ] && [ "$new_pid" != "$old_pid" ]; do
  [ $SECONDS -lt $deadline ] || { ctr a systemctl status --no-pager ipoibd@ib0 >&2 || true; fail "a: not restarted after SIGKILL"; }
  sleep 0.2
done
[ "$(ctr a systemctl show -P NRestarts ipoibd@ib0)" -ge 1 ] || fail "a: NRestarts did not count the restart"
[ "$(status_field a link)" = up ] || fail "a: restarted service active before its link is up"
t_restart=$SECONDS
ping_ok b 198.18.0.1 15 || fail "b cannot reach a after its restart"
t4=$((SECONDS - t_restart))
ping_ok b 2001:db8::1 15 || fail "ping6 b -> a: not within 15 s of a's restart"
t6=$((SECONDS - t_restart))
ping_ok a 198.18.0.2 5 || fail "a cannot reach b after its restart"
ping_ok a 2001:db8::2 5 || fail "ping6 a -> b after a's restart"
pass "systemctl kill -s KILL: systemd restarted ipoibd (MainPID $old_pid -> $new_pid), ping after ${t4} s, ping6 after ${t6} s"

# Informational: the exposure systemd itself computes for the running units.
for unit in ipoibd@ib0.service ibfabricd.service; do
  host=a; [ $unit = ibfabricd.service ] && host=fab
  echo "info: systemd-analyze security $unit (running, in $host): $(ctr $host systemd-analyze security --no-pager "$unit" 2>/dev/null |
    sed -n 's/.*Overall exposure level for [^:]*: //p')"
done

# --- 8. stop leaves the groups and removes ib0 -------------------------------------------------
member_state() {  # PORT_GID: its JoinState in the broadcast group (0: not a member)
  ctr fab ibsaquery --fabric "$FABRIC" --guid 0x0002c90300b000ff -j members "$BCAST" 2>/dev/null |
    python3 -c "
import json, sys
state = 0
for line in sys.stdin:
    line = line.strip()
    if not line.startswith('{'): continue
    for r in json.loads(line).get('records') or []:
        if r.get('port_gid') == '$1': state |= r.get('join_state', 0)
print(state)"
}
for h in a b; do
  [ "$(member_state "${PORT_GID[$h]}")" != 0 ] || fail "$h (${PORT_GID[$h]}) is not in the broadcast group before stop"
  main_pid=$(ctr $h systemctl show -P MainPID ipoibd@ib0)
  ctr $h timeout 30 systemctl stop ipoibd@ib0 || fail "$h: systemctl stop"
  # The daemon left on SIGTERM itself (KillMode=mixed), not the SM after it.
  deadline=$((SECONDS + 5))
  until left=$(ctr $h journalctl -b -u ipoibd@ib0 --no-pager -o cat _PID="$main_pid" \
          MESSAGE_ID=e76c6dd85cca45b3a21a4210382defed IB_MGID="$BCAST" 2>/dev/null || true); [ -n "$left" ]; do
    [ $SECONDS -lt $deadline ] || fail "$h: no 'multicast group left' entry for the broadcast group after stop"
    sleep 0.2
  done
  [ "$(member_state "${PORT_GID[$h]}")" = 0 ] || fail "$h: still in the broadcast group after systemctl stop"
  ctr $h ip link show ib0 >/dev/null 2>&1 && fail "$h: ib0 outlived systemctl stop"
  ctr $h ip link show ib0.8001 >/dev/null 2>&1 && fail "$h: ib0.8001 outlived systemctl stop"
  state=$(ctr $h systemctl is-active ipoibd@ib0 || true)
  [ "$state" = inactive ] || fail "$h: ipoibd@ib0 is $state after stop, not inactive"
done
pass "systemctl stop: a and b left the broadcast group (ibsaquery), ib0 and ib0.8001 removed, inactive"

step "done"
