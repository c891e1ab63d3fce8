#!/usr/bin/env bash
# Operator errors get a clear message naming the option and value, and exit
# status 2 (1 for environment failures). No root or network needed.
#
# Usage: cli_errors.sh BIN_DIR
set -uo pipefail
BIN=$(cd "${1:?usage: cli_errors.sh BIN_DIR}" && pwd)
failures=0
passes=0

# expect STATUS PATTERN CMD...: CMD exits with STATUS and its stderr matches PATTERN.
expect() {
  local want=$1 pattern=$2
  shift 2
  local err rc
  err=$(timeout 10 "$@" 2>&1 >/dev/null)
  rc=$?
  if [ "$rc" -ne "$want" ] || ! grep -qE -- "$pattern" <<<"$err"; then
    echo "FAIL: $(printf '%q ' "$@")-> exit $rc (want $want), stderr: $(printf %q "$err")"
    failures=$((failures + 1))
  else
    echo "ok: $(printf '%q ' "$@")-> $err"
    passes=$((passes + 1))
  fi
}

expect 2 "--listen 'nonsense': expected ADDRESS:PORT" "$BIN/ibfabricd" --listen nonsense
expect 2 "'example.org' is not a numeric IPv4 or IPv6 address" "$BIN/ibfabricd" --listen example.org:1
expect 2 "bad port '99999'" "$BIN/ibfabricd" --listen 127.0.0.1:99999
expect 2 "--cut-through is yes or no, not 'maybe'" "$BIN/ibfabricd" --cut-through maybe
expect 2 "port 4791 is RoCEv2's" "$BIN/ibfabricd" --listen 127.0.0.1:4791
expect 2 "--mtu '1000': must be 256, 512, 1024, 2048 or 4096" "$BIN/ibfabricd" --mtu 1000
expect 2 "--lid '0x12=0': expected GUID=LID" "$BIN/ibfabricd" --lid 0x12=0
expect 2 "--mcast-group '0x10'" "$BIN/ibfabricd" --mcast-group 0x10
expect 2 "--sweep-interval: unknown unit 'parsecs'" "$BIN/ibfabricd" --sweep-interval 3parsecs
expect 2 "--ports 0: must be 1..254" "$BIN/ibfabricd" --ports 0
expect 2 "--switch-guid '0': expected a non-zero 64-bit GUID" "$BIN/ibfabricd" --switch-guid 0
expect 2 "--switch-guid 'leaf'" "$BIN/ibfabricd" --switch-guid leaf
expect 2 "--node-description '': expected 1 to 64 bytes of text" "$BIN/ibfabricd" --node-description ''
expect 2 "--node-description '.*': control character 0x1b at column 2" "$BIN/ibfabricd" --node-description $'a\x1bb'
expect 2 "--subnet-prefix 'fe80::1'" "$BIN/ibfabricd" --subnet-prefix fe80::1
expect 2 "/nonexistent/p.conf:0: cannot be read" "$BIN/ibfabricd" --partitions /nonexistent/p.conf
expect 2 "unrecognised option '--bogus'" "$BIN/ibfabricd" --bogus
expect 2 "--fault 'loss=150%': loss: must be between 0 and 100%" "$BIN/ibfabricd" --fault loss=150%
expect 2 "--link '3': expected PORT=HOST:UDPPORT, PORT 1..254" "$BIN/ibfabricd" --link 3
expect 2 "--link '3=nothere': expected ADDRESS:PORT" "$BIN/ibfabricd" --link 3=nothere
expect 2 "--link: inter-switch link on port 9: the switch has ports 1-8" "$BIN/ibfabricd" --ports 8 --link 9=127.0.0.1:4802
expect 2 "--link: port 3 has two inter-switch links" "$BIN/ibfabricd" --link 3=127.0.0.1:1 --link 3=127.0.0.1:2
expect 2 "--link: two inter-switch links to 127.0.0.1:1" "$BIN/ibfabricd" --link 3=127.0.0.1:1 --link 4=127.0.0.1:1
expect 2 "--m-key '0': expected random, file:PATH, none or a non-zero 64-bit number" "$BIN/ibfabricd" --m-key 0
expect 2 "--m-key-protect '4': must be 0, 1, 2 or 3" "$BIN/ibfabricd" --m-key-protect 4
expect 2 "--m-key-lease '70000': must be 0..65535 seconds" "$BIN/ibfabricd" --m-key-lease 70000
KEYDIR=$(mktemp -d)
printf '%064x\n' 7 >"$KEYDIR/open.key"
chmod 0644 "$KEYDIR/open.key"
expect 2 "key file $KEYDIR/open.key has mode 0644: others may read it" "$BIN/ibfabricd" --m-key "file:$KEYDIR/open.key"
printf 'not a key\n' >"$KEYDIR/bad.key"
chmod 0600 "$KEYDIR/bad.key"
expect 2 "key file $KEYDIR/bad.key: expected 64 hexadecimal digits" "$BIN/ibfabricd" --m-key "file:$KEYDIR/bad.key"
rm -rf "$KEYDIR"
TOPO=$(mktemp -d)
printf 'Switch 4 "s1"\n[1] "s2"[1]\n\nSwitch 4 "s2"\n' >"$TOPO/ok.net"
printf 'Switch 4 "s1"\n[9] "s2"[1]\n' >"$TOPO/bad.net"
expect 2 "--topology-switch needs --topology FILE" "$BIN/ibfabricd" --topology-switch s1
expect 2 "--switch-address needs --topology FILE" "$BIN/ibfabricd" --switch-address s1=127.0.0.1:1
expect 2 "--switch-address 's1': expected NAME=ADDR:PORT" "$BIN/ibfabricd" --topology "$TOPO/ok.net" --sm=no --switch-address s1
expect 2 "--routing 'ftree': must be minhop or updn" "$BIN/ibfabricd" --routing ftree
expect 2 "--updn-root 'x': expected a non-zero 64-bit GUID" "$BIN/ibfabricd" --routing updn --updn-root x
expect 2 "--ports cannot be given with --topology" "$BIN/ibfabricd" --topology "$TOPO/ok.net" --sm=no --ports 8
expect 2 "--link cannot be given with --topology" "$BIN/ibfabricd" --topology "$TOPO/ok.net" --sm=no --link 3=127.0.0.1:1
expect 2 "--topology: /nonexistent/f.net:0: cannot open the topology file" "$BIN/ibfabricd" --topology /nonexistent/f.net --sm=no
expect 2 "--topology: $TOPO/bad.net:2: \"s1\" has ports 1 to 4, not 9" "$BIN/ibfabricd" --topology "$TOPO/bad.net" --sm=no
expect 2 "--topology-switch s9: no switch \"s9\"" "$BIN/ibfabricd" --topology "$TOPO/ok.net" --sm=no --topology-switch s9
rm -rf "$TOPO"
expect 1 "could not open capture file /nonexistent-dir/x.pcap" "$BIN/ibfabricd" --listen 127.0.0.1:0 --pcap /nonexistent-dir/x.pcap
expect 2 "bad --size '5'" "$BIN/ibudping" --size 5 client --dest-lid 2 --dest-qpn 0x48
expect 2 "client needs --dest-lid and --dest-qpn" "$BIN/ibudping" client
expect 2 "say 'server' or 'client'" "$BIN/ibudping" serve
expect 2 "bad --fabric 'x'" "$BIN/ibudping" --fabric x server
expect 2 "--transport is soft or verbs" "$BIN/ibudping" --transport rdma server
expect 1 "could not open port" "$BIN/ibudping" --transport verbs --wait-active 1 server
expect 2 "client needs --connect ADDR:PORT" "$BIN/ibrcperf" client
expect 2 "--test is send, write, read, mixed or ud, not 'atomic'" "$BIN/ibrcperf" --test atomic client --connect 127.0.0.1:1
expect 2 "--retry-count is 0..7, not '9'" "$BIN/ibrcperf" --retry-count 9 server
expect 2 "--mtu is 256, 512, 1024, 2048 or 4096, not '1500'" "$BIN/ibrcperf" --mtu 1500 server
expect 2 "bad --size '4:2'" "$BIN/ibrcperf" --size 4:2 client --connect 127.0.0.1:1
expect 2 "say 'server' or 'client'" "$BIN/ibrcperf"

