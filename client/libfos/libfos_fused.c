/* libfos_fused.c: fos_forward_put, a forward that carries the put of its own weight (fos.proto
 * ForwardRequest.put; PROTOCOL.md "A put inside a forward"): one request where a training step
 * would make two. Invariant: the request is a Forward whose weight_version is the put's version,
 * so a fosd that predates the field (and ignores it) refuses it (NOT_FOUND for that version, or W's
 * bytes past its last tensor) instead of running the forward on an older weight; the put is
 * remembered for the re-put after a fosd restart (reput_weights) only when the call succeeded.
 * A fosd whose last Health (at connect, or fos_health) listed several devices refuses a put inside
 * a forward: refused here with the same code, no request sent. */
#include "libfos_internal.h"

#include <string.h>

int fos_forward_put(fos_client *c, const char *weight, uint64_t version, const fos_tensor *w,
		    const fos_weight_config *cfg, const fos_tensor *x, const fos_tensor *bias,
		    const fos_forward_opts *o, fos_tensor *y, fos_context *ctx, fos_status *st)
{
	if (!y)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "no output tensor for y");
	if (!w)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "no weight tensor w to put");
	if (!version)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT, "version 0: the put of a forward names its version "
				   "(nonzero)");
	if (o && o->weight_version && o->weight_version != version)
		return fosc_status(st, FOS_CODE_INVALID_ARGUMENT,
				   "o->weight_version is %llu but the put's version is %llu: give 0 or the put's",
				   (unsigned long long)o->weight_version, (unsigned long long)version);
	Fos__PutWeightRequest pw;
	Fos__WeightConfig wc;
	Fos__Tensor tw;
	Fos__WeightUse uses[4];
	int code = fosc_put_request(&pw, &wc, uses, &tw, weight, version, cfg, st);
	if (code)
		return code;
	size_t ndev = 0;
	if (c && c->cuda_mu_ok) {
		pthread_mutex_lock(&c->cuda_mu);
		ndev = c->srv_devices;
		pthread_mutex_unlock(&c->cuda_mu);
	}
	if (ndev > 1)
		return fosc_status(st, FOS_CODE_FAILED_PRECONDITION,
				   "fosd serves %zu devices (its Health), and a put inside a forward is for a fosd serving "
				   "one: put weight '%s' with fos_put_weight (and its placement), then forward",
				   ndev, weight);
	fos_forward_opts fo;
	if (o)
		fo = *o;
	else
		memset(&fo, 0, sizeof fo);
	fo.weight_version = version;
	code = fosc_forward_call(c, weight, x, bias, &fo, 0, y, ctx, &pw, w, st);
	if (code == FOS_CODE_OK)
		fosc_reput_remember(c, weight, version, w, cfg, NULL); /* only with reput_weights (libfos_trust.c) */
	return code;
}
