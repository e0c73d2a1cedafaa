/* weights_repo.c: the weight repository loaded at start (see weights_repo.h). Each weight goes
 * through a PutWeight request built here and run like a client's: fosd_validate, then the op's
 * handler (ops_weights.c) on the server's backend under the backend lock, so the budget, the
 * tenant's quota, the options and the cache entry are exactly those of a PutWeight. Invariants: a
 * rejected file leaves nothing of its own in the cache; the weights.conf rules are checked whole
 * before any file is read. */
#include "weights_repo.h"
#include "server.h"
#include "ops.h"
#include "validate.h"
#include "log.h"
#include "fos_wire.h"
#include "fos_format.h"
#include "npy.h"
#include "safetensors.h"
#include "regfile.h"

#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define REPO_CONF "weights.conf"
#define REPO_CONF_MAX (1u << 20)
#define REPO_WHY 512

/* ---- weights.conf ----------------------------------------------------------------------------- */

typedef struct repo_opts {
	uint64_t version;
	int weight_block; /* Fos__Block */
	int err_mode;     /* Fos__ErrMode */
	uint32_t bound;   /* 0: 256 */
	int pin, drop_master, eager_col;
	int uses;           /* bit i: use i + 1 of Fos__WeightUse (forward, quantized, ...); 0: unset */
	const char *match;  /* points into a rule's text; NULL: every tensor */
	const char *tenant; /* likewise; NULL: the anonymous tenant */
} repo_opts;

typedef struct repo_rule {
	char *text; /* the line: "GLOB" NUL then "key=value" tokens, each NUL-terminated, ending in "" */
	int line;
	int used;
} repo_rule;

typedef struct repo_conf {
	repo_rule *r;
	size_t n;
} repo_conf;

static void repo_opts_default(repo_opts *o)
{
	memset(o, 0, sizeof *o);
	o->version = 1;
}

static int repo_bool(const char *v, int *out)
{
	if (!strcasecmp(v, "true") || !strcmp(v, "1") || !strcasecmp(v, "yes")) {
		*out = 1;
		return 0;
	}
	if (!strcasecmp(v, "false") || !strcmp(v, "0") || !strcasecmp(v, "no")) {
		*out = 0;
		return 0;
	}
	return -1;
}

/* One key=value token into o; 0, or -1 with why. */
static int repo_apply_kv(repo_opts *o, const char *kv, char *why, size_t whysz)
{
	const char *eq = strchr(kv, '=');
	if (!eq || eq == kv || !eq[1]) {
		snprintf(why, whysz, "'%s' is not key=value", kv);
		return -1;
	}
	size_t kl = (size_t)(eq - kv);
	const char *v = eq + 1;
#define KEY(s) (kl == sizeof(s) - 1 && !strncmp(kv, s, kl))
	if (KEY("version")) {
		char *end;
		errno = 0;
		unsigned long long x = strtoull(v, &end, 10);
		if (errno || *end || x < 1 || v[0] == '-' || v[0] == '+') {
			snprintf(why, whysz, "version '%s' is not a whole number >= 1", v);
			return -1;
		}
		o->version = x;
	} else if (KEY("weight_block")) {
		if (!strcmp(v, "16x16"))
			o->weight_block = FOS__BLOCK__BLOCK_16X16;
		else if (!strcmp(v, "1x16"))
			o->weight_block = FOS__BLOCK__BLOCK_1X16;
		else {
			snprintf(why, whysz, "weight_block '%s' is not 16x16 or 1x16", v);
			return -1;
		}
	} else if (KEY("err_mode")) {
		if (!strcmp(v, "mae"))
			o->err_mode = FOS__ERR_MODE__ERR_MAE;
		else if (!strcmp(v, "mse"))
			o->err_mode = FOS__ERR_MODE__ERR_MSE;
		else {
			snprintf(why, whysz, "err_mode '%s' is not mae or mse", v);
			return -1;
		}
	} else if (KEY("bound")) {
		if (strcmp(v, "256") && strcmp(v, "448")) {
			snprintf(why, whysz, "bound '%s' is not 256 or 448", v);
			return -1;
		}
		o->bound = (uint32_t)atoi(v);
	} else if (KEY("pin") || KEY("drop_master") || KEY("eager_columnwise")) {
		int *dst = KEY("pin") ? &o->pin : KEY("drop_master") ? &o->drop_master : &o->eager_col;
		if (repo_bool(v, dst)) {
			snprintf(why, whysz, "%.*s '%s' is not true or false", (int)kl, kv, v);
			return -1;
		}
	} else if (KEY("uses")) {
		static const char *const names[] = {"forward", "quantized", "high_precision", "dequantized"};
		int u = 0;
		for (const char *q = v; *q;) {
			size_t len = strcspn(q, ",");
			int bit = -1;
			for (int i = 0; i < 4; i++)
				if (strlen(names[i]) == len && !strncmp(q, names[i], len))
					bit = i;
			if (bit < 0 || (u & (1 << bit))) {
				snprintf(why, whysz,
					 "uses '%s': %s '%.*s' (forward, quantized, high_precision, dequantized, "
					 "comma-separated, each once)",
					 v, bit < 0 ? "unknown use" : "repeated use", (int)len, q);
				return -1;
			}
			u |= 1 << bit;
			q += len;
			if (*q == ',' && !*++q) {
				snprintf(why, whysz, "uses '%s' ends with a comma", v);
				return -1;
			}
		}
		o->uses = u;
	} else if (KEY("match")) {
		o->match = v;
	} else if (KEY("tenant")) {
		o->tenant = v;
	} else {
		snprintf(why, whysz,
			 "unknown key '%.*s' (version, weight_block, err_mode, bound, pin, drop_master, "
			 "eager_columnwise, uses, match, tenant)",
			 (int)kl, kv);
		return -1;
	}
#undef KEY
	return 0;
}

