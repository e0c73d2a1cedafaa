/* cli_json.c: JSON for fos: a small streaming writer (the --json outputs of stats, list-weights,
 * health, check and load; the context file) and a strict reader (the context file; the tests read the
 * --json outputs with it). */
#include "cli.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- writer ------------------------------------------------------------------------------------ */

void cli_json_quote(FILE *f, const char *s)
{
	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
		switch (*p) {
		case '"':
			fputs("\\\"", f);
			break;
		case '\\':
			fputs("\\\\", f);
			break;
		case '\n':
			fputs("\\n", f);
			break;
		case '\r':
			fputs("\\r", f);
			break;
		case '\t':
			fputs("\\t", f);
			break;
		default:
			if (*p < 0x20)
				fprintf(f, "\\u%04x", *p);
			else
				fputc(*p, f);
		}
	}
	fputc('"', f);
}

void cli_jw_init(cli_jw *w, FILE *f, int pretty)
{
	memset(w, 0, sizeof *w);
	w->f = f;
	w->pretty = pretty;
	w->first[0] = 1;
}

/* The separator, indentation and key before a value. */
static void cli_jw_key(cli_jw *w, const char *key)
{
	if (w->depth > 0) {
		if (!w->first[w->depth])
			fputc(',', w->f);
		if (w->pretty)
			fprintf(w->f, "\n%*s", 2 * w->depth, "");
		else if (!w->first[w->depth])
			fputc(' ', w->f);
	}
	w->first[w->depth] = 0;
	if (key) {
		cli_json_quote(w->f, key);
		fputs(": ", w->f);
	}
}

static void cli_jw_open(cli_jw *w, const char *key, char c)
{
	cli_jw_key(w, key);
	fputc(c, w->f);
	if (w->depth + 1 < (int)(sizeof w->first / sizeof w->first[0]))
		w->depth++;
	w->first[w->depth] = 1;
}

void cli_jw_obj(cli_jw *w, const char *key)
{
	cli_jw_open(w, key, '{');
}

void cli_jw_arr(cli_jw *w, const char *key)
{
	cli_jw_open(w, key, '[');
}

void cli_jw_end(cli_jw *w, char closer)
{
	int empty = w->first[w->depth];
	if (w->depth > 0)
		w->depth--;
	if (w->pretty && !empty)
		fprintf(w->f, "\n%*s", 2 * w->depth, "");
	fputc(closer, w->f);
	if (w->depth == 0)
		fputc('\n', w->f);
}

void cli_jw_str(cli_jw *w, const char *key, const char *v)
{
	cli_jw_key(w, key);
	cli_json_quote(w->f, v);
}

void cli_jw_u64(cli_jw *w, const char *key, uint64_t v)
{
	cli_jw_key(w, key);
	fprintf(w->f, "%llu", (unsigned long long)v);
}

void cli_jw_i64(cli_jw *w, const char *key, int64_t v)
{
	cli_jw_key(w, key);
	fprintf(w->f, "%lld", (long long)v);
}

void cli_jw_dbl(cli_jw *w, const char *key, double v)
{
	cli_jw_key(w, key);
	if (isfinite(v))
		fprintf(w->f, "%.10g", v);
	else
		fputs("null", w->f);
}

void cli_jw_bool(cli_jw *w, const char *key, int v)
{
	cli_jw_key(w, key);
	fputs(v ? "true" : "false", w->f);
}

void cli_jw_null(cli_jw *w, const char *key)
{
	cli_jw_key(w, key);
	fputs("null", w->f);
}

/* ---- reader ------------------------------------------------------------------------------------ */

typedef struct cli_jp {
	const char *s, *end, *p;
	fos_err *err;
	int failed;
} cli_jp;

static int cli_jp_fail(cli_jp *jp, const char *why)
{
	if (jp->failed)
		return -1;
	jp->failed = 1;
	int line = 1, col = 1;
	for (const char *q = jp->s; q < jp->p && q < jp->end; q++) {
		if (*q == '\n') {
			line++;
			col = 1;
		} else {
			col++;
		}
	}
	cli_errf(jp->err, "line %d column %d: %s", line, col, why);
	return -1;
}

static void cli_jp_ws(cli_jp *jp)
{
	while (jp->p < jp->end && (*jp->p == ' ' || *jp->p == '\t' || *jp->p == '\n' || *jp->p == '\r'))
		jp->p++;
}

static int cli_jp_value(cli_jp *jp, cli_jv *v, int depth);

