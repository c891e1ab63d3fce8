/*
 * umad_probe: one SA MCMemberRecord request through libibumad, the path
 * ipoibd's SA client takes on real HCAs. Under the harness (sim-run.sh) it
 * runs on a simulated CA via libumad2sim. Prints the port, the fd facts
 * (poll/epoll), the response header and the record, as key=value lines.
 *
 *   umad_probe [-C ca] [-P port] [-m get|join|leave] [-g MGID] [-t ms] [-H s]
 *     -m get    SubnAdmGet(MCMemberRecord), component mask MGID (default)
 *     -m join   SubnAdmSet, MGID|PortGID|JoinState, JoinState FullMember
 *     -m leave  SubnAdmDelete, same components
 *     -g MGID   default ff12:401b:ffff::ffff:ffff (IPoIB broadcast, P_Key 0xffff)
 *     -t ms     how long to wait for the response (default 2000)
 *     -H s      sleep s seconds after the response (to test killed clients)
 * Exit: 0 response with MAD status 0, 2 response with another status,
 *       3 no response in time, 1 setup error.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/umad.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

enum { MAD_SIZE = 256, SA_DATA = 56, MCMR_SIZE = 52 };

static void put16(uint8_t *p, uint16_t v) { p[0] = v >> 8; p[1] = v; }
static void put32(uint8_t *p, uint32_t v) { put16(p, v >> 16); put16(p + 2, v); }
static void put64(uint8_t *p, uint64_t v) { put32(p, v >> 32); put32(p + 4, v); }
static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static uint32_t get32(const uint8_t *p) { return (uint32_t)get16(p) << 16 | get16(p + 2); }
static uint64_t get64(const uint8_t *p) { return (uint64_t)get32(p) << 32 | get32(p + 4); }

static const char *gid_str(const uint8_t *g, char *buf)
{
	return inet_ntop(AF_INET6, g, buf, INET6_ADDRSTRLEN);
}

/* SA MAD status (IBA 15.2.1.1 and 13.4.7): bits 8..15 class specific. */
static const char *status_str(uint16_t st)
{
	static const char *sa[] = { "", "no resources", "request invalid",
		"no records", "too many records", "invalid GID",
		"insufficient components", "denied" };
	if (st == 0)
		return "success";
	if (st & 0x1c)
		return (st & 0x1c) == 0x04 ? "bad class version" :
		       (st & 0x1c) == 0x08 ? "method not supported" :
		       (st & 0x1c) == 0x0c ? "method/attribute not supported" :
					     "invalid attribute or modifier";
	if ((st >> 8) < sizeof(sa) / sizeof(sa[0]))
		return sa[st >> 8];
	return "other";
}