/* Applies rule r's tokens to o (checked when the file was read). */
static int repo_apply_rule(const repo_rule *r, repo_opts *o, char *why, size_t whysz)
{
	const char *p = r->text + strlen(r->text) + 1;
	for (; *p; p += strlen(p) + 1)
		if (repo_apply_kv(o, p, why, whysz))
			return -1;
	return 0;
}

static void repo_conf_free(repo_conf *c)
{
	for (size_t i = 0; i < c->n; i++)
		free(c->r[i].text);
	free(c->r);
	memset(c, 0, sizeof *c);
}

/* Splits line (comment cut) into whitespace-separated tokens; 0 tokens: *rule->text NULL. */
static int repo_conf_line(char *line, int lineno, repo_rule *rule)
{
	char *hash = strchr(line, '#');
	if (hash)
		*hash = 0;
	size_t len = strlen(line);
	char *t = malloc(len + 2);
	if (!t)
		return -1;
	size_t o = 0;
	int ntok = 0;
	for (char *save = NULL, *tok = strtok_r(line, " \t\r\n", &save); tok; tok = strtok_r(NULL, " \t\r\n", &save)) {
		size_t tl = strlen(tok);
		memcpy(t + o, tok, tl + 1);
		o += tl + 1;
		ntok++;
	}
	t[o] = 0;
	if (!ntok) {
		free(t);
		rule->text = NULL;
		return 0;
	}
	rule->text = t;
	rule->line = lineno;
	return 0;
}

/* Reads dir/weights.conf (absent: no rules). 0, or -1 with msg. */
static int repo_conf_read(const char *dir, repo_conf *c, char *msg, size_t msgsz)
{
	memset(c, 0, sizeof *c);
	char path[4200];
	snprintf(path, sizeof path, "%s/" REPO_CONF, dir);
	struct stat sb;
	if (lstat(path, &sb) && errno == ENOENT)
		return 0; /* no rules (a dangling link of that name is refused below) */
	/* a regular file of at most REPO_CONF_MAX bytes, checked before reading (regfile.h) */
	int fd = fos_open_regular(path, REPO_CONF_MAX, &sb, msg, msgsz);
	if (fd < 0)
		return -1;
	FILE *f = fdopen(fd, "r");
	if (!f) {
		snprintf(msg, msgsz, "%s: cannot open: %s", path, strerror(errno));
		close(fd);
		return -1;
	}
	char *line = NULL;
	size_t cap = 0, total = 0;
	ssize_t got;
	int lineno = 0, rc = 0;
	while (!rc && (got = getline(&line, &cap, f)) >= 0) {
		lineno++;
		total += (size_t)got;
		if (total > REPO_CONF_MAX) { /* it grew since the fstat */
			snprintf(msg, msgsz, "%s: larger than %u KiB", path, REPO_CONF_MAX >> 10);
			rc = -1;
			break;
		}
		repo_rule r = {0};
		if (repo_conf_line(line, lineno, &r)) {
			snprintf(msg, msgsz, "out of memory reading %s", path);
			rc = -1;
			break;
		}
		if (!r.text)
			continue;
		repo_opts scratch;
		repo_opts_default(&scratch);
		char why[REPO_WHY];
		if (!r.text[strlen(r.text) + 1]) {
			snprintf(msg, msgsz, "%s line %d: '%s' has no key=value options", path, lineno, r.text);
			rc = -1;
		} else if (repo_apply_rule(&r, &scratch, why, sizeof why)) {
			snprintf(msg, msgsz, "%s line %d: %s", path, lineno, why);
			rc = -1;
		} else {
			repo_rule *nr = realloc(c->r, (c->n + 1) * sizeof *nr);
			if (!nr) {
				snprintf(msg, msgsz, "out of memory reading %s", path);
				rc = -1;
			} else {
				c->r = nr;
				c->r[c->n++] = r;
				continue;
			}
		}
		free(r.text);
	}
	if (!rc && ferror(f)) {
		snprintf(msg, msgsz, "%s: cannot read: %s", path, strerror(errno));
		rc = -1;
	}
	free(line);
	fclose(f);
	if (rc)
		repo_conf_free(c);
	return rc;
}

