/* libfos_stub.c: a libfos that answers every call at once, with no fosd behind it, for
 * bench_python_step.py --overhead (which compiles it with the host's cc and loads it in place of
 * libfos.so): what is timed through it is the fosd package's own Python and its ctypes calls, the
 * same calls with the same argument types as against the real library.
 * Each call fills what the real one would return to the package (results' shapes, a context),
 * never touches tensor data, and counts itself (fos_stub_calls). Only the calls of the
 * device-tensor path are here; any other call the package made would fail to resolve. */
#include "fos.h"

#include <string.h>

static unsigned long long calls[4]; /* put, forward, backward, fused put + forward */

unsigned long long fos_stub_calls(int which)
{
	return which >= 0 && which < 4 ? calls[which] : 0;
}

static void fill(fos_tensor *t, int64_t rows, int64_t cols)
{
	if (!t)
		return;
	t->ndim = cols ? 2 : 1;
	t->shape[0] = rows;
	t->shape[1] = cols;
}

int fos_cuda_check(fos_client *c, const void *p, size_t n, fos_status *st)
{
	(void)c, (void)p, (void)n, (void)st;
	return 0;
}

int fos_set_cuda_order(fos_client *c, void *stream, unsigned flags, fos_status *st)
{
	(void)c, (void)stream, (void)flags, (void)st;
	return 0;
}

int fos_server_gpu_uuid(fos_client *c, unsigned char uuid[16], fos_status *st)
{
	(void)c, (void)st;
	if (uuid)
		memset(uuid, 1, 16);
	return 0;
}

size_t fos_channel_bytes(const fos_client *c)
{
	(void)c;
	return 0;
}

int fos_put_weight(fos_client *c, const char *name, uint64_t version, const fos_tensor *w,
		   const fos_weight_config *cfg, fos_weight_info *info, fos_status *st)
{
	(void)c, (void)name, (void)version, (void)w, (void)cfg, (void)info, (void)st;
	calls[0]++;
	return 0;
}

int fos_put_weight_on(fos_client *c, const char *name, uint64_t version, const fos_tensor *w,
		      const fos_weight_config *cfg, const fos_placement *pl, fos_weight_entry *out, fos_status *st)
{
	(void)pl, (void)out;
	return fos_put_weight(c, name, version, w, cfg, NULL, st);
}

static void forward_fill(const fos_tensor *x, const fos_tensor *bias, const fos_forward_opts *o, fos_tensor *y,
			 fos_context *ctx)
{
	int64_t m = x->shape[0], k = x->shape[1], n = (int64_t)(y->size / 2 / (size_t)m);
	fill(y, m, n);
	if (o && o->save_context && ctx) {
		memset(ctx, 0, sizeof *ctx);
		ctx->id = 1;
		ctx->m = m;
		ctx->n = n;
		ctx->k = k;
		ctx->has_bias = bias != NULL;
	}
}

int fos_forward(fos_client *c, const char *weight, const fos_tensor *x, const fos_tensor *bias,
		const fos_forward_opts *o, fos_tensor *y, fos_context *ctx, fos_status *st)
{
	(void)c, (void)weight, (void)st;
	calls[1]++;
	forward_fill(x, bias, o, y, ctx);
	return 0;
}

int fos_forward_put(fos_client *c, const char *weight, uint64_t version, const fos_tensor *w,
		    const fos_weight_config *cfg, const fos_tensor *x, const fos_tensor *bias,
		    const fos_forward_opts *o, fos_tensor *y, fos_context *ctx, fos_status *st)
{
	(void)c, (void)weight, (void)version, (void)w, (void)cfg, (void)st;
	calls[3]++;
	forward_fill(x, bias, o, y, ctx);
	return 0;
}

int fos_backward(fos_client *c, fos_context *ctx, const fos_tensor *dy, const fos_backward_opts *o, fos_tensor *dx,
		 fos_tensor *dw, fos_tensor *db, fos_status *st)
{
	(void)c, (void)dy, (void)o, (void)st;
	calls[2]++;
	fill(dx, ctx->m, ctx->k);
	fill(dw, ctx->n, ctx->k);
	if (db)
		fill(db, ctx->n, 0);
	ctx->id = 0;
	return 0;
}

int fos_release(fos_client *c, fos_context *ctx, fos_status *st)
{
	(void)c, (void)st;
	ctx->id = 0;
	return 0;
}

int fos_drop_weight(fos_client *c, const char *name, fos_status *st)
{
	(void)c, (void)name, (void)st;
	return 0;
}
