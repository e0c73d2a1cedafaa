/* cli_local.c: the in-process (--local) plumbing shared by the subcommands: opening a backend by name
 * and moving host buffers to and from backend memory. */
#include "cli.h"

fos_backend *cli_backend_open(const char *name, fos_err *err)
{
	fos_err e = {0, ""};
	fos_backend *be = fos_backend_open(name, &e);
	if (!be)
		fos_seterr(err, e.rc ? e.rc : FOS_EUNSUPPORTED, "cannot open backend '%s': %s%s", name,
			   e.msg[0] ? e.msg : "unknown error",
			   e.rc == FOS_EUNSUPPORTED ? "; --backend cpu (or auto) computes on the CPU" : "");
	return be;
}

void *cli_dev_alloc(fos_backend *be, size_t n, fos_err *err)
{
	void *p = be->alloc(be, n ? n : 1);
	if (!p)
		fos_seterr(err, FOS_ENOMEM, "out of %s memory allocating %zu bytes", be->name, n);
	return p;
}

void *cli_upload(fos_backend *be, const void *host, size_t n, fos_err *err)
{
	void *p = cli_dev_alloc(be, n, err);
	if (p && n && be->h2d(be, p, host, n, err)) {
		be->free(be, p);
		return NULL;
	}
	return p;
}

void cli_dev_free(fos_backend *be, void *p)
{
	if (p)
		be->free(be, p);
}