/* The options of file name: the defaults, then every matching rule in order. */
static void repo_opts_for(repo_conf *c, const char *name, repo_opts *o)
{
	repo_opts_default(o);
	char why[REPO_WHY];
	for (size_t i = 0; i < c->n; i++) {
		if (fnmatch(c->r[i].text, name, 0))
			continue;
		c->r[i].used = 1;
		repo_apply_rule(&c->r[i], o, why, sizeof why);
	}
}

/* ---- putting one weight ------------------------------------------------------------------------ */

/* PutWeight of bf16 w (n, k) as name, run as a request of tenant would be. 0, or a gRPC code with
 * why. */
static int repo_put(fosd_server *srv, fosd_tenant *tenant, const char *name, const uint16_t *w, int64_t n, int64_t k,
		    const repo_opts *o, char *why, size_t whysz)
{
	int64_t shape[2] = {n, k};
	Fos__Tensor t = FOS__TENSOR__INIT;
	t.dtype = FOS__DTYPE__DTYPE_BF16;
	t.n_shape = 2;
	t.shape = shape;
	t.offset = 0;
	t.length = (uint64_t)n * (uint64_t)k * 2;
	Fos__WeightConfig wc = FOS__WEIGHT_CONFIG__INIT;
	wc.weight_block = (Fos__Block)o->weight_block;
	wc.err_mode = (Fos__ErrMode)o->err_mode;
	wc.bound = o->bound;
	Fos__PutWeightRequest pw = FOS__PUT_WEIGHT_REQUEST__INIT;
	pw.name = (char *)name;
	pw.version = o->version;
	pw.w = &t;
	pw.config = &wc;
	pw.pin = o->pin;
	pw.drop_master = o->drop_master;
	pw.eager_columnwise = o->eager_col;
	Fos__WeightUse uses[4];
	for (int i = 0; i < 4; i++)
		if (o->uses & (1 << i))
			uses[pw.n_uses++] = (Fos__WeightUse)(FOS__WEIGHT_USE__WEIGHT_USE_FORWARD + i);
	pw.uses = pw.n_uses ? uses : NULL;
	Fos__Request rq = FOS__REQUEST__INIT;
	rq.op_case = FOS__REQUEST__OP_PUT_WEIGHT;
	rq.put_weight = &pw;

	fosd_job *s = calloc(1, sizeof *s); /* a request of no connection: what placement and the op see */
	if (!s) {
		snprintf(why, whysz, "out of memory");
		return FOS__CODE__RESOURCE_EXHAUSTED;
	}
	s->rq = &rq;
	s->tenant = tenant;
	s->op = fosd_request_op(&rq);
	s->def = fosd_op_def_of(s->op);
	s->data = (const uint8_t *)w;
	s->dlen = (size_t)t.length;
	int code = fosd_validate(&rq, s->data, s->dlen, srv->cfg->max_message_bytes, &s->args, why, whysz);
	if (!code)
		code = fosd_place(fosd_srv_exec(srv), s, why, whysz); /* its device(s), as for a PutWeight request */
	if (!code) {
		for (;;) { /* each device it goes to (placement.c), with that device's backend gate */
			fosd_device *d = &srv->devs[s->dev];
			fosd_opctx c = {fosd_srv_ops(srv), fosd_job_op(s), d->be, -1, NULL, fosd_device_res(d), NULL, 0, 0,
					fosd_response_result, NULL, ""};
			s->bound_dev = s->dev;
			pthread_mutex_lock(&d->be_mu);
			code = fosd_op_run(&c);
			pthread_mutex_unlock(&d->be_mu);
			nng_msg *reply = c.reply;
			if (!code && !reply && s->stage_reply) { /* a drop stage answers with the put stage's */
				reply = s->stage_reply;
				s->stage_reply = NULL;
			}
			if (code || !fosd_place_next_stage(s)) {
				if (code)
					snprintf(why, whysz, "%s: %s", fosw_code_name(code), c.msg);
				if (reply)
					nng_msg_free(reply);
				break;
			}
			if (s->stage_reply)
				nng_msg_free(s->stage_reply);
			s->stage_reply = reply;
		}
		if (s->stage_reply)
			nng_msg_free(s->stage_reply);
	} else {
		char v[REPO_WHY];
		snprintf(v, sizeof v, "%s", why);
		snprintf(why, whysz, "%s: %.400s", fosw_code_name(code), v);
	}
	free(s);
	return code;
}