int main(int argc, char **argv)
{
	const char *ca = NULL, *mode = "get",
		   *mgid_s = "ff12:401b:ffff::ffff:ffff";
	int portnum = 0, timeout_ms = 2000, hold = 0, opt;
	while ((opt = getopt(argc, argv, "C:P:m:g:t:H:")) != -1) {
		switch (opt) {
		case 'C': ca = optarg; break;
		case 'P': portnum = atoi(optarg); break;
		case 'm': mode = optarg; break;
		case 'g': mgid_s = optarg; break;
		case 't': timeout_ms = atoi(optarg); break;
		case 'H': hold = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: %s [-C ca] [-P port] [-m get|join|leave] [-g mgid] [-t ms] [-H s]\n", argv[0]);
			return 1;
		}
	}
	uint8_t method = !strcmp(mode, "get") ? 0x01 : !strcmp(mode, "join") ? 0x02 :
			 !strcmp(mode, "leave") ? 0x15 : 0;
	uint8_t mgid[16];
	if (!method || inet_pton(AF_INET6, mgid_s, mgid) != 1) {
		fprintf(stderr, "umad_probe: bad -m or -g\n");
		return 1;
	}

	/* The first sysfs access (here) is when libumad2sim connects to ibsim
	 * and snapshots the port: LID, SM LID, state. */
	if (umad_init() < 0) {
		fprintf(stderr, "umad_probe: umad_init failed\n");
		return 1;
	}
	umad_port_t port;
	int r = umad_get_port(ca, portnum, &port);
	if (r < 0) {
		fprintf(stderr, "umad_probe: umad_get_port: %s\n", strerror(-r));
		return 1;
	}
	uint8_t port_gid[16];
	memcpy(port_gid, &port.gid_prefix, 8);
	memcpy(port_gid + 8, &port.port_guid, 8);
	char g1[INET6_ADDRSTRLEN], g2[INET6_ADDRSTRLEN];
	printf("port: ca=%s port=%d lid=%u sm_lid=%u sm_sl=%u state=%u gid=%s\n",
	       port.ca_name, port.portnum, port.base_lid, port.sm_lid,
	       port.sm_sl, port.state, gid_str(port_gid, g1));

	int fd = umad_open_port(port.ca_name, port.portnum);
	if (fd < 0) {
		fprintf(stderr, "umad_probe: umad_open_port: %s\n", strerror(-fd));
		return 1;
	}
	/* class 0x03 (SubnAdm), version 2, RMPP version 1, no method mask:
	 * a client only gets responses to its own requests. */
	int agent = umad_register(fd, 0x03, 2, 1, NULL);
	if (agent < 0) {
		fprintf(stderr, "umad_probe: umad_register failed\n");
		return 1;
	}
	int ep = epoll_create1(0);
	struct epoll_event ev = { .events = EPOLLIN };
	int ep_rc = epoll_ctl(ep, EPOLL_CTL_ADD, umad_get_fd(fd), &ev);
	printf("fd: fd=%d agent=%d epoll_ctl=%s\n", umad_get_fd(fd), agent,
	       ep_rc == 0 ? "ok" : strerror(errno));
	close(ep);

	uint8_t *req = calloc(1, umad_size() + MAD_SIZE);
	uint8_t *resp = calloc(1, umad_size() + MAD_SIZE);
	uint8_t *mad = umad_get_mad(req);
	uint32_t tid = (uint32_t)getpid() << 16 ^ (uint32_t)time(NULL);
	mad[0] = 1;			/* BaseVersion */
	mad[1] = 0x03;			/* MgmtClass SubnAdm */
	mad[2] = 2;			/* ClassVersion */
	mad[3] = method;
	put64(mad + 8, tid);		/* upper 32 bits belong to the kernel/sim */
	put16(mad + 16, 0x0038);	/* MCMemberRecord */
	/* RMPP header 24..35 zero; SA header: SM_Key 36..43 = 0 (untrusted),
	 * AttributeOffset 44 = 0 in requests. */
	uint64_t comp = 1u << 0;	/* MGID */
	uint8_t *rec = mad + SA_DATA;
	memcpy(rec, mgid, 16);
	if (method != 0x01) {
		comp |= 1u << 1 | 1u << 16;	/* PortGID, JoinState */
		memcpy(rec + 16, port_gid, 16);
		rec[48] = 0x01;			/* JoinState FullMember */
	}
	put64(mad + 48, comp);
	umad_set_addr(req, port.sm_lid, 1, port.sm_sl, 0x80010000);
	if (umad_send(fd, agent, req, MAD_SIZE, timeout_ms, 0) < 0) {
		fprintf(stderr, "umad_probe: umad_send failed: %m\n");
		return 1;
	}
	printf("sent: method=0x%02x attr=0x0038 comp_mask=0x%016llx tid=0x%016llx mgid=%s\n",
	       method, (unsigned long long)comp, (unsigned long long)tid, gid_str(mgid, g1));

	/* Our own timeout: libumad2sim never produces the kernel's timeout
	 * completions. poll() works on this one fd (libumad2sim wraps poll). */
	struct timespec t0, now;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		clock_gettime(CLOCK_MONOTONIC, &now);
		int left = timeout_ms - (int)((now.tv_sec - t0.tv_sec) * 1000 +
					      (now.tv_nsec - t0.tv_nsec) / 1000000);
		if (left <= 0) {
			printf("recv: timeout after %d ms\n", timeout_ms);
			return 3;
		}
		struct pollfd pfd = { .fd = umad_get_fd(fd), .events = POLLIN };
		if (poll(&pfd, 1, left) <= 0 || !(pfd.revents & POLLIN))
			continue;
		int len = MAD_SIZE;
		r = umad_recv(fd, resp, &len, 0);
		if (r < 0)
			continue;	/* -EWOULDBLOCK: nothing queued after all */
		const uint8_t *m = umad_get_mad(resp);
		uint64_t rtid = get64(m + 8);
		if ((uint32_t)rtid != tid) {
			printf("recv: ignoring tid 0x%016llx\n", (unsigned long long)rtid);
			continue;
		}
		uint16_t st = get16(m + 4);
		printf("recv: agent=%d umad_status=%d length=%d method=0x%02x status=0x%04x (%s) tid=0x%016llx attr_offset=%u\n",
		       r, umad_status(resp), len, m[3], st, status_str(st),
		       (unsigned long long)rtid, get16(m + 44));
		const uint8_t *p = m + SA_DATA;
		printf("record:");
		for (int i = 0; i < MCMR_SIZE; i++)
			printf("%s%02x", i % 16 ? " " : "\n  ", p[i]);
		printf("\n");
		printf("mcmr: mgid=%s port_gid=%s qkey=0x%08x mlid=0x%04x mtu=0x%02x tclass=0x%02x pkey=0x%04x rate=0x%02x pkt_life=0x%02x sl=%u flow_label=0x%05x hop_limit=%u scope=%u join_state=0x%x proxy_join=%u\n",
		       gid_str(p, g1), gid_str(p + 16, g2), get32(p + 32),
		       get16(p + 36), p[38], p[39], get16(p + 40), p[42], p[43],
		       get32(p + 44) >> 28, get32(p + 44) >> 8 & 0xfffff,
		       p[47], p[48] >> 4, p[48] & 0xf, p[49] >> 7);
		fflush(stdout);
		if (hold)
			sleep(hold);
		umad_unregister(fd, agent);
		umad_close_port(fd);
		umad_release_port(&port);
		free(req);
		free(resp);
		return st == 0 ? 0 : 2;
	}
}