static int cli_jp_hex4(cli_jp *jp, unsigned *out)
{
	if (jp->end - jp->p < 4)
		return cli_jp_fail(jp, "truncated \\u escape");
	unsigned u = 0;
	for (int i = 0; i < 4; i++) {
		char c = *jp->p++;
		u <<= 4;
		if (c >= '0' && c <= '9')
			u |= (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			u |= (unsigned)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			u |= (unsigned)(c - 'A' + 10);
		else
			return cli_jp_fail(jp, "bad hex digit in \\u escape");
	}
	*out = u;
	return 0;
}

static size_t cli_utf8_put(char *o, unsigned cp)
{
	if (cp < 0x80) {
		o[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (char)(0xC0 | (cp >> 6));
		o[1] = (char)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (char)(0xE0 | (cp >> 12));
		o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
		o[2] = (char)(0x80 | (cp & 0x3F));
		return 3;
	}
	o[0] = (char)(0xF0 | (cp >> 18));
	o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
	o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
	o[3] = (char)(0x80 | (cp & 0x3F));
	return 4;
}

/* At the opening quote; *out is malloc'd. */
static int cli_jp_string(cli_jp *jp, char **out)
{
	jp->p++; /* '"' */
	const char *start = jp->p;
	/* escapes never grow: the raw length up to the closing quote bounds the decoded one */
	const char *q = start;
	while (q < jp->end && *q != '"')
		q += (*q == '\\') ? 2 : 1;
	char *o = malloc((size_t)(q - start) + 8);
	if (!o)
		return cli_jp_fail(jp, "out of memory");
	size_t n = 0;
	for (;;) {
		if (jp->p >= jp->end) {
			free(o);
			return cli_jp_fail(jp, "unterminated string");
		}
		unsigned char c = (unsigned char)*jp->p;
		if (c == '"') {
			jp->p++;
			break;
		}
		if (c < 0x20) {
			free(o);
			return cli_jp_fail(jp, "control character in a string");
		}
		if (c != '\\') {
			o[n++] = (char)c;
			jp->p++;
			continue;
		}
		jp->p++;
		if (jp->p >= jp->end) {
			free(o);
			return cli_jp_fail(jp, "unterminated escape");
		}
		char e = *jp->p++;
		switch (e) {
		case '"':
		case '\\':
		case '/':
			o[n++] = e;
			break;
		case 'b':
			o[n++] = '\b';
			break;
		case 'f':
			o[n++] = '\f';
			break;
		case 'n':
			o[n++] = '\n';
			break;
		case 'r':
			o[n++] = '\r';
			break;
		case 't':
			o[n++] = '\t';
			break;
		case 'u': {
			unsigned cp;
			if (cli_jp_hex4(jp, &cp)) {
				free(o);
				return -1;
			}
			if (cp >= 0xD800 && cp < 0xDC00) {
				unsigned lo;
				if (jp->end - jp->p < 6 || jp->p[0] != '\\' || jp->p[1] != 'u') {
					free(o);
					return cli_jp_fail(jp, "unpaired surrogate in \\u escape");
				}
				jp->p += 2;
				if (cli_jp_hex4(jp, &lo) || lo < 0xDC00 || lo > 0xDFFF) {
					free(o);
					return cli_jp_fail(jp, "unpaired surrogate in \\u escape");
				}
				cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
			} else if (cp >= 0xDC00 && cp <= 0xDFFF) {
				free(o);
				return cli_jp_fail(jp, "unpaired surrogate in \\u escape");
			}
			if (cp == 0) {
				free(o);
				return cli_jp_fail(jp, "\\u0000 in a string is not supported");
			}
			n += cli_utf8_put(o + n, cp); /* never longer than the 6+ bytes of the escape */
			break;
		}
		default:
			free(o);
			return cli_jp_fail(jp, "bad escape in a string");
		}
	}
	o[n] = 0;
	*out = o;
	return 0;
}

static int cli_jp_number(cli_jp *jp, cli_jv *v)
{
	const char *st = jp->p, *q = jp->p;
	if (q < jp->end && *q == '-')
		q++;
	if (q >= jp->end || *q < '0' || *q > '9')
		return cli_jp_fail(jp, "bad number");
	if (*q == '0')
		q++;
	else
		while (q < jp->end && *q >= '0' && *q <= '9')
			q++;
	if (q < jp->end && *q == '.') {
		q++;
		if (q >= jp->end || *q < '0' || *q > '9')
			return cli_jp_fail(jp, "bad number: no digit after '.'");
		while (q < jp->end && *q >= '0' && *q <= '9')
			q++;
	}
	if (q < jp->end && (*q == 'e' || *q == 'E')) {
		q++;
		if (q < jp->end && (*q == '+' || *q == '-'))
			q++;
		if (q >= jp->end || *q < '0' || *q > '9')
			return cli_jp_fail(jp, "bad number: no digit in the exponent");
		while (q < jp->end && *q >= '0' && *q <= '9')
			q++;
	}
	size_t len = (size_t)(q - st);
	if (len >= sizeof v->num_raw)
		return cli_jp_fail(jp, "number too long");
	memcpy(v->num_raw, st, len);
	v->num_raw[len] = 0;
	v->type = CLI_JNUM;
	v->num = strtod(v->num_raw, NULL);
	jp->p = q;
	return 0;
}

static int cli_jp_lit(cli_jp *jp, const char *lit)
{
	size_t n = strlen(lit);
	if ((size_t)(jp->end - jp->p) < n || memcmp(jp->p, lit, n))
		return cli_jp_fail(jp, "unexpected character");
	jp->p += n;
	return 0;
}

/* Appends one more item (and key) to an array / object value. */
static cli_jv *cli_jp_push(cli_jp *jp, cli_jv *v, size_t *cap, char *key)
{
	if (v->n == *cap) {
		size_t nc = *cap ? *cap * 2 : 4;
		cli_jv *ni = realloc(v->items, nc * sizeof *ni);
		if (!ni) {
			cli_jp_fail(jp, "out of memory");
			return NULL;
		}
		v->items = ni;
		if (v->type == CLI_JOBJ) {
			char **nk = realloc(v->keys, nc * sizeof *nk);
			if (!nk) {
				cli_jp_fail(jp, "out of memory");
				return NULL;
			}
			v->keys = nk;
		}
		*cap = nc;
	}
	cli_jv *it = &v->items[v->n];
	memset(it, 0, sizeof *it);
	if (v->type == CLI_JOBJ)
		v->keys[v->n] = key;
	v->n++;
	return it;
}

static int cli_jp_value(cli_jp *jp, cli_jv *v, int depth)
{
	memset(v, 0, sizeof *v);
	cli_jp_ws(jp);
	if (depth > 64)
		return cli_jp_fail(jp, "nested too deeply");
	if (jp->p >= jp->end)
		return cli_jp_fail(jp, "unexpected end of input");
	char c = *jp->p;
	if (c == '{' || c == '[') {
		char close = c == '{' ? '}' : ']';
		v->type = c == '{' ? CLI_JOBJ : CLI_JARR;
		size_t cap = 0;
		jp->p++;
		cli_jp_ws(jp);
		if (jp->p < jp->end && *jp->p == close) {
			jp->p++;
			return 0;
		}
		for (;;) {
			char *key = NULL;
			cli_jp_ws(jp);
			if (v->type == CLI_JOBJ) {
				if (jp->p >= jp->end || *jp->p != '"')
					return cli_jp_fail(jp, "expected a member name in quotes");
				if (cli_jp_string(jp, &key))
					return -1;
				cli_jp_ws(jp);
				if (jp->p >= jp->end || *jp->p != ':') {
					free(key);
					return cli_jp_fail(jp, "expected ':' after a member name");
				}
				jp->p++;
			}
			cli_jv *it = cli_jp_push(jp, v, &cap, key);
			if (!it) {
				free(key);
				return -1;
			}
			if (cli_jp_value(jp, it, depth + 1))
				return -1;
			cli_jp_ws(jp);
			if (jp->p < jp->end && *jp->p == ',') {
				jp->p++;
				continue;
			}
			if (jp->p < jp->end && *jp->p == close) {
				jp->p++;
				return 0;
			}
			return cli_jp_fail(jp, v->type == CLI_JOBJ ? "expected ',' or '}'" : "expected ',' or ']'");
		}
	}
	if (c == '"') {
		v->type = CLI_JSTR;
		return cli_jp_string(jp, &v->str);
	}
	if (c == '-' || (c >= '0' && c <= '9'))
		return cli_jp_number(jp, v);
	if (c == 't') {
		v->type = CLI_JBOOL;
		v->b = 1;
		return cli_jp_lit(jp, "true");
	}
	if (c == 'f') {
		v->type = CLI_JBOOL;
		return cli_jp_lit(jp, "false");
	}
	if (c == 'n') {
		v->type = CLI_JNULL;
		return cli_jp_lit(jp, "null");
	}
	return cli_jp_fail(jp, "unexpected character");
}

void cli_json_free(cli_jv *v)
{
	if (!v)
		return;
	for (size_t i = 0; i < v->n; i++) {
		cli_json_free(&v->items[i]);
		if (v->keys)
			free(v->keys[i]);
	}
	free(v->items);
	free(v->keys);
	free(v->str);
	memset(v, 0, sizeof *v);
}

int cli_json_parse(const char *text, size_t len, cli_jv *v, fos_err *err)
{
	cli_jp jp = {text, text + len, text, err, 0};
	if (cli_jp_value(&jp, v, 0)) {
		cli_json_free(v);
		return FOS_EINVAL;
	}
	cli_jp_ws(&jp);
	if (jp.p != jp.end) {
		cli_jp_fail(&jp, "unexpected text after the JSON value");
		cli_json_free(v);
		return FOS_EINVAL;
	}
	return FOS_OK;
}

const cli_jv *cli_json_get(const cli_jv *obj, const char *key)
{
	if (!obj || obj->type != CLI_JOBJ)
		return NULL;
	for (size_t i = 0; i < obj->n; i++)
		if (!strcmp(obj->keys[i], key))
			return &obj->items[i];
	return NULL;
}

const cli_jv *cli_json_path(const cli_jv *v, const char *path)
{
	char part[128];
	while (v && *path) {
		const char *dot = strchr(path, '.');
		size_t n = dot ? (size_t)(dot - path) : strlen(path);
		if (n >= sizeof part)
			return NULL;
		memcpy(part, path, n);
		part[n] = 0;
		v = cli_json_get(v, part);
		path += n + (dot ? 1 : 0);
	}
	return v;
}