# ipoibd: configuration errors name file:line, key and value; exit 2.
CONF=$(mktemp -d /tmp/ipoibd-cli.XXXXXX)
trap 'rm -rf "$CONF"' EXIT
printf '[interface]\nmtu = 70000\n' >"$CONF/mtu.conf"
printf '[fabric]\ntransport = soft\n\n[interface]\nadress = 198.18.0.1/24\n' >"$CONF/typo.conf"
printf '[interface]\naddress = 198.18.0.300/24\n' >"$CONF/addr.conf"
printf '[bogus]\nkey = 1\n' >"$CONF/section.conf"
printf '[interface]\nname = ib0\n' >"$CONF/ok.conf"
printf '[neighbour]\nretrans%%invalid_line%%\n' >"$CONF/placeholder.conf"
expect 2 "$CONF/mtu.conf:2: \\[interface\\] mtu = 70000: must be between 576 and 65520" "$BIN/ipoibd" -c "$CONF/mtu.conf"
expect 2 "$CONF/typo.conf:5: .*adress.*did you mean address" "$BIN/ipoibd" -c "$CONF/typo.conf"
expect 2 "$CONF/addr.conf:2: \\[interface\\] address = 198.18.0.300/24" "$BIN/ipoibd" -c "$CONF/addr.conf"
expect 2 "$CONF/section.conf:1: .*bogus" "$BIN/ipoibd" -c "$CONF/section.conf"
expect 2 "cannot be read|No such file" "$BIN/ipoibd" -c "$CONF/absent.conf"
expect 2 "$CONF/placeholder.conf:2: retrans%invalid_line%: syntax error" "$BIN/ipoibd" -c "$CONF/placeholder.conf"
expect 2 "command line: --interface.mtu=1: " "$BIN/ipoibd" -c "$CONF/ok.conf" --interface.mtu=1
expect 2 "log-target.*expected auto, journal or stderr" "$BIN/ipoibd" -c "$CONF/ok.conf" --log-target=syslog
expect 2 "unrecognised option '--bogus'" "$BIN/ipoibctl" --bogus status
# Control characters and bytes that are not UTF-8 are quoted as \xNN, never
# written to the terminal raw.
printf '[interface]\nname = ib\033[2J\n' >"$CONF/escape.conf"
expect 2 "$CONF/escape.conf:2: control character 0x1b at column 10" "$BIN/ipoibd" -c "$CONF/escape.conf"
expect 2 "command line: --interface.name=a\\\\x1b\\[31m: the value has a control character 0x1b" \
  "$BIN/ipoibd" -c "$CONF/ok.conf" "--interface.name=a"$'\033'"[31m"
