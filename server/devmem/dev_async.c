/* dev_async.c: which requests may carry a done word (Request.done_word; PROTOCOL.md "Asynchronous
 * requests"): checked when the request arrives, so that a request that could not run
 * asynchronously is refused before it runs (FAILED_PRECONDITION naming what is in the way) rather
 * than answered with a result the client no longer waits for. Such a request is a PutWeight
 * (on a fosd of one device: over several it runs as stages), Forward (no check, no skip_output),
 * Backward or Linear whose tensors all name the client's GPU memory and whose results all go
 * there (Request.shm_outputs with cuda set): the client has returned from the call already, so
 * nothing may come back in the reply. A Backward's db is known only once its context is found; an
 * op that then has a result for the reply fails there (executor/response.c). A Forward carrying
 * its weight's put (ForwardRequest.put) needs the put's W in GPU memory too. */
#include "devmem.h"

#include <stdio.h>
#include <string.h>

/* FAILED_PRECONDITION with msg "an asynchronous request (done_word) ..." */
static int refuse(char *msg, size_t msgsz, const char *why, const char *what)
{
	snprintf(msg, msgsz, "an asynchronous request (done_word) %s%s%s; send it without done_word", why,
		 what ? " " : "", what ? what : "");
	return FOS__CODE__FAILED_PRECONDITION;
}

/* 0 when t is absent or names device memory, else refuse naming it. */
static int dev_in(const Fos__Tensor *t, const char *what, char *msg, size_t msgsz)
{
	if (!t || t->cuda)
		return 0;
	char w[96];
	snprintf(w, sizeof w, "tensor %s is not in the client's GPU memory", what);
	return refuse(msg, msgsz, "needs every input in the client's GPU memory:", w);
}

/* 0 when result name goes to the client's GPU memory, else refuse naming it. */
static int dev_out(const Fos__Request *rq, const char *name, char *msg, size_t msgsz)
{
	for (size_t i = 0; i < rq->n_shm_outputs; i++) {
		const Fos__ShmOutput *o = rq->shm_outputs[i];
		if (o->result && !strcmp(o->result, name) && o->cuda)
			return 0;
	}
	char w[96];
	snprintf(w, sizeof w, "result %s would come back in the reply", name);
	return refuse(msg, msgsz, "needs every result in the client's GPU memory (Request.shm_outputs):", w);
}

int fosd_dev_async_check(fosd_dev_req *q, const Fos__Request *rq, int n_devices, char *msg, size_t msgsz)
{
	if (!rq->done_word)
		return 0;
	if (rq->cuda_done_event)
		return refuse(msg, msgsz, "cannot also ask for an early answer (cuda_done_event)", NULL);
	int code = 0;
	switch (rq->op_case) {
	case FOS__REQUEST__OP_PUT_WEIGHT:
		if (n_devices > 1)
			return refuse(msg, msgsz, "cannot put a weight on a fosd of several devices (it runs as stages)",
				      NULL);
		code = dev_in(rq->put_weight->w, "w", msg, msgsz);
		break;
	case FOS__REQUEST__OP_FORWARD: {
		const Fos__ForwardRequest *f = rq->forward;
		if (f->expect)
			return refuse(msg, msgsz, "cannot be a check (its result comes back in the reply)", NULL);
		if (f->skip_output)
			return refuse(msg, msgsz, "cannot skip its output", NULL);
		if (!(code = dev_in(f->x, "x", msg, msgsz)) && !(code = dev_in(f->bias, "bias", msg, msgsz)))
			code = dev_out(rq, "y", msg, msgsz);
		if (!code && f->put) /* a put inside the forward: its W is an input too */
			code = dev_in(f->put->w, "put.w", msg, msgsz);
		break;
	}
	case FOS__REQUEST__OP_BACKWARD: {
		const Fos__BackwardRequest *b = rq->backward;
		if (!(code = dev_in(b->dy, "dy", msg, msgsz)) && !b->skip_dx)
			code = dev_out(rq, "dx", msg, msgsz);
		if (!code && !b->skip_dw)
			code = dev_out(rq, "dw", msg, msgsz);
		break;
	}
	case FOS__REQUEST__OP_LINEAR: {
		const Fos__LinearRequest *l = rq->linear;
		if (!(code = dev_in(l->x, "x", msg, msgsz)) && !(code = dev_in(l->w, "w", msg, msgsz)) &&
		    !(code = dev_in(l->bias, "bias", msg, msgsz)) && !(code = dev_in(l->dy, "dy", msg, msgsz)))
			code = dev_out(rq, "y", msg, msgsz);
		if (!code && l->dy && !(code = dev_out(rq, "dx", msg, msgsz)) && !(code = dev_out(rq, "dw", msg, msgsz)) &&
		    l->bias)
			code = dev_out(rq, "db", msg, msgsz);
		break;
	}
	default:
		return refuse(msg, msgsz, "must be a PutWeight, Forward, Backward or Linear", NULL);
	}
	if (code)
		return code;
	return fosd_dev_word_check(q, rq, msg, msgsz);
}
