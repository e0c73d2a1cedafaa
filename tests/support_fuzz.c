/* support_fuzz.c: the body of the request fuzz target (see support_fuzz.h). It mirrors
 * server/requests/dispatch.c up to the executor: fosw_split, fos__request__unpack, fosd_request_op,
 * fosd_auth_request, fosd_validate_shm and fosd_shm_outputs_check. */
#include "support_fuzz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "log.h"
#include "server.h"
#include "shm.h"
#include "validate.h"

static fosd_tenants *tf_tenants;
static fosd_regions tf_regions;

static void tf_init(void)
{
	if (tf_tenants)
		return;
	fosd_log_set_level(FOSD_LOG_ERROR); /* no rate-limited auth warnings in the output */
	static const char text[] = "alice " TF_ALICE " inflight=4\nbob " TF_BOB "\n";
	char msg[256];
	if (fosd_tenants_parse(text, sizeof text - 1, "fuzz", NULL, &tf_tenants, msg, sizeof msg) ||
	    fosd_regions_init(&tf_regions, NULL)) {
		fprintf(stderr, "fuzz setup: %s\n", msg);
		abort();
	}
}

/* An accepted inline tensor must lie inside the data section. */
static void tf_in(const fosw_tensor *t, const uint8_t *d, size_t dlen, const char *what)
{
	if (!t->ptr || !t->len)
		return;
	if (t->ptr >= d && t->ptr + t->len <= d + dlen)
		return;
	fprintf(stderr, "validated tensor %s [%p, +%zu) outside the data section [%p, +%zu)\n", what, (const void *)t->ptr,
		t->len, (const void *)d, dlen);
	abort();
}

static void tf_check_args(const fosd_args *a, const fosd_shm_req *q, const uint8_t *d, size_t dlen)
{
	if (q->n_refs || q->n_snaps)
		return; /* tensors in regions (none can be registered here) */
	switch (a->op) {
	case FOSD_OP_PUT_WEIGHT:
		tf_in(&a->u.put.w, d, dlen, "w");
		break;
	case FOSD_OP_FORWARD:
		tf_in(&a->u.fwd.x, d, dlen, "x");
		if (a->u.fwd.has_bias)
			tf_in(&a->u.fwd.bias, d, dlen, "bias");
		break;
	case FOSD_OP_BACKWARD:
		tf_in(&a->u.bwd.dy, d, dlen, "dy");
		break;
	case FOSD_OP_QUANTIZE:
		tf_in(&a->u.quant.x, d, dlen, "x");
		if (a->u.quant.has_amax)
			tf_in(&a->u.quant.amax, d, dlen, "amax");
		break;
	case FOSD_OP_DEQUANTIZE:
		tf_in(&a->u.deq.codes, d, dlen, "codes");
		tf_in(&a->u.deq.scales, d, dlen, "scales");
		tf_in(&a->u.deq.amax, d, dlen, "amax");
		break;
	case FOSD_OP_LINEAR:
		tf_in(&a->u.lin.x, d, dlen, "x");
		tf_in(&a->u.lin.w, d, dlen, "w");
		if (a->u.lin.has_bias)
			tf_in(&a->u.lin.bias, d, dlen, "bias");
		if (a->u.lin.has_dy)
			tf_in(&a->u.lin.dy, d, dlen, "dy");
		break;
	default:
		break;
	}
}

int tf_request_one(const uint8_t *data, size_t size)
{
	tf_init();
	/* nng hands fosd bodies that are only 4-byte aligned: so does this */
	uint8_t *buf = malloc(size + 8);
	if (!buf)
		return -1;
	uint8_t *body = buf + 4;
	if (size)
		memcpy(body, data, size);
	static fosd_rqsrv srv; /* what auth reads: the tenants */
	srv.tenants = tf_tenants;
	fosd_request *s = calloc(1, sizeof *s);
	if (!s) {
		free(buf);
		return -1;
	}
	s->srv = &srv;
	char msg[FOSD_MSG_MAX];
	const uint8_t *hdr;
	size_t hlen;
	int code = FOS__CODE__INVALID_ARGUMENT;
	if (fosw_split(body, size, &hdr, &hlen, &s->data, &s->dlen, msg, sizeof msg))
		goto out;
	if (s->data < body || s->data + s->dlen > body + size)
		abort(); /* the data section must lie in the message */
	s->rq = fos__request__unpack(NULL, hlen, hdr);
	if (!s->rq)
		goto out;
	s->req_id = s->rq->id;
	s->client_id = s->rq->client_id;
	s->op = fosd_request_op(s->rq);
	code = fosd_auth_request(&srv, s, msg, sizeof msg);
	/* the oracle of authentication: a tenant exactly when the token is a secret */
	const ProtobufCBinaryData *tok = &s->rq->auth_token;
#define TF_IS(sec) (tok->len == strlen(sec) && !memcmp(tok->data, sec, tok->len))
	fosd_tenant *want = TF_IS(TF_ALICE) ? tf_tenants->t[0] : TF_IS(TF_BOB) ? tf_tenants->t[1] : NULL;
#undef TF_IS
	if (code == 0 && s->tenant != want)
		abort();
	if (code == FOS__CODE__UNAUTHENTICATED && want)
		abort();
	if (code)
		goto out;
	fosd_shm_req_begin(&s->shm, &tf_regions, NULL, 1, s->op, fosd_tenant_name(s->tenant));
	code = fosd_validate_shm(s->rq, s->data, s->dlen, (uint64_t)1 << 30, &s->shm, &s->args, msg, sizeof msg);
	if (!code)
		code = fosd_shm_outputs_check(&s->shm, s->rq, msg, sizeof msg);
	if (!code)
		tf_check_args(&s->args, &s->shm, s->data, s->dlen);
	if (!memchr(msg, 0, sizeof msg))
		abort(); /* every message is a terminated string */
	fosd_shm_req_end(&s->shm);
out:
	fosd_auth_done(s);
	if (s->rq)
		fos__request__free_unpacked(s->rq, NULL);
	free(s);
	free(buf);
	return code;
}
