/* optable.c: the op table (see optable.h): one row per op, in enum fosd_op order. A row's flags
 * and predicates are all that dispatch.c and executor.c know about an op. */
#include "optable.h"
#include "ops.h"
#include "shm.h"
#include "validate.h"

#include <stdio.h>

/* A Forward that saves a context for Backward writes the context table, one with a put the weight
 * cache (as PutWeight): it runs alone. */
static int forward_beside(const fosd_args *a)
{
	return !a->u.fwd.save && !a->u.fwd.has_put;
}

static int forward_small(const fosd_args *a)
{
	return !a->u.fwd.save && !a->u.fwd.has_put && a->u.fwd.x.len <= FOSD_RUN_NOW_BYTES &&
	       a->u.fwd.expect.len <= FOSD_RUN_NOW_BYTES; /* a check compares on the CPU */
}

static int quantize_small(const fosd_args *a)
{
	return a->u.quant.x.len <= FOSD_RUN_NOW_BYTES;
}

static int dequantize_small(const fosd_args *a)
{
	return a->u.deq.codes.len <= FOSD_RUN_NOW_BYTES / 4;
}

/* Linear quantizes its weight on every call: never small. */


#define INL FOSD_OPF_INLINE
#define BESIDE FOSD_OPF_BESIDE
#define DRAIN FOSD_OPF_DRAINING
#define NOTOKEN FOSD_OPF_NO_TOKEN

static const fosd_op_def table[FOSD_NUM_OPS] = {
	/* name, Request oneof case, validator, handler, flags, beside, small */
	[FOSD_OP_HEALTH] = {"health", FOS__REQUEST__OP_HEALTH, NULL, fosd_op_health, INL | DRAIN | NOTOKEN, NULL, NULL},
	[FOSD_OP_STATS] = {"stats", FOS__REQUEST__OP_STATS, NULL, fosd_op_stats, INL | DRAIN, NULL, NULL},
	[FOSD_OP_PUT_WEIGHT] = {"put_weight", FOS__REQUEST__OP_PUT_WEIGHT, fosd_validate_put, fosd_op_put_weight, 0,
				NULL, NULL},
	[FOSD_OP_DROP_WEIGHT] = {"drop_weight", FOS__REQUEST__OP_DROP_WEIGHT, fosd_validate_drop, fosd_op_drop_weight,
				 0, NULL, NULL},
	[FOSD_OP_LIST_WEIGHTS] = {"list_weights", FOS__REQUEST__OP_LIST_WEIGHTS, NULL, fosd_op_list_weights, INL, NULL,
				  NULL},
	[FOSD_OP_FORWARD] = {"forward", FOS__REQUEST__OP_FORWARD, fosd_validate_forward, fosd_op_forward, BESIDE,
			     forward_beside, forward_small},
	[FOSD_OP_BACKWARD] = {"backward", FOS__REQUEST__OP_BACKWARD, fosd_validate_backward, fosd_op_backward, 0, NULL,
			      NULL},
	[FOSD_OP_RELEASE_CONTEXT] = {"release_context", FOS__REQUEST__OP_RELEASE_CONTEXT, fosd_validate_release,
				     fosd_op_release, 0, NULL, NULL},
	[FOSD_OP_QUANTIZE] = {"quantize", FOS__REQUEST__OP_QUANTIZE, fosd_validate_quantize, fosd_op_quantize, BESIDE,
			      NULL, quantize_small},
	[FOSD_OP_DEQUANTIZE] = {"dequantize", FOS__REQUEST__OP_DEQUANTIZE, fosd_validate_dequantize, fosd_op_dequantize,
				BESIDE, NULL, dequantize_small},
	[FOSD_OP_LINEAR] = {"linear", FOS__REQUEST__OP_LINEAR, fosd_validate_linear, fosd_op_linear, BESIDE, NULL, NULL},
	[FOSD_OP_REGISTER_REGION] = {"register_region", FOS__REQUEST__OP_REGISTER_REGION, fosd_validate_region_op,
				     fosd_op_register_region, 0, NULL, NULL},
	[FOSD_OP_UNREGISTER_REGION] = {"unregister_region", FOS__REQUEST__OP_UNREGISTER_REGION, fosd_validate_region_op,
				       fosd_op_unregister_region, 0, NULL, NULL},
	[FOSD_OP_LIST_REGIONS] = {"list_regions", FOS__REQUEST__OP_LIST_REGIONS, fosd_validate_region_op,
				  fosd_op_list_regions, 0, NULL, NULL},
	[FOSD_OP_CLOSE_DEVICE_MEMORY] = {"close_device_memory", FOS__REQUEST__OP_CLOSE_DEVICE_MEMORY,
					 fosd_validate_close_device, fosd_op_close_device_memory, 0, NULL, NULL},
	[FOSD_OP_INVALID] = {"invalid", 0, NULL, NULL, 0, NULL, NULL},
};

const fosd_op_def *fosd_op_def_of(int op)
{
	return &table[op >= 0 && op < FOSD_NUM_OPS ? op : FOSD_OP_INVALID];
}

const char *fosd_op_name(int op)
{
	return (op >= 0 && op < FOSD_NUM_OPS) ? table[op].name : "?";
}

unsigned fosd_op_flags(int op)
{
	return fosd_op_def_of(op)->flags;
}

int fosd_op_of_case(int request_case)
{
	for (int i = 0; i < FOSD_OP_INVALID; i++)
		if (request_case && table[i].request_case == request_case)
			return i;
	return FOSD_OP_INVALID;
}