static void repo_drop(fosd_server *srv, fosd_tenant *tenant, const char *name)
{
	char m[FOSD_MSG_MAX];
	for (int i = 0; i < srv->n_devs; i++) {
		fosd_device *d = &srv->devs[i];
		pthread_mutex_lock(&d->be_mu);
		fosd_wcache_drop_in(&d->wc, tenant, name, m, sizeof m);
		pthread_mutex_unlock(&d->be_mu);
	}
}

/* ---- the repository ---------------------------------------------------------------------------- */

/* The weight names loaded so far, per tenant (duplicates are refused). */
typedef struct repo_names {
	struct repo_name {
		const fosd_tenant *tenant;
		char *name;
	} *v;
	size_t n, cap;
} repo_names;

static int repo_names_has(const repo_names *ns, const fosd_tenant *t, const char *name)
{
	for (size_t i = 0; i < ns->n; i++)
		if (ns->v[i].tenant == t && !strcmp(ns->v[i].name, name))
			return 1;
	return 0;
}

static int repo_names_add(repo_names *ns, const fosd_tenant *t, const char *name)
{
	if (ns->n == ns->cap) {
		size_t nc = ns->cap ? ns->cap * 2 : 64;
		struct repo_name *nv = realloc(ns->v, nc * sizeof *nv);
		if (!nv)
			return -1;
		ns->v = nv;
		ns->cap = nc;
	}
	ns->v[ns->n].tenant = t;
	ns->v[ns->n].name = strdup(name);
	if (!ns->v[ns->n].name)
		return -1;
	ns->n++;
	return 0;
}

typedef struct repo_ctx {
	fosd_server *srv;
	repo_names names;
	size_t weights, files, rejected;
} repo_ctx;

/* A weight's name and shape before anything is put: 0, or -1 with why. */
static int repo_check_weight(repo_ctx *rc, const fosd_tenant *t, const char *name, const char *what, int ndim,
			     const int64_t *shape, const char *shape_s, char *why, size_t whysz)
{
	char m[FOSD_MSG_MAX];
	if (fosd_check_name(name, "the weight name", m, sizeof m)) {
		snprintf(why, whysz, "%s '%.140s': %.300s", what, name, m);
		return -1;
	}
	if (ndim != 2 || shape[0] < 1 || shape[1] < 1) {
		snprintf(why, whysz, "%s '%s' has shape %s (a nonempty (N, K) expected)", what, name, shape_s);
		return -1;
	}
	if (repo_names_has(&rc->names, t, name)) {
		snprintf(why, whysz, "%s '%s': a weight of that name was already loaded from an earlier file", what,
			 name);
		return -1;
	}
	return 0;
}

/* The most elements a weight may have: a PutWeight carries W as bf16 in one message of at most
 * max_message_bytes, and the repository's weights have the same limit, checked from a file's
 * header before its data is read. what gets the limit's description for messages. */
static uint64_t repo_max_count(const repo_ctx *rc, char *what, size_t whatsz)
{
	uint64_t lim = rc->srv->cfg->max_message_bytes;
	snprintf(what, whatsz, "%llu bf16 bytes at most: max_message_bytes %.2f GiB, as a PutWeight",
		 (unsigned long long)lim, (double)lim / (double)(1ull << 30));
	return lim / 2;
}