expect 2 "bad port '\\\\x01'" "$BIN/ibfabricd" --listen "127.0.0.1:"$'\001'
expect 2 "unrecognised option '--bogus\\\\x1b'" "$BIN/ipoibctl" "--bogus"$'\033'
expect 2 "unrecognised option '--bogus\\\\x1b'" "$BIN/ibfabricctl" "--bogus"$'\033'
# Boost fills its message templates until no placeholder is left: an
# argument holding one ("%canonical_option%") made the tools spin for ever.
for tool in ipoibctl ibfabricctl ibfabricd ibudping ibrcperf; do
  expect 2 "unrecognised option '--x%canonical_option%'" "$BIN/$tool" "--x%canonical_option%"
done
expect 2 "the argument \\('%value%'\\) for option '--count' is invalid" "$BIN/ibudping" --count "%value%"
expect 3 "ipoibd is not running \\(no control socket at $CONF/none.sock\\)" "$BIN/ipoibctl" -s "$CONF/none.sock" status

# ipoibctl -j prints an answer only once it is JSON: bytes from whatever
# listens on -s SOCKET never reach the terminal raw.
python3 - "$CONF/fake.sock" <<'PY' &
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
s.listen(1)
s.settimeout(10)
c, _ = s.accept()
c.recv(1024)
c.sendall(b"\x1b]0;pwned\x07\x1b[2J not JSON\n")
c.close()
PY
fake=$!
for _ in $(seq 50); do [ -S "$CONF/fake.sock" ] && break; sleep 0.1; done
out=$(timeout 10 "$BIN/ipoibctl" -j -s "$CONF/fake.sock" status 2>"$CONF/fake.err")
rc=$?
wait "$fake"
if [ "$rc" -ne 1 ] || [ -n "$out" ] || ! grep -q "the daemon's answer is not JSON" "$CONF/fake.err"; then
  echo "FAIL: ipoibctl -j on a non-JSON answer -> exit $rc, stdout: $(printf %q "$out"), stderr: $(cat "$CONF/fake.err")"
  failures=$((failures + 1))
else
  echo "ok: ipoibctl -j on a non-JSON answer -> exit 1, nothing on stdout"
  passes=$((passes + 1))
fi

echo "$passes passed, $failures failed"
[ "$failures" -eq 0 ]
