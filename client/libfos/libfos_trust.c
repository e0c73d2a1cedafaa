/* libfos_trust.c: what libfos adds for trust and recovery: dialing with TLS (a CA file and the
 * server name the certificate must carry) for tls+tcp:// URLs, fos_connect_with, and the opt-in
 * re-put of weights: the handle keeps a copy of each weight put through it (with its config and
 * placement) and, when the server answers NOT_FOUND for one (after a restart, or an eviction),
 * puts it again the same way and retries. */
#include "libfos_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <nng/supplemental/tls/tls.h>

#define FOSC_SYSTEM_CA "/etc/ssl/certs/ca-certificates.crt"

struct fosc_reput_entry {
	char name[FOS_NAME_MAX + 1];
	uint64_t version;
	fos_tensor w;            /* owns w.data */
	fos_weight_config cfg;
	int has_cfg;
	fosc_place place;        /* all 0: the default placement */
	struct fosc_reput_entry *next;
};

struct fosc_reput {
	pthread_mutex_t mu;
	struct fosc_reput_entry *head;
	atomic_uint_fast64_t count; /* weights put again */
};

int fos_connect_with(const char *url, const fos_connect_opts *o, fos_client **out, fos_status *st)
{
	if (!o) {
		fos_connect_opts d;
		memset(&d, 0, sizeof d);
		return fosc_connect(url, &d, out, st);
	}
	return fosc_connect(url, o, out, st);
}

static int fosc_is_tls(const char *url)
{
	return !strncmp(url, "tls+tcp://", 10) || !strncmp(url, "tls+tcp4://", 11) || !strncmp(url, "tls+tcp6://", 11);
}

/* The host of a tcp-like URL: "tls+tcp://HOST:PORT" or "tls+tcp://[V6]:PORT". */
static int fosc_url_host(const char *url, char *host, size_t n)
{
	const char *p = strstr(url, "://");
	if (!p)
		return -1;
	p += 3;
	const char *end;
	if (*p == '[') {
		p++;
		end = strchr(p, ']');
	} else {
		end = strrchr(p, ':');
	}
	if (!end || end == p || (size_t)(end - p) >= n)
		return -1;
	memcpy(host, p, (size_t)(end - p));
	host[end - p] = 0;
	return 0;
}

/* The TLS settings a dial used: what fosc_tls_why needs to say why it was refused. */
typedef struct fosc_tls_used {
	char ca[1024], name[256];
} fosc_tls_used;

static int fosc_tls_setup(nng_dialer d, const char *url, const fos_connect_opts *o, fosc_tls_used *used,
			  fos_status *st)
{
	nng_tls_config *tc;
	char host[256];
	int rv = nng_tls_config_alloc(&tc, NNG_TLS_MODE_CLIENT);
	if (rv)
		return fosc_status(st, FOS_CODE_INTERNAL, "TLS: %s", nng_strerror(rv));
	const char *ca = o->ca_file;
	if (!ca && access(FOSC_SYSTEM_CA, R_OK) == 0)
		ca = FOSC_SYSTEM_CA;
	const char *name = o->server_name;
	if (!name) {
		if (fosc_url_host(url, host, sizeof host)) {
			nng_tls_config_free(tc);
			return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "TLS: no host name in %s", url);
		}
		name = host;
	}
	int code = FOS_CODE_OK;
	if (!ca)
		code = fosc_status(st, FOS_CODE_INVALID_ARGUMENT,
				   "TLS: no CA file to verify the server with (give one; the system's %s is missing)",
				   FOSC_SYSTEM_CA);
	else if ((rv = nng_tls_config_ca_file(tc, ca)))
		code = fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "TLS: cannot load the CA file %s: %s", ca,
				   nng_strerror(rv));
	else if ((rv = nng_tls_config_server_name(tc, name)) ||
		 (rv = nng_tls_config_auth_mode(tc, NNG_TLS_AUTH_MODE_REQUIRED)) ||
		 (rv = nng_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, tc)))
		code = fosc_status(st, FOS_CODE_INTERNAL, "TLS: cannot configure the connection: %s", nng_strerror(rv));
	nng_tls_config_free(tc); /* the dialer holds its own reference */
	if (!code) {
		snprintf(used->ca, sizeof used->ca, "%s", ca);
		snprintf(used->name, sizeof used->name, "%s", name);
	}
	return code;
}

int fosc_dial(fos_client *c, const char *url, const fos_connect_opts *o, fos_status *st)
{
	nng_dialer d;
	int rv = nng_dialer_create(&d, c->sock, url);
	int bad_url = rv == NNG_ENOTSUP || rv == NNG_EADDRINVAL || rv == NNG_EINVAL;
	if (rv)
		return fosc_status(st, bad_url ? FOS_CODE_INVALID_ARGUMENT : FOS_CODE_UNAVAILABLE, "cannot connect to %s: %s%s",
				   url, nng_strerror(rv),
				   bad_url ? " (a fosd URL is ipc:///PATH, tcp://HOST:PORT or tls+tcp://HOST:PORT)" : "");
	fosc_tls_used tls = {"", ""};
	if (fosc_is_tls(url)) {
		int code = fosc_tls_setup(d, url, o, &tls, st);
		if (code) {
			nng_dialer_close(d);
			return code;
		}
	}
	if ((rv = nng_dialer_start(d, 0))) {
		nng_dialer_close(d);
		char why[700] = "";
		if (tls.ca[0] && (rv == NNG_EPEERAUTH || rv == NNG_ECRYPTO)) {
			/* what mbedTLS found wrong with the certificate, else the usual suspects */
			char host[256], found[600];
			const char *colon = strrchr(url, ':');
			if (!fosc_url_host(url, host, sizeof host) && colon &&
			    !fosc_tls_why(host, colon + 1, tls.ca, tls.name, 3000, found, sizeof found))
				snprintf(why, sizeof why, " (TLS: %s)", found);
			else
				snprintf(why, sizeof why,
					 " (TLS: is the server's certificate signed by a CA of the CA file, for this server "
					 "name?)");
		}
		return fosc_status(st, rv == NNG_ETIMEDOUT ? FOS_CODE_DEADLINE_EXCEEDED : FOS_CODE_UNAVAILABLE,
				   "cannot connect to %s: %s%s", url, nng_strerror(rv), why);
	}
	c->dialer = d;
	if (o->reput_weights) {
		c->reput = calloc(1, sizeof *c->reput);
		if (!c->reput || pthread_mutex_init(&c->reput->mu, NULL)) {
			free(c->reput);
			c->reput = NULL;
			return fosc_status(st, FOS_CODE_RESOURCE_EXHAUSTED, "out of memory");
		}
		atomic_init(&c->reput->count, 0);
	}
	return FOS_CODE_OK;
}

