/* config_report.h: what a configuration means beyond its values: which source won where the command
 * line replaced a value of the config file, the settings that do nothing in it (a tls_cert without
 * a tls+tcp listener, ...), and `fosd --check-config` (as `nginx -t`: parse everything, open no
 * socket and no device, exit 0 or 1). */
#ifndef FOSD_CONFIG_REPORT_H
#define FOSD_CONFIG_REPORT_H

#include "config.h"

/* Called by fosd_config_parse_args when flag (as given, e.g. "--listen" or "--cache-bytes=2G")
 * first sets row k: when the config file had set k to something else than its default, appends a
 * line to c->notes naming the file's value and the flag's, which wins. */
void fosd_config_note_flag(fosd_config *c, const fosd_config_key *k, const char *flag, const char *value);

/* The settings of a finished configuration that have no effect, one "\n"-ended line each, into out
 * ("" when none); returns their number. */
int fosd_config_warnings(const fosd_config *c, char *out, size_t outsz);

/* Logs c->notes (info: which source won) and fosd_config_warnings (warn), at start. */
void fosd_config_log_report(const fosd_config *c);

/* 1 when argv asks for --check-config. */
int fosd_check_config_wanted(int argc, char **argv);
/* fosd --check-config: reads the configuration of argv as fosd would start with it (the file,
 * the flags, the cross-field checks, the tokens file, the TLS certificate and key parsed, the
 * weights directory readable), opening no listener, backend or device; prints which source won
 * and every warning to stderr, then "fosd: configuration OK" (returns 0) or "fosd: ERROR" with
 * the first error (returns 1). */
int fosd_check_config_main(int argc, char **argv);

#endif
