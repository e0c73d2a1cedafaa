/* cli_context.c: the context file that `fos forward --context-out FILE` writes and `fos backward FILE`
 * reads: a small JSON object holding the fos_context fields (the id fosd keeps the saved operands
 * under, the weight name and version, the options, M/N/K, whether there was a bias), the server
 * that holds it, and the paths of the forward's X and bias (to recompute an expired context).
 * 64-bit ids, and versions beyond 2^63 - 1, are written as decimal strings so that no JSON reader
 * rounds them; the file ends with a newline. */
#include "cli.h"
#include "regfile.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CLI_CTX_FORMAT "fos-context/1"
#define CLI_CTX_MAX_BYTES (1u << 20)

int cli_ctxfile_write(const char *path, const cli_ctxfile *cf, fos_err *err)
{
	size_t n = strlen(path) + 32;
	char *tmp = malloc(n);
	if (!tmp)
		return fos_seterr(err, FOS_ENOMEM, "out of memory");
	snprintf(tmp, n, "%s.tmp.%ld", path, (long)getpid());
	FILE *f = fopen(tmp, "w");
	if (!f) {
		int e = errno;
		free(tmp);
		return cli_errf(err, "%s: cannot create: %s", path, strerror(e));
	}
	const fos_context *c = &cf->ctx;
	char id[32];
	snprintf(id, sizeof id, "%llu", (unsigned long long)c->id);
	cli_jw w;
	cli_jw_init(&w, f, 1);
	cli_jw_obj(&w, NULL);
	cli_jw_str(&w, "format", CLI_CTX_FORMAT);
	cli_jw_str(&w, "server", cf->server);
	cli_jw_str(&w, "id", id);
	cli_jw_str(&w, "weight", c->weight);
	char ver[32];
	snprintf(ver, sizeof ver, "%llu", (unsigned long long)c->weight_version);
	if (c->weight_version <= INT64_MAX)
		cli_jw_u64(&w, "weight_version", c->weight_version);
	else
		cli_jw_str(&w, "weight_version", ver);
	cli_jw_str(&w, "override", cli_override_name(c->override));
	cli_jw_str(&w, "resolved_override", cli_override_name(c->resolved_override));
	cli_jw_bool(&w, "row_scaled", c->row_scaled);
	if (c->four_over_six) /* the forward named a scope (else the weight's): a recompute names it too */
		cli_jw_str(&w, "four_over_six", fos_scope_name(fos_scope_from_wire(c->four_over_six, FOS_SCOPE_ALL)));
	cli_jw_i64(&w, "m", c->m);
	cli_jw_i64(&w, "n", c->n);
	cli_jw_i64(&w, "k", c->k);
	cli_jw_bool(&w, "has_bias", c->has_bias);
	cli_jw_u64(&w, "ttl_ms", c->ttl_ms);
	cli_jw_i64(&w, "recomputed", c->recomputed);
	if (cf->x_path[0])
		cli_jw_str(&w, "x", cf->x_path);
	else
		cli_jw_null(&w, "x");
	if (cf->bias_path[0])
		cli_jw_str(&w, "bias", cf->bias_path);
	else
		cli_jw_null(&w, "bias");
	cli_jw_end(&w, '}');
	int bad = ferror(f);
	if (fclose(f) || bad || rename(tmp, path)) {
		int e = errno;
		unlink(tmp);
		free(tmp);
		return cli_errf(err, "%s: cannot write: %s", path, strerror(e));
	}
	free(tmp);
	return FOS_OK;
}

static int cli_ctx_override(const char *s, int *out)
{
	static const char *const names[] = {"default", "quantized", "high_precision", "dequantized"};
	for (int i = 0; i < 4; i++)
		if (!strcmp(s, names[i])) {
			*out = i; /* FOS_OVERRIDE_* */
			return 0;
		}
	return -1;
}

/* An unsigned integer field: a JSON integer >= 0, or a decimal string (what the writer uses past
 * 2^63 - 1); a whole real below 2^53 too (a document with a larger integer elsewhere is read with
 * every number a real: cli_json_load). */
static int cli_ctx_u64(const json_t *v, uint64_t *out)
{
	if (json_is_integer(v)) {
		if (json_integer_value(v) < 0)
			return -1;
		*out = (uint64_t)json_integer_value(v);
		return 0;
	}
	if (json_is_real(v)) {
		double d = json_real_value(v);
		if (!(d >= 0 && d < 9007199254740992.0) || d != (double)(uint64_t)d)
			return -1;
		*out = (uint64_t)d;
		return 0;
	}
	const char *s = json_string_value(v);
	if (!s || !*s)
		return -1;
	uint64_t r = 0;
	for (const char *p = s; *p; p++) {
		if (*p < '0' || *p > '9')
			return -1;
		unsigned d = (unsigned)(*p - '0');
		if (r > (UINT64_MAX - d) / 10)
			return -1;
		r = r * 10 + d;
	}
	*out = r;
	return 0;
}

