/* cli_json.c: JSON for fos, on jansson both ways. Writer (the --json outputs of stats,
 * list-weights, health, check and load; the context file): cli_jw builds a jansson document as the
 * command adds members in order, and prints it with json_dumpf when its outermost object or array
 * closes (2-space indents, or one line with ", " and ": "; numbers that are not finite as null;
 * integers above 2^63 - 1 as reals; in a string, a byte that starts no UTF-8 sequence as '?').
 * Reader (the context file): cli_json_load hands out jansson's document itself, refusing malformed
 * JSON, duplicate member names, \u0000 in strings (jansson's messages, as "line L column C: why")
 * and nesting deeper than 64 levels. */
#include "cli.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- writer ------------------------------------------------------------------------------------ */

/* The length of the UTF-8 sequence at p (RFC 3629: no overlong forms, surrogates or values past
 * U+10FFFF), or 0 when none starts there. */
static size_t cli_utf8_len(const unsigned char *p)
{
	if (p[0] < 0x80)
		return 1;
	size_t n = p[0] >= 0xC2 && p[0] <= 0xDF ? 2 : p[0] >= 0xE0 && p[0] <= 0xEF ? 3 : p[0] >= 0xF0 && p[0] <= 0xF4 ? 4 : 0;
	unsigned lo = p[0] == 0xE0 ? 0xA0 : p[0] == 0xF0 ? 0x90 : 0x80;
	unsigned hi = p[0] == 0xED ? 0x9F : p[0] == 0xF4 ? 0x8F : 0xBF;
	for (size_t i = 1; i < n; i++)
		if (p[i] < (i == 1 ? lo : 0x80) || p[i] > (i == 1 ? hi : 0xBF))
			return 0;
	return n;
}

/* s as a jansson string; a byte that starts no UTF-8 sequence becomes '?'. */
static json_t *cli_jw_string(const char *s)
{
	json_t *j = json_string(s ? s : "");
	if (j)
		return j;
	char *t = strdup(s);
	if (!t)
		return NULL;
	for (unsigned char *p = (unsigned char *)t; *p;) {
		size_t n = cli_utf8_len(p);
		if (!n)
			*p = '?', n = 1;
		p += n;
	}
	j = json_string(t);
	free(t);
	return j;
}

void cli_json_quote(FILE *f, const char *s)
{
	json_t *j = cli_jw_string(s);
	if (!j || json_dumpf(j, f, JSON_ENCODE_ANY))
		fputs("\"\"", f);
	json_decref(j);
}

void cli_jw_init(cli_jw *w, FILE *f, int pretty)
{
	memset(w, 0, sizeof *w);
	w->f = f;
	w->pretty = pretty;
}

/* Adds v under key to the innermost open container (steals the reference); v becomes the document
 * when none is open. */
static void cli_jw_add(cli_jw *w, const char *key, json_t *v)
{
	if (!v)
		v = json_null(); /* out of memory: the member stays, valueless */
	if (w->depth == 0) {
		json_decref(w->root);
		w->root = v;
		return;
	}
	json_t *c = w->stack[w->depth - 1];
	if (json_is_object(c))
		json_object_set_new(c, key ? key : "", v);
	else
		json_array_append_new(c, v);
}

static void cli_jw_open(cli_jw *w, const char *key, json_t *c)
{
	if (!c)
		c = json_null();
	json_incref(c);
	cli_jw_add(w, key, c);
	if (w->depth < (int)(sizeof w->stack / sizeof w->stack[0]))
		w->stack[w->depth++] = c;
	json_decref(c); /* the parent (or w->root) holds it */
}

void cli_jw_obj(cli_jw *w, const char *key)
{
	cli_jw_open(w, key, json_object());
}

void cli_jw_arr(cli_jw *w, const char *key)
{
	cli_jw_open(w, key, json_array());
}

void cli_jw_end(cli_jw *w, char closer)
{
	(void)closer; /* the container being closed knows what it is */
	if (w->depth > 0)
		w->depth--;
	if (w->depth == 0 && w->root) {
		size_t flags = JSON_ENCODE_ANY | JSON_REAL_PRECISION(10) | (w->pretty ? JSON_INDENT(2) : 0);
		json_dumpf(w->root, w->f, flags);
		fputc('\n', w->f);
		json_decref(w->root);
		w->root = NULL;
	}
}

void cli_jw_str(cli_jw *w, const char *key, const char *v)
{
	cli_jw_add(w, key, cli_jw_string(v));
}

void cli_jw_u64(cli_jw *w, const char *key, uint64_t v)
{
	cli_jw_add(w, key, v <= (uint64_t)INT64_MAX ? json_integer((json_int_t)v) : json_real((double)v));
}

void cli_jw_i64(cli_jw *w, const char *key, int64_t v)
{
	cli_jw_add(w, key, json_integer((json_int_t)v));
}

void cli_jw_dbl(cli_jw *w, const char *key, double v)
{
	cli_jw_add(w, key, isfinite(v) ? json_real(v) : json_null());
}

void cli_jw_bool(cli_jw *w, const char *key, int v)
{
	cli_jw_add(w, key, json_boolean(v));
}

void cli_jw_null(cli_jw *w, const char *key)
{
	cli_jw_add(w, key, json_null());
}

/* ---- reader ------------------------------------------------------------------------------------ */

#define CLI_JSON_MAX_DEPTH 64

/* The deepest nesting under j (a scalar: 0), stopping once past limit. */
static int cli_json_depth(const json_t *j, int limit)
{
	int d = 0;
	if (limit < 0)
		return 1;
	if (json_is_object(j)) {
		const char *key;
		json_t *m;
		json_object_foreach((json_t *)j, key, m)
		{
			int e = 1 + cli_json_depth(m, limit - 1);
			d = e > d ? e : d;
			if (d > limit)
				break;
		}
	} else if (json_is_array(j)) {
		for (size_t i = 0; i < json_array_size(j) && d <= limit; i++) {
			int e = 1 + cli_json_depth(json_array_get(j, i), limit - 1);
			d = e > d ? e : d;
		}
	}
	return d;
}

json_t *cli_json_load(const char *text, size_t len, fos_err *err)
{
	json_error_t je;
	const size_t flags = JSON_DECODE_ANY | JSON_REJECT_DUPLICATES;
	json_t *j = json_loadb(text, len, flags, &je);
	/* an integer beyond jansson's json_int_t (signed 64-bit): read every number of the document as
	 * a double instead (the context file writes such values as decimal strings, so they stay exact) */
	if (!j && json_error_code(&je) == json_error_numeric_overflow)
		j = json_loadb(text, len, flags | JSON_DECODE_INT_AS_REAL, &je);
	if (!j) {
		cli_errf(err, "line %d column %d: %s", je.line, je.column, je.text);
		return NULL;
	}
	if (cli_json_depth(j, CLI_JSON_MAX_DEPTH) > CLI_JSON_MAX_DEPTH) {
		json_decref(j);
		cli_errf(err, "nested too deeply (more than %d levels)", CLI_JSON_MAX_DEPTH);
		return NULL;
	}
	return j;
}