/* ---- re-put ---------------------------------------------------------------------------------- */

static void fosc_entry_free(struct fosc_reput_entry *e)
{
	if (e) {
		free(e->w.data);
		free(e);
	}
}

void fosc_reput_free(fos_client *c)
{
	if (!c->reput)
		return;
	struct fosc_reput_entry *e = c->reput->head;
	while (e) {
		struct fosc_reput_entry *n = e->next;
		fosc_entry_free(e);
		e = n;
	}
	pthread_mutex_destroy(&c->reput->mu);
	free(c->reput);
	c->reput = NULL;
}

/* Unlinks the entry of name (the caller frees it); mu held. */
static struct fosc_reput_entry *fosc_unlink(struct fosc_reput *rp, const char *name)
{
	for (struct fosc_reput_entry **pp = &rp->head; *pp; pp = &(*pp)->next)
		if (!strcmp((*pp)->name, name)) {
			struct fosc_reput_entry *e = *pp;
			*pp = e->next;
			e->next = NULL;
			return e;
		}
	return NULL;
}

void fosc_reput_remember(fos_client *c, const char *name, uint64_t version, const fos_tensor *w,
			 const fos_weight_config *cfg, const fosc_place *pl)
{
	if (!c->reput || strlen(name) > FOS_NAME_MAX)
		return;
	size_t n = fos_tensor_bytes(w);
	struct fosc_reput_entry *e = calloc(1, sizeof *e);
	void *copy = malloc(n ? n : 1);
	if (!e || !copy) { /* without memory the weight is simply not re-put later */
		free(e);
		free(copy);
		return;
	}
	fos_status cst;
	if (w->mem != FOS_MEM_CUDA) {
		memcpy(copy, w->data, n);
	} else if (fos_cuda_memcpy(copy, w->data, n, &cst)) { /* a device W: kept as a host copy */
		free(e);
		free(copy);
		return;
	}
	snprintf(e->name, sizeof e->name, "%s", name);
	e->version = version;
	e->w = *w;
	e->w.data = copy;
	e->w.size = n;
	e->w.mem = FOS_MEM_HOST; /* the copy is in host memory */
	if (cfg) {
		e->cfg = *cfg;
		e->has_cfg = 1;
	}
	if (pl)
		e->place = *pl;
	pthread_mutex_lock(&c->reput->mu);
	struct fosc_reput_entry *old = fosc_unlink(c->reput, name);
	e->next = c->reput->head;
	c->reput->head = e;
	pthread_mutex_unlock(&c->reput->mu);
	fosc_entry_free(old);
}

void fosc_reput_forget(fos_client *c, const char *name)
{
	if (!c->reput)
		return;
	pthread_mutex_lock(&c->reput->mu);
	struct fosc_reput_entry *e = fosc_unlink(c->reput, name);
	pthread_mutex_unlock(&c->reput->mu);
	fosc_entry_free(e);
}

int fosc_reput_restore(fos_client *c, const char *name)
{
	if (!c->reput || !name)
		return FOS_CODE_NOT_FOUND;
	/* take the entry out while putting (no lock held over the network); put it back after */
	pthread_mutex_lock(&c->reput->mu);
	struct fosc_reput_entry *e = fosc_unlink(c->reput, name);
	pthread_mutex_unlock(&c->reput->mu);
	if (!e)
		return FOS_CODE_NOT_FOUND;
	fos_status st;
	int code = fosc_put_weight_raw(c, e->name, e->version, &e->w, e->has_cfg ? &e->cfg : NULL, &e->place, &st);
	if (code == FOS_CODE_ALREADY_EXISTS) /* another thread of this handle put it first */
		code = FOS_CODE_OK;
	if (code == FOS_CODE_OK)
		atomic_fetch_add(&c->reput->count, 1);
	pthread_mutex_lock(&c->reput->mu);
	struct fosc_reput_entry *newer = NULL;
	for (struct fosc_reput_entry *x = c->reput->head; x; x = x->next)
		if (!strcmp(x->name, e->name))
			newer = x;
	if (newer) { /* put again through the handle meanwhile: the newer copy stays */
		pthread_mutex_unlock(&c->reput->mu);
		fosc_entry_free(e);
	} else {
		e->next = c->reput->head;
		c->reput->head = e;
		pthread_mutex_unlock(&c->reput->mu);
	}
	return code;
}

uint64_t fos_reput_count(const fos_client *c)
{
	if (!c)
		return 0;
	uint64_t n = atomic_load(&((fos_client *)c)->hook_reputs);
	return n + (c->reput ? (uint64_t)atomic_load(&c->reput->count) : 0);
}