int cli_ctxfile_read(const char *path, cli_ctxfile *cf, fos_err *err)
{
	memset(cf, 0, sizeof *cf);
	size_t len;
	char why[sizeof err->msg];
	char *buf = fos_read_regular(path, CLI_CTX_MAX_BYTES, &len, NULL, why, sizeof why); /* regfile.h */
	if (!buf)
		return cli_errf(err, "%s", why);
	fos_err pe = {0, ""};
	json_t *root = cli_json_load(buf, len, &pe);
	free(buf);
	if (!root)
		return cli_errf(err, "%s: not a fos context file (bad JSON: %s)", path, pe.msg);
	const char *missing = NULL;
	const char *fmt = json_string_value(json_object_get(root, "format"));
	if (!fmt || strcmp(fmt, CLI_CTX_FORMAT)) {
		json_decref(root);
		return cli_errf(err, "%s: not a fos context file (no \"format\": \"" CLI_CTX_FORMAT "\"; write one with "
				     "fos forward --context-out)",
				path);
	}
	fos_context *c = &cf->ctx;
	const json_t *v;
	const char *str;
	uint64_t u;
	int ok = 1;
#define CLI_CTX_FIELD(key, cond)                                                                                       \
	do {                                                                                                           \
		v = json_object_get(root, key);                                                                        \
		str = json_string_value(v);                                                                            \
		if (ok && (!v || !(cond))) {                                                                           \
			ok = 0;                                                                                        \
			missing = key;                                                                                 \
		}                                                                                                      \
	} while (0)
	CLI_CTX_FIELD("id", !cli_ctx_u64(v, &c->id) && c->id);
	CLI_CTX_FIELD("weight", str && strlen(str) <= FOS_NAME_MAX && str[0]);
	if (ok)
		snprintf(c->weight, sizeof c->weight, "%s", str);
	CLI_CTX_FIELD("weight_version", !cli_ctx_u64(v, &c->weight_version));
	CLI_CTX_FIELD("override", str && !cli_ctx_override(str, &c->override));
	CLI_CTX_FIELD("resolved_override", str && !cli_ctx_override(str, &c->resolved_override));
	CLI_CTX_FIELD("row_scaled", json_is_boolean(v));
	if (ok)
		c->row_scaled = json_is_true(v);
	CLI_CTX_FIELD("m", !cli_ctx_u64(v, &u) && u > 0 && u < ((uint64_t)1 << 40));
	if (ok)
		c->m = (int64_t)u;
	CLI_CTX_FIELD("n", !cli_ctx_u64(v, &u) && u > 0 && u < ((uint64_t)1 << 40));
	if (ok)
		c->n = (int64_t)u;
	CLI_CTX_FIELD("k", !cli_ctx_u64(v, &u) && u > 0 && u < ((uint64_t)1 << 40));
	if (ok)
		c->k = (int64_t)u;
	CLI_CTX_FIELD("has_bias", json_is_boolean(v));
	if (ok)
		c->has_bias = json_is_true(v);
	CLI_CTX_FIELD("server", str && strlen(str) < sizeof cf->server);
	if (ok)
		snprintf(cf->server, sizeof cf->server, "%s", str);
	CLI_CTX_FIELD("x", json_is_null(v) || (str && strlen(str) < sizeof cf->x_path));
	if (ok && str)
		snprintf(cf->x_path, sizeof cf->x_path, "%s", str);
	CLI_CTX_FIELD("bias", json_is_null(v) || (str && strlen(str) < sizeof cf->bias_path));
	if (ok && str)
		snprintf(cf->bias_path, sizeof cf->bias_path, "%s", str);
#undef CLI_CTX_FIELD
	v = json_object_get(root, "ttl_ms");
	if (v && !cli_ctx_u64(v, &u))
		c->ttl_ms = u;
	v = json_object_get(root, "four_over_six"); /* optional: absent, the weight's scope */
	if (v && json_is_string(v) && fos_scope_parse(json_string_value(v)) >= 0)
		c->four_over_six = fos_scope_to_wire(fos_scope_parse(json_string_value(v)));
	else if (v && ok) {
		ok = 0;
		missing = "four_over_six";
	}
	v = json_object_get(root, "recomputed");
	if (v && !cli_ctx_u64(v, &u) && u < 1000000)
		c->recomputed = (int)u;
	json_decref(root);
	if (!ok)
		return cli_errf(err, "%s: bad context file: \"%s\" is missing or invalid", path, missing);
	return FOS_OK;
}
