/* cli_remote.c: how fos talks to fosd: connecting (with a message that says what to do when nothing
 * answers, or when this user may not use an ipc socket that is there), turning libfos statuses into fos_err messages, and mapping the numerics enums of
 * backend.h onto the wire's (fos.h) and back into names. */
#include "cli.h"
#include "regfile.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* An ipc:// URL whose socket this user may not use (connect needs search permission on every
 * directory of the path and write permission on the socket): FOS_EUNSUPPORTED with a message that says
 * so and how to get access; FOS_OK when that is not the problem. */
static int cli_ipc_permission(const char *url, fos_err *err)
{
	if (strncmp(url, "ipc://", 6))
		return FOS_OK;
	const char *path = url + 6;
	struct stat sb;
	if (stat(path, &sb)) {
		if (errno != EACCES)
			return FOS_OK;
		return fos_seterr(err, FOS_EUNSUPPORTED,
				  "permission denied on the socket path %s: a directory on it is closed to this user "
				  "(fosd may well be running; its socket directory must let the fosd group in)",
				  path);
	}
	if (!S_ISSOCK(sb.st_mode) || !access(path, R_OK | W_OK) || errno != EACCES)
		return FOS_OK;
	const struct group *gr = getgrgid(sb.st_gid);
	const struct passwd *pw = getpwuid(sb.st_uid);
	char grname[64], owner[64];
	snprintf(grname, sizeof grname, "%s", gr ? gr->gr_name : "");
	if (!gr)
		snprintf(grname, sizeof grname, "%u", (unsigned)sb.st_gid);
	snprintf(owner, sizeof owner, "%s", pw ? pw->pw_name : "");
	if (!pw)
		snprintf(owner, sizeof owner, "%u", (unsigned)sb.st_uid);
	if (sb.st_mode & S_IWGRP)
		return fos_seterr(err, FOS_EUNSUPPORTED,
				  "permission denied on the socket %s (owner %s, group %s, mode %04o): fosd is there but "
				  "this user is not in group %s; join it (sudo usermod -aG %s $USER, then log in again)",
				  path, owner, grname, (unsigned)(sb.st_mode & 07777), grname, grname);
	return fos_seterr(err, FOS_EUNSUPPORTED,
			  "permission denied on the socket %s (owner %s, group %s, mode %04o): fosd is there but only "
			  "its user may connect; start it with --ipc-mode 0660 and join group %s",
			  path, owner, grname, (unsigned)(sb.st_mode & 07777), grname);
}

/* The way out of a status whose fix is on the user's side, in fos's own terms; "" when none. */
static const char *cli_status_hint(const fos_status *st)
{
	int weight = !strncmp(st->message, "weight '", 8);
	switch (st->code) {
	case FOS_CODE_NOT_FOUND:
		return weight ? "; `fos list-weights` shows what is cached, `fos put-weight NAME W.npy` caches it" : "";
	case FOS_CODE_ALREADY_EXISTS:
		return weight ? "; give another --version N, or replace it: fos put-weight --replace (or fos "
				"drop-weight NAME first)"
			      : "";
	case FOS_CODE_UNAUTHENTICATED:
		return "; give a tenant's secret from fosd's tokens file with --token T or $FOS_TOKEN";
	default:
		return "";
	}
}

int cli_connect(const cli_global *g, fos_client **out, fos_err *err)
{
	fos_status st;
	memset(&st, 0, sizeof st);
	const char *url = g && g->server ? g->server : CLI_DEFAULT_SERVER;
	fos_connect_opts o;
	memset(&o, 0, sizeof o);
	o.token = g ? g->token : NULL;
	o.timeout_ms = g && g->timeout_ms > 0 ? g->timeout_ms : CLI_DEFAULT_TIMEOUT_MS;
	o.ca_file = g ? g->tls_ca : NULL;
	o.server_name = g ? g->tls_server_name : NULL;
	if (o.ca_file) { /* a regular file, before libfos reads it (regfile.h: a FIFO would block) */
		struct stat sb;
		char why[sizeof err->msg - 16];
		int fd = fos_open_regular(o.ca_file, (uint64_t)16 << 20, &sb, why, sizeof why);
		if (fd < 0)
			return cli_errf(err, "--tls-ca %s", why);
		close(fd);
	}
	int code = fos_connect_with(url, &o, out, &st);
	if (code == FOS_CODE_OK)
		return FOS_OK;
	*out = NULL;
	/* libfos says "cannot connect to URL: why": keep the why, the URL is already in the message */
	const char *why = st.message;
	size_t ul = strlen(url);
	if (!strncmp(why, "cannot connect to ", 18) && !strncmp(why + 18, url, ul) && !strncmp(why + 18 + ul, ": ", 2))
		why += 18 + ul + 2;
	if ((code == FOS_CODE_UNAVAILABLE || code == FOS_CODE_PERMISSION_DENIED) && cli_ipc_permission(url, err))
		return err->rc;
	if (code == FOS_CODE_UNAVAILABLE || code == FOS_CODE_DEADLINE_EXCEEDED)
		return fos_seterr(err, FOS_EUNSUPPORTED,
				  "no fosd answers at %s (%s: %s); is it running? --server or FOS_SERVER pick another", url,
				  fos_code_name(code), why);
	fos_status hs = {.code = code};
	snprintf(hs.message, sizeof hs.message, "%s", why);
	return fos_seterr(err, FOS_EINVAL, "cannot connect to fosd at %s: %s: %s%s", url, fos_code_name(code), why,
			  cli_status_hint(&hs));
}

int cli_status_err(const fos_status *st, const char *what, fos_err *err)
{
	int rc = st->code == FOS_CODE_INVALID_ARGUMENT ? FOS_EINVAL
		 : st->code == FOS_CODE_RESOURCE_EXHAUSTED ? FOS_ENOMEM
		 : st->code == FOS_CODE_UNIMPLEMENTED	  ? FOS_EUNSUPPORTED
							  : FOS_EINTERNAL;
	/* the hint is kept whole: fosd's message gives way when the line would not fit err->msg */
	const char *hint = cli_status_hint(st), *code = fos_code_name(st->code);
	int room = (int)sizeof err->msg - 1 - (int)strlen(hint) - (int)strlen(code) - 2 -
		   (what ? (int)strlen(what) + 2 : 0);
	if (room < 16)
		hint = "", room = (int)sizeof err->msg;
	if (what)
		return fos_seterr(err, rc, "%s: %s: %.*s%s", what, code, room, st->message, hint);
	return fos_seterr(err, rc, "%s: %.*s%s", code, room, st->message, hint);
}

const char *cli_block_name(int wire_block, int is_weight)
{
	switch (wire_block) {
	case FOS_BLOCKS_1X16:
		return "1x16";
	case FOS_BLOCKS_16X16:
		return "16x16";
	default:
		return is_weight ? "16x16" : "1x16";
	}
}

const char *cli_errmode_name(int wire_err)
{
	return wire_err == FOS_ERRMODE_MSE ? "mse" : "mae";
}

const char *cli_override_name(int wire_override)
{
	switch (wire_override) {
	case FOS_OVERRIDE_QUANTIZED:
		return "quantized";
	case FOS_OVERRIDE_HIGH_PRECISION:
		return "high_precision";
	case FOS_OVERRIDE_DEQUANTIZED:
		return "dequantized";
	default:
		return "default";
	}
}

int cli_check_backend_local(const cli_flag *backend, const cli_flag *local, fos_err *err)
{
	if (backend->given && !local->given)
		return cli_errf(err, "--backend needs --local (without it fosd computes, on the backend it was started "
				     "with)");
	return FOS_OK;
}
