/* fdlimit.c: fosd's file descriptor budget (see fdlimit.h): raising RLIMIT_NOFILE's soft limit to
 * the hard limit at start, and the caps of the descriptor consumers computed from it. The caps
 * are applied once, before anything that uses them starts; they do not change while fosd runs. */
#include "fdlimit.h"
#include "chan.h"
#include "log.h"
#include "server.h"
#include "shm.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

void fosd_fd_caps_compute(uint64_t limit, uint64_t open_now, int max_connections, int metrics_max_connections,
			  int http_on, fosd_fd_caps *out)
{
	memset(out, 0, sizeof *out);
	out->limit = limit;
	out->open = open_now;
	out->reserve = FOSD_FD_RESERVE_MIN + limit / 16;
	uint64_t avail = limit > open_now + out->reserve ? limit - open_now - out->reserve : 0;
	/* the HTTP endpoint: its setting, at most an eighth of the budget (and at least one) */
	uint64_t http = 0;
	if (http_on) {
		uint64_t share = avail / 8 ? avail / 8 : 1;
		http = min_u64(metrics_max_connections > 0 ? (uint64_t)metrics_max_connections : 1, share);
	}
	uint64_t rest = avail > http ? avail - http : 0;
	/* client connections and regions halve the rest; regions also get what a smaller explicit
	 * max_connections leaves */
	uint64_t share = rest / 2;
	uint64_t conns = max_connections > 0 ? (uint64_t)max_connections : share;
	if (conns < FOSD_FD_MIN_CONNECTIONS)
		conns = FOSD_FD_MIN_CONNECTIONS;
	if (conns > (1u << 20))
		conns = 1u << 20;
	uint64_t used = min_u64(conns, share);
	out->connections = (int)conns;
	out->http = (int)http;
	out->regions = min_u64(rest - used, FOSD_SHM_MAX_TOTAL);
	out->channels = (int)min_u64(out->regions, FOSD_CHAN_MAX_TOTAL);
	out->over_budget = conns + http + out->regions > avail;
}

long fosd_fd_count_open(void)
{
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return -1;
	long n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n > 0 ? n - 1 : 0; /* less the directory's own descriptor */
}

/* /proc/sys/fs/nr_open: the most a process's limit may be; 0 when unknown. */
static uint64_t nr_open(void)
{
	FILE *f = fopen("/proc/sys/fs/nr_open", "r");
	unsigned long long v = 0;
	if (f) {
		if (fscanf(f, "%llu", &v) != 1)
			v = 0;
		fclose(f);
	}
	return v;
}

static void limit_str(rlim_t v, char *out, size_t outsz)
{
	if (v == RLIM_INFINITY)
		snprintf(out, outsz, "unlimited");
	else
		snprintf(out, outsz, "%llu", (unsigned long long)v);
}

int fosd_fdlimit_setup(fosd_server *srv, char *msg, size_t msgsz)
{
	(void)msg;
	(void)msgsz;
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl)) {
		fosd_warn("descriptors: getrlimit(RLIMIT_NOFILE): %s; assuming 1024", strerror(errno));
		rl.rlim_cur = rl.rlim_max = 1024;
	}
	char soft_s[32], hard_s[32];
	limit_str(rl.rlim_cur, soft_s, sizeof soft_s);
	limit_str(rl.rlim_max, hard_s, sizeof hard_s);
	/* an unlimited hard limit (or one above the kernel's) can be reached only up to nr_open */
	uint64_t most = nr_open();
	rlim_t target = rl.rlim_max;
	if (most && (target == RLIM_INFINITY || (uint64_t)target > most))
		target = (rlim_t)most;
	uint64_t soft = rl.rlim_cur == RLIM_INFINITY ? (most ? most : 1u << 20) : (uint64_t)rl.rlim_cur;
	if (target != RLIM_INFINITY && (uint64_t)target > soft) {
		struct rlimit want = {target, rl.rlim_max};
		if (setrlimit(RLIMIT_NOFILE, &want) == 0) {
			fosd_info("descriptors: soft limit raised from %s to %llu (hard limit %s)", soft_s,
				  (unsigned long long)target, hard_s);
			soft = (uint64_t)target;
		} else {
			fosd_warn("descriptors: cannot raise the soft limit %s to the hard limit %s: %s", soft_s, hard_s,
				  strerror(errno));
		}
	} else {
		fosd_info("descriptors: soft limit %s, hard limit %s (already at the most)", soft_s, hard_s);
	}

	fosd_config *cfg = srv->cfg;
	long open_now = fosd_fd_count_open();
	fosd_fd_caps c;
	fosd_fd_caps_compute(soft, open_now >= 0 ? (uint64_t)open_now : 16, cfg->max_connections,
			     cfg->metrics_max_connections, cfg->metrics_listen != NULL, &c);
	const int conns_set = cfg->max_connections > 0;
	cfg->max_connections = c.connections;
	if (cfg->metrics_listen) {
		if (cfg->metrics_max_connections > c.http)
			fosd_warn("descriptors: metrics_max_connections %d lowered to %d, the HTTP endpoint's share of "
				  "the descriptor limit", cfg->metrics_max_connections, c.http);
		cfg->metrics_max_connections = c.http;
	}
	srv->regions.max_total = c.regions;
	srv->chans.max_total = c.channels;
	char http_s[48];
	if (cfg->metrics_listen)
		snprintf(http_s, sizeof http_s, "%d HTTP endpoint connections", c.http);
	else
		snprintf(http_s, sizeof http_s, "no HTTP endpoint");
	fosd_info("descriptors: limit %llu, %llu open, %llu kept in reserve; caps: %d client connections (%s), %s, "
		  "%llu shm regions in all (%d per connection), %d request channels",
		  (unsigned long long)c.limit, (unsigned long long)c.open, (unsigned long long)c.reserve,
		  c.connections, conns_set ? "max_connections" : "auto", http_s, (unsigned long long)c.regions,
		  FOSD_SHM_MAX_PER_PIPE, c.channels);
	if (c.over_budget && conns_set)
		fosd_warn("descriptors: max_connections %d is more than the descriptor limit leaves for connections: "
			  "fosd may run out of descriptors (raise LimitNOFILE / ulimit -n)", c.connections);
	else if (c.over_budget)
		fosd_warn("descriptors: the limit %llu is too low for fosd's reserve and caps: fosd may run out of "
			  "descriptors (raise LimitNOFILE / ulimit -n)", (unsigned long long)c.limit);
	return 0;
}