/* Strips "path: " off the front of a reader's message. */
static const char *repo_unprefix(const char *m, const char *path)
{
	size_t n = strlen(path);
	return !strncmp(m, path, n) && m[n] == ':' && m[n + 1] == ' ' ? m + n + 2 : m;
}

static int repo_load_npy(repo_ctx *rc, const char *path, const char *fname, fosd_tenant *t, const repo_opts *o,
			 char *why, size_t whysz)
{
	char name[FOSD_NAME_MAX + 64];
	snprintf(name, sizeof name, "%.*s", (int)(strlen(fname) - 4), fname);
	npy_array a;
	fos_err e = {0, ""};
	char lim[160];
	uint64_t max_count = repo_max_count(rc, lim, sizeof lim);
	if (npy_read_max(path, max_count, lim, &a, &e)) {
		snprintf(why, whysz, "%s", repo_unprefix(e.msg, path));
		return -1;
	}
	char sb[200];
	int r = -1;
	if (a.dtype != NPY_U2 && a.dtype != NPY_F4) {
		snprintf(why, whysz, "dtype %s (bf16 ('<u2') or float32 ('<f4') expected)", npy_dtype_human(a.dtype));
	} else if (!repo_check_weight(rc, t, name, "weight", a.ndim, a.shape,
				      npy_shape_str(a.ndim, a.shape, sb, sizeof sb), why, whysz)) {
		if (a.dtype == NPY_F4) { /* in place: the i-th bf16 lies below the i-th float */
			uint16_t *b = a.data;
			const float *f = a.data;
			for (size_t i = 0; i < a.count; i++) {
				float v;
				memcpy(&v, &f[i], sizeof v);
				b[i] = fos_f32_to_bf16(v);
			}
		}
		char pw[REPO_WHY];
		if (repo_put(rc->srv, t, name, a.data, a.shape[0], a.shape[1], o, pw, sizeof pw))
			snprintf(why, whysz, "weight '%.140s': %.300s", name, pw);
		else if (repo_names_add(&rc->names, t, name))
			snprintf(why, whysz, "out of memory");
		else
			r = 0;
	}
	npy_free(&a);
	if (!r)
		rc->weights++;
	return r;
}

