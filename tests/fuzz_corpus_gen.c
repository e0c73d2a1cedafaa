/* fuzz_corpus_gen.c: writes the seed inputs of the request fuzz target into a directory
 * (`make fuzz-corpus` writes tests/fuzz_corpus/seed-*.bin): one well-formed message per operation,
 * with alice's token, bob's, a wrong one and none, tensors placed inline and in a shared-memory
 * region, and a few classic bad framings. The fuzzer (`make fuzz`) grows the corpus from these. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fos_wire.h"
#include "support_fuzz.h"

static const char *g_dir;
static int g_n;

static void put_file(const char *tag, const void *p, size_t n)
{
	char path[1024];
	snprintf(path, sizeof path, "%s/seed-%02d-%s.bin", g_dir, g_n++, tag);
	FILE *f = fopen(path, "wb");
	if (!f || (n && fwrite(p, 1, n, f) != n)) {
		perror(path);
		exit(1);
	}
	fclose(f);
}

typedef struct tin {
	Fos__Tensor *t;
	int dtype, ndim;
	int64_t d0, d1;
} tin;

/* Packs rq with its tensors (filled with a pattern) and writes it. */
static void emit(const char *tag, Fos__Request *rq, tin *ts, int nt)
{
	int64_t shapes[FOSW_MAX_TENSORS][FOSW_MAX_DIMS];
	fosw_placer pl;
	memset(&pl, 0, sizeof pl);
	for (int i = 0; i < nt; i++) {
		int64_t shape[2] = {ts[i].d0, ts[i].d1};
		fosw_tensor_init(ts[i].t, shapes[i], &pl, ts[i].dtype, ts[i].ndim, shape);
	}
	nng_msg *m;
	uint8_t *data;
	if (fosw_msg_build(&rq->base, &pl, &m, &data)) {
		fprintf(stderr, "cannot build %s\n", tag);
		exit(1);
	}
	for (int i = 0; i < nt; i++)
		for (uint64_t j = 0; j < ts[i].t->length; j++)
			data[ts[i].t->offset + j] = (uint8_t)(ts[i].dtype == FOS__DTYPE__DTYPE_E4M3 ? 0x38 : 0x3c + (j & 3));
	put_file(tag, nng_msg_body(m), nng_msg_len(m));
	nng_msg_free(m);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: fuzz_corpus_gen DIR\n");
		return 2;
	}
	g_dir = argv[1];
	const char *tokens[] = {TF_ALICE, TF_BOB, "wrong-token-0000000000", ""};
	const char *tok_tag[] = {"alice", "bob", "wrong", "none"};
	for (int k = 0; k < 4; k++) {
		char tag[64];
		Fos__Request rq = FOS__REQUEST__INIT;
		rq.id = 7;
		rq.client_id = 42;
		rq.deadline_ms = 1000;
		rq.auth_token = (ProtobufCBinaryData){strlen(tokens[k]), (uint8_t *)tokens[k]};
		Fos__HealthRequest h = FOS__HEALTH_REQUEST__INIT;
		rq.op_case = FOS__REQUEST__OP_HEALTH;
		rq.health = &h;
		snprintf(tag, sizeof tag, "health-%s", tok_tag[k]);
		emit(tag, &rq, NULL, 0);
		if (k > 1)
			continue;
		Fos__StatsRequest sr = FOS__STATS_REQUEST__INIT;
		rq.op_case = FOS__REQUEST__OP_STATS;
		rq.stats = &sr;
		snprintf(tag, sizeof tag, "stats-%s", tok_tag[k]);
		emit(tag, &rq, NULL, 0);
	}
	Fos__Request rq = FOS__REQUEST__INIT;
	rq.id = 9;
	rq.client_id = 1;
	rq.auth_token = (ProtobufCBinaryData){strlen(TF_ALICE), (uint8_t *)TF_ALICE};
	{
		Fos__ListWeightsRequest lw = FOS__LIST_WEIGHTS_REQUEST__INIT;
		rq.op_case = FOS__REQUEST__OP_LIST_WEIGHTS;
		rq.list_weights = &lw;
		emit("list", &rq, NULL, 0);
	}
	{
		Fos__PutWeightRequest pw = FOS__PUT_WEIGHT_REQUEST__INIT;
		Fos__WeightConfig wc = FOS__WEIGHT_CONFIG__INIT;
		Fos__Tensor tw;
		pw.name = (char *)"layer0.q";
		pw.version = 3;
		pw.w = &tw;
		pw.config = &wc;
		wc.bound = 448;
		wc.weight_block = FOS__BLOCK__BLOCK_1X16;
		pw.pin = 1;
		rq.op_case = FOS__REQUEST__OP_PUT_WEIGHT;
		rq.put_weight = &pw;
		tin t[1] = {{&tw, FOS__DTYPE__DTYPE_BF16, 2, 128, 128}};
		emit("put", &rq, t, 1);
	}
	{
		Fos__DropWeightRequest dw = FOS__DROP_WEIGHT_REQUEST__INIT;
		dw.name = (char *)"layer0.q";
		rq.op_case = FOS__REQUEST__OP_DROP_WEIGHT;
		rq.drop_weight = &dw;
		emit("drop", &rq, NULL, 0);
	}
	{
		Fos__ForwardRequest fr = FOS__FORWARD_REQUEST__INIT;
		Fos__Tensor tx, tb;
		fr.weight = (char *)"layer0.q";
		fr.x = &tx;
		fr.bias = &tb;
		fr.save_context = 1;
		fr.override = FOS__OVERRIDE__OVERRIDE_DEQUANTIZED;
		rq.op_case = FOS__REQUEST__OP_FORWARD;
		rq.forward = &fr;
		tin t[2] = {{&tx, FOS__DTYPE__DTYPE_BF16, 2, 128, 128}, {&tb, FOS__DTYPE__DTYPE_BF16, 1, 128, 0}};
		emit("forward", &rq, t, 2);
		/* x in a shared-memory region, y asked into one */
		Fos__ShmRef ref = FOS__SHM_REF__INIT;
		ref.region = (char *)"r0";
		ref.offset = 64;
		fr.bias = NULL;
		Fos__ShmOutput so = FOS__SHM_OUTPUT__INIT, *sop = &so;
		Fos__ShmRef oref = FOS__SHM_REF__INIT;
		oref.region = (char *)"r1";
		so.result = (char *)"y";
		so.shm = &oref;
		so.capacity = 1 << 20;
		rq.n_shm_outputs = 1;
		rq.shm_outputs = &sop;
		tin t1[1] = {{&tx, FOS__DTYPE__DTYPE_BF16, 2, 128, 128}};
		int64_t shp[2];
		fosw_placer pl;
		memset(&pl, 0, sizeof pl);
		int64_t shape[2] = {128, 128};
		fosw_tensor_init(&tx, shp, &pl, FOS__DTYPE__DTYPE_BF16, 2, shape);
		tx.offset = 0;
		tx.shm = &ref;
		nng_msg *m;
		if (fosw_msg_build(&rq.base, NULL, &m, NULL))
			return 1;
		put_file("forward-shm", nng_msg_body(m), nng_msg_len(m));
		nng_msg_free(m);
		(void)t1;
		rq.n_shm_outputs = 0;
		rq.shm_outputs = NULL;
	}
	{
		Fos__BackwardRequest br = FOS__BACKWARD_REQUEST__INIT;
		Fos__Tensor tdy;
		br.context_id = 0x1234567890abcdefull;
		br.dy = &tdy;
		br.keep_context = 1;
		rq.op_case = FOS__REQUEST__OP_BACKWARD;
		rq.backward = &br;
		tin t[1] = {{&tdy, FOS__DTYPE__DTYPE_BF16, 2, 4, 8}};
		emit("backward", &rq, t, 1);
	}
	{
		Fos__ReleaseContextRequest rr = FOS__RELEASE_CONTEXT_REQUEST__INIT;
		rr.context_id = 99;
		rq.op_case = FOS__REQUEST__OP_RELEASE_CONTEXT;
		rq.release_context = &rr;
		emit("release", &rq, NULL, 0);
	}
	{
		Fos__QuantizeRequest qr = FOS__QUANTIZE_REQUEST__INIT;
		Fos__QuantConfig qc = FOS__QUANT_CONFIG__INIT;
		Fos__Tensor tx, ta;
		qr.x = &tx;
		qr.config = &qc;
		qc.row_scaled = 1;
		qc.err_mode = FOS__ERR_MODE__ERR_MSE;
		qr.amax = &ta;
		rq.op_case = FOS__REQUEST__OP_QUANTIZE;
		rq.quantize = &qr;
		tin t[2] = {{&tx, FOS__DTYPE__DTYPE_F32, 2, 2, 32}, {&ta, FOS__DTYPE__DTYPE_F32, 1, 2, 0}};
		emit("quantize", &rq, t, 2);
		qc.row_scaled = 0;
		qc.recipe = FOS__RECIPE__RECIPE_NVFP4;
		qr.amax = NULL;
		tin t2[1] = {{&tx, FOS__DTYPE__DTYPE_BF16, 2, 16, 16}};
		emit("quantize-nvfp4", &rq, t2, 1);
	}
	{
		Fos__DequantizeRequest dr = FOS__DEQUANTIZE_REQUEST__INIT;
		Fos__Tensor tc, ts, ta;
		dr.codes = &tc;
		dr.scales = &ts;
		dr.amax = &ta;
		dr.bound = 256;
		dr.out_dtype = FOS__DTYPE__DTYPE_F32;
		rq.op_case = FOS__REQUEST__OP_DEQUANTIZE;
		rq.dequantize = &dr;
		tin t[3] = {{&tc, FOS__DTYPE__DTYPE_U8, 2, 2, 16},
			    {&ts, FOS__DTYPE__DTYPE_E4M3, 2, 2, 2},
			    {&ta, FOS__DTYPE__DTYPE_F32, 1, 1, 0}};
		emit("dequantize", &rq, t, 3);
	}
	{
		Fos__LinearRequest lr = FOS__LINEAR_REQUEST__INIT;
		Fos__LinearOptions lo = FOS__LINEAR_OPTIONS__INIT;
		Fos__Tensor tx, tw, tdy;
		lr.x = &tx;
		lr.w = &tw;
		lr.dy = &tdy;
		lr.options = &lo;
		lo.override = FOS__OVERRIDE__OVERRIDE_HIGH_PRECISION;
		lo.row_scaled = 1;
		rq.op_case = FOS__REQUEST__OP_LINEAR;
		rq.linear = &lr;
		tin t[3] = {{&tx, FOS__DTYPE__DTYPE_BF16, 2, 128, 128},
			    {&tw, FOS__DTYPE__DTYPE_BF16, 2, 128, 128},
			    {&tdy, FOS__DTYPE__DTYPE_BF16, 2, 128, 128}};
		emit("linear", &rq, t, 3);
	}
	/* framing: empty, short, a header length that lies, garbage protobuf */
	put_file("empty", "", 0);
	put_file("short", "\x05\x00", 2);
	static const uint8_t lie[8] = {0xff, 0xff, 0x00, 0x00, 0x08, 0x01, 0x10, 0x02};
	put_file("hlen-lies", lie, sizeof lie);
	static const uint8_t junk[12] = {0x08, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f};
	put_file("junk-proto", junk, sizeof junk);
	printf("%d seeds written to %s\n", g_n, g_dir);
	return 0;
}
