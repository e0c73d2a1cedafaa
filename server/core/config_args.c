/* config_args.c: fosd's command line: the flags (one per key of the table, config.h; --config read
 * first, then every other flag wins over the file, noted by config_report.c), `fosd --help` from
 * the table's rows, --version. Invariant: a flag's value goes through fosd_config_set, as a file
 * line does, so both accept and refuse the same values. */
#include "config.h"
#include "config_report.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fos_version.h"

/* One row's --help lines: "  --flag ARG" then its text at column 27 (29 after a long flag),
 * "{def}" replaced by the default, each '\n' continued at column 27. */
static void usage_row(FILE *f, const fosd_config_key *k)
{
	char flag[96];
	const char *arg = k->arg;
	char choices[64] = "";
	if (!arg) {
		switch (k->type) {
		case FOSD_CT_INT:
			arg = "N";
			break;
		case FOSD_CT_SIZE:
			arg = "SIZE";
			break;
		case FOSD_CT_DURATION:
			arg = "DUR";
			break;
		case FOSD_CT_OCTAL:
			arg = "OCTAL";
			break;
		case FOSD_CT_URL:
		case FOSD_CT_LIST:
			arg = "URL";
			break;
		case FOSD_CT_ENUM: /* auto|cpu|cuda */
			for (int i = 0; k->choices[i]; i++)
				snprintf(choices + strlen(choices), sizeof choices - strlen(choices), "%s%s", i ? "|" : "",
					 k->choices[i]);
			arg = choices;
			break;
		default:
			arg = k->type == FOSD_CT_BOOL ? "" : "VALUE";
		}
	}
	int n = snprintf(flag, sizeof flag, "--%s%s%s", k->key, *arg ? " " : "", arg);
	for (int i = 2; i < n && flag[i] && flag[i] != ' '; i++)
		if (flag[i] == '_')
			flag[i] = '-';
	fprintf(f, "  %-*s", n <= 24 ? 25 : 29, flag);
	for (const char *p = k->help; *p; p++) {
		if (!strncmp(p, "{def}", 5)) {
			fputs(k->def ? k->def : "none", f);
			p += 4;
		} else if (*p == '\n') {
			fprintf(f, "\n%27s", "");
		} else {
			fputc(*p, f);
		}
	}
	fputc('\n', f);
}

void fosd_config_usage(void *stream)
{
	FILE *f = stream;
	fprintf(f, "usage: fosd [options]\n");
	for (size_t i = 0; i < fosd_config_nkeys; i++)
		usage_row(f, &fosd_config_keys[i]);
	fprintf(f, "  --help, --version\n"
		   "DUR: a decimal number with ms, s, m or h (250ms, 1.5s, 5m; bare: seconds), 0 to 24 days.\n"
		   "SIGHUP reloads: reads --config and the flags again, applies log_level and the tenant_* keys,\n"
		   "rereads the tokens file (a removed tenant is refused from its next request on) and keeps\n"
		   "cached weights and contexts; other keys wait for a restart; a bad file changes nothing.\n");
}

int fosd_config_parse_args(fosd_config *c, int argc, char **argv, char *msg, size_t msgsz)
{
	c->argc = argc;
	c->argv = argv;
	/* pass 1: --help, --version, --config */
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			fosd_config_usage(stdout);
			return 1;
		}
		if (!strcmp(argv[i], "--version")) {
			printf("fosd %s\n", FOS_VERSION);
			return 1;
		}
		const char *path = NULL;
		if (!strcmp(argv[i], "--config")) {
			if (i + 1 >= argc) {
				snprintf(msg, msgsz, "--config needs a file");
				return -1;
			}
			path = argv[i + 1];
		} else if (!strncmp(argv[i], "--config=", 9)) {
			path = argv[i] + 9;
		}
		if (path) {
			free(c->config_path);
			c->config_path = strdup(path);
			if (!c->config_path || fosd_config_load_file(c, path, msg, msgsz))
				return -1;
		}
	}
	/* pass 2: the other flags; the first flag of a LIST key replaces the file's entries */
	unsigned char from_flags[FOSD_CONFIG_KEYS_MAX] = {0};
	char err[512];
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (strncmp(a, "--", 2)) {
			snprintf(msg, msgsz, "unexpected argument '%s' (see --help)", a);
			return -1;
		}
		char key[64];
		const char *val;
		const char *eq = strchr(a, '=');
		size_t klen = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
		if (klen == 0 || klen >= sizeof key) {
			snprintf(msg, msgsz, "bad option '%s'", a);
			return -1;
		}
		memcpy(key, a + 2, klen);
		key[klen] = 0;
		for (char *p = key; *p; p++)
			if (*p == '-')
				*p = '_';
		const fosd_config_key *k = fosd_config_key_find(key);
		if (!k) {
			snprintf(msg, msgsz, "unknown option '%s' (see --help)", a);
			return -1;
		}
		if (eq) {
			val = eq + 1;
		} else if (k->type == FOSD_CT_BOOL) {
			val = "true"; /* a boolean flag takes no separate value */
		} else {
			if (i + 1 >= argc) {
				snprintf(msg, msgsz, "option '%s' needs a value", a);
				return -1;
			}
			val = argv[++i];
		}
		if (k->flags & FOSD_CK_FLAG_ONLY) { /* --config: read in pass 1 */
			if (k->type == FOSD_CT_BOOL && !strcmp(key, "check_config"))
				c->check_config = 1;
			continue;
		}
		if (!from_flags[k - fosd_config_keys]) {
			fosd_config_note_flag(c, k, a, val); /* the file's value it replaces, if any */
			if (k->type == FOSD_CT_LIST)
				fosd_config_list_clear(c, k);
			from_flags[k - fosd_config_keys] = 1;
		}
		if (fosd_config_set(c, key, val, err, sizeof err)) {
			snprintf(msg, msgsz, "--%s: %s", a + 2, err);
			return -1;
		}
	}
	return 0;
}