static int repo_load_safetensors(repo_ctx *rc, const char *path, fosd_tenant *t, const repo_opts *o, char *why,
				 size_t whysz)
{
	safet_file f;
	fos_err e = {0, ""};
	if (safet_open(path, &f, &e)) {
		snprintf(why, whysz, "%s", repo_unprefix(e.msg, path));
		return -1;
	}
	size_t *sel = malloc((f.n ? f.n : 1) * sizeof *sel), nsel = 0, put = 0;
	int r = -1;
	char lim[160];
	uint64_t max_count = repo_max_count(rc, lim, sizeof lim);
	if (!sel) {
		snprintf(why, whysz, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < f.n; i++) {
		const safet_tensor *st = &f.t[i];
		if (o->match && fnmatch(o->match, st->name, 0))
			continue;
		char sb[200];
		if (st->dtype != SAFET_BF16 && st->dtype != SAFET_F32) {
			snprintf(why, whysz, "tensor '%s' has dtype %s (BF16 or F32 expected)", st->name, st->dtype_name);
			goto out;
		}
		if (repo_check_weight(rc, t, st->name, "tensor", st->ndim, st->shape, safet_shape_str(st, sb, sizeof sb),
				      why, whysz))
			goto out;
		if (st->count > max_count) { /* from the header: nothing of it is read */
			snprintf(why, whysz, "tensor '%s' has shape %s, %llu elements: more than %llu (%s)", st->name, sb,
				 (unsigned long long)st->count, (unsigned long long)max_count, lim);
			goto out;
		}
		sel[nsel++] = i;
	}
	if (!nsel) {
		if (o->match)
			snprintf(why, whysz, "no tensor name matches match=%s (%zu tensors in the file)", o->match, f.n);
		else
			snprintf(why, whysz, "the file holds no tensors");
		goto out;
	}
	for (; put < nsel; put++) {
		const safet_tensor *st = &f.t[sel[put]];
		uint16_t *w;
		if (safet_read_bf16(&f, st, &w, &e)) {
			snprintf(why, whysz, "%s", repo_unprefix(e.msg, path));
			goto out;
		}
		char pw[REPO_WHY];
		int code = repo_put(rc->srv, t, st->name, w, st->shape[0], st->shape[1], o, pw, sizeof pw);
		free(w);
		if (code) {
			snprintf(why, whysz, "tensor '%.140s': %.300s", st->name, pw);
			goto out;
		}
	}
	for (size_t i = 0; i < nsel; i++)
		if (repo_names_add(&rc->names, t, f.t[sel[i]].name)) {
			snprintf(why, whysz, "out of memory");
			goto out;
		}
	rc->weights += nsel;
	r = 0;
out:
	if (r) /* all or nothing: drop what this file put */
		for (size_t i = 0; i < put; i++)
			repo_drop(rc->srv, t, f.t[sel[i]].name);
	free(sel);
	safet_close(&f);
	return r;
}

static int repo_has_suffix(const char *s, const char *suf)
{
	size_t n = strlen(s), m = strlen(suf);
	return n > m && !strcmp(s + n - m, suf);
}

static int repo_filter(const struct dirent *d)
{
	return d->d_name[0] != '.' && (repo_has_suffix(d->d_name, ".safetensors") || repo_has_suffix(d->d_name, ".npy"));
}

int fosd_weights_repo_load(fosd_server *srv, const char *dir, char *msg, size_t msgsz)
{
	repo_conf conf;
	if (repo_conf_read(dir, &conf, msg, msgsz))
		return -1;
	struct dirent **list = NULL;
	int n = scandir(dir, &list, repo_filter, alphasort);
	if (n < 0) {
		snprintf(msg, msgsz, "weights: cannot read the directory %s: %s", dir, strerror(errno));
		repo_conf_free(&conf);
		return -1;
	}
	/* every tenant named in a rule must exist (a typo would load weights nobody can use) */
	for (size_t i = 0; i < conf.n; i++) {
		repo_opts o;
		char why[REPO_WHY];
		repo_opts_default(&o);
		repo_apply_rule(&conf.r[i], &o, why, sizeof why);
		if (o.tenant && !fosd_tenants_find(srv->tenants, o.tenant)) {
			snprintf(msg, msgsz, "%s/" REPO_CONF " line %d: tenant '%s' is not in the tokens file%s", dir,
				 conf.r[i].line, o.tenant, srv->tenants ? "" : " (fosd has no --tokens)");
			for (int k = 0; k < n; k++)
				free(list[k]);
			free(list);
			repo_conf_free(&conf);
			return -1;
		}
	}
	repo_ctx rc = {srv, {0}, 0, 0, 0};
	for (int i = 0; i < n; i++) {
		if (fosd_control_stop_pending()) { /* fosd_main.c stops before serving */
			fosd_warn("weights: a stop signal arrived: %d of %d files not loaded", n - i, n);
			break;
		}
		const char *fname = list[i]->d_name;
		char path[4400], why[REPO_WHY];
		snprintf(path, sizeof path, "%s/%s", dir, fname);
		/* anything of that name counts: the readers take regular files only (regfile.h), so a
		 * FIFO, a device, a directory, a dangling link or a loop of links is rejected (logged)
		 * without being read */
		repo_opts o;
		repo_opts_for(&conf, fname, &o);
		fosd_tenant *t = o.tenant ? fosd_tenants_find(srv->tenants, o.tenant) : NULL;
		rc.files++;
		int r = repo_has_suffix(fname, ".npy") ? repo_load_npy(&rc, path, fname, t, &o, why, sizeof why)
						       : repo_load_safetensors(&rc, path, t, &o, why, sizeof why);
		if (r) {
			rc.rejected++;
			fosd_error("weights: rejected %s: %s", path, why);
		}
	}
	for (size_t i = 0; i < conf.n; i++)
		if (!conf.r[i].used)
			fosd_warn("weights: %s/" REPO_CONF " line %d: '%s' matches no file", dir, conf.r[i].line,
				  conf.r[i].text);
	fosd_info("weights: %zu weights from %zu of %zu files in %s (%zu rejected)", rc.weights,
		  rc.files - rc.rejected, rc.files, dir, rc.rejected);
	for (int k = 0; k < n; k++)
		free(list[k]);
	free(list);
	for (size_t i = 0; i < rc.names.n; i++)
		free(rc.names.v[i].name);
	free(rc.names.v);
	repo_conf_free(&conf);
	return 0;
}
