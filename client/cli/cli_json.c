/* cli_json.c: JSON for fos: a small streaming writer (the --json outputs of stats, list-weights,
 * health, check and load; the context file), whose bytes the tests and scripts rely on, and a
 * reader (the context file; the tests read the --json outputs with it): jansson parses, and the
 * document is copied into a cli_jv tree. The reader refuses malformed JSON, duplicate member names,
 * \u0000 in strings (jansson's messages, as "line L column C: why") and nesting deeper than 64
 * levels. */
#include "cli.h"

#include <jansson.h>
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

#define CLI_JSON_MAX_DEPTH 64

/* Copies jansson's value j into v (zeroed first); -1 when out of memory or nested too deeply. */
static int cli_jv_from(const json_t *j, cli_jv *v, int depth, const char **why)
{
	memset(v, 0, sizeof *v);
	if (depth > CLI_JSON_MAX_DEPTH) {
		*why = "nested too deeply (more than 64 levels)";
		return -1;
	}
	*why = "out of memory";
	switch (json_typeof(j)) {
	case JSON_OBJECT: {
		v->type = CLI_JOBJ;
		size_t n = json_object_size(j);
		if (!n)
			return 0;
		v->items = calloc(n, sizeof *v->items);
		v->keys = calloc(n, sizeof *v->keys);
		if (!v->items || !v->keys)
			return -1;
		const char *key;
		json_t *m;
		json_object_foreach((json_t *)j, key, m)
		{
			v->keys[v->n] = strdup(key);
			if (!v->keys[v->n])
				return -1;
			if (cli_jv_from(m, &v->items[v->n++], depth + 1, why))
				return -1;
		}
		return 0;
	}
	case JSON_ARRAY: {
		v->type = CLI_JARR;
		size_t n = json_array_size(j);
		if (!n)
			return 0;
		v->items = calloc(n, sizeof *v->items);
		if (!v->items)
			return -1;
		for (size_t i = 0; i < n; i++)
			if (cli_jv_from(json_array_get(j, i), &v->items[v->n++], depth + 1, why))
				return -1;
		return 0;
	}
	case JSON_STRING:
		v->type = CLI_JSTR;
		v->str = strdup(json_string_value(j));
		return v->str ? 0 : -1;
	case JSON_INTEGER:
		v->type = CLI_JNUM;
		v->num = (double)json_integer_value(j);
		snprintf(v->num_raw, sizeof v->num_raw, "%" JSON_INTEGER_FORMAT, json_integer_value(j));
		return 0;
	case JSON_REAL:
		v->type = CLI_JNUM;
		v->num = json_real_value(j);
		snprintf(v->num_raw, sizeof v->num_raw, "%.17g", v->num);
		return 0;
	case JSON_TRUE:
	case JSON_FALSE:
		v->type = CLI_JBOOL;
		v->b = json_is_true(j);
		return 0;
	case JSON_NULL:
		v->type = CLI_JNULL;
		return 0;
	}
	return -1;
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
	memset(v, 0, sizeof *v);
	json_error_t je;
	const size_t flags = JSON_DECODE_ANY | JSON_REJECT_DUPLICATES;
	json_t *j = json_loadb(text, len, flags, &je);
	/* an integer beyond jansson's json_int_t (signed 64-bit): read every number of the document as
	 * a double instead, num_raw then being its %.17g (the context file writes such values as
	 * decimal strings, so they stay exact) */
	if (!j && json_error_code(&je) == json_error_numeric_overflow)
		j = json_loadb(text, len, flags | JSON_DECODE_INT_AS_REAL, &je);
	if (!j)
		return cli_errf(err, "line %d column %d: %s", je.line, je.column, je.text);
	const char *why = NULL;
	int rc = cli_jv_from(j, v, 0, &why);
	json_decref(j);
	if (rc) {
		cli_json_free(v);
		return cli_errf(err, "%s", why);
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
