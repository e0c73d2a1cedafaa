/* support_json.h: the tests' view of a JSON document (the --json outputs of fos, a context file): a
 * plain tree whose members a test reads as fields (v->type, v->items[i], v->str, v->num,
 * v->num_raw), made from the document fos's own reader returns (cli_json_load, jansson's). Only
 * for assertions: fos itself reads and writes JSON with jansson alone (client/cli/cli_json.c). */
#ifndef FOS_SUPPORT_JSON_H
#define FOS_SUPPORT_JSON_H

#include <stddef.h>

#include "cli.h"

enum { CLI_JNULL, CLI_JBOOL, CLI_JNUM, CLI_JSTR, CLI_JARR, CLI_JOBJ };
typedef struct cli_jv {
	int type;
	int b;
	double num;
	char *str;             /* CLI_JSTR (NUL-terminated) */
	struct cli_jv *items;  /* CLI_JARR / CLI_JOBJ: n values */
	char **keys;           /* CLI_JOBJ: n keys */
	size_t n;
	char num_raw[40];      /* CLI_JNUM: an integer's exact digits; a real's %.17g */
} cli_jv;

/* Parses text with cli_json_load into *v; FOS_OK or FOS_EINVAL with its message. */
int cli_json_parse(const char *text, size_t len, cli_jv *v, fos_err *err);
void cli_json_free(cli_jv *v);
/* The member key of an object, or NULL. */
const cli_jv *cli_json_get(const cli_jv *obj, const char *key);
/* Follows "a.b.c" through nested objects; NULL when any step is missing. */
const cli_jv *cli_json_path(const cli_jv *v, const char *path);

#endif
