/* support_json.c: the tests' JSON tree (support_json.h), copied from the jansson document
 * cli_json_load returns. */
#include "support_json.h"

#include <stdlib.h>
#include <string.h>

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
	json_t *j = cli_json_load(text, len, err);
	if (!j)
		return err ? err->rc : FOS_EINVAL;
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
