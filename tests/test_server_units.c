/* test_server_units.c: unit tests of fosd's parts in-process, without sockets: the framing
 * (fos_wire.h), request validation, config parsing, latency quantiles, duplicate detection, and
 * the weight cache and saved contexts on the CPU backend (LRU order, pinning, references, TTL,
 * budget). Expected values are worked out by hand from the rules in proto/PROTOCOL.md. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "contexts.h"
#include "support_server.h"
#include "dedup.h"
#include "fos_wire.h"
#include "metrics.h"
#include "util.h"
#include "validate.h"
#include "wcache.h"

/* ---- framing -------------------------------------------------------------------------------- */

static void test_split(void **state)
{
	(void)state;
	uint8_t b[256];
	const uint8_t *hdr, *data;
	size_t hlen, dlen;
	char msg[256];
	memset(b, 0, sizeof b);
	assert_int_equal(fosw_split(b, 3, &hdr, &hlen, &data, &dlen, msg, sizeof msg), -1);
	/* H = 10: the data section starts at round_up(14, 64) = 64 */
	b[0] = 10;
	assert_int_equal(fosw_split(b, 200, &hdr, &hlen, &data, &dlen, msg, sizeof msg), 0);
	assert_ptr_equal(hdr, b + 4);
	assert_int_equal(hlen, 10);
	assert_ptr_equal(data, b + 64);
	assert_int_equal(dlen, 136);
	/* no padding at all: no data section */
	assert_int_equal(fosw_split(b, 14, &hdr, &hlen, &data, &dlen, msg, sizeof msg), 0);
	assert_int_equal(dlen, 0);
	/* H = 60: 4 + 60 = 64, data right at 64 */
	b[0] = 60;
	assert_int_equal(fosw_split(b, 128, &hdr, &hlen, &data, &dlen, msg, sizeof msg), 0);
	assert_ptr_equal(data, b + 64);
	assert_int_equal(dlen, 64);
	/* H = 61: data at 128 */
	b[0] = 61;
	assert_int_equal(fosw_split(b, 200, &hdr, &hlen, &data, &dlen, msg, sizeof msg), 0);
	assert_ptr_equal(data, b + 128);
	/* a header longer than the message */
	b[0] = 0, b[1] = 1; /* 256 */
	assert_int_equal(fosw_split(b, 200, &hdr, &hlen, &data, &dlen, msg, sizeof msg), -1);
	assert_non_null(strstr(msg, "256"));
	/* over the 1 MiB limit */
	b[0] = 1, b[1] = 0, b[2] = 0x10, b[3] = 0; /* 0x100001 */
	assert_int_equal(fosw_split(b, 200, &hdr, &hlen, &data, &dlen, msg, sizeof msg), -1);
	assert_non_null(strstr(msg, "limit"));
}

static Fos__Tensor tensor(int dtype, size_t nd, int64_t *shape, uint64_t off, uint64_t len)
{
	Fos__Tensor t = FOS__TENSOR__INIT;
	t.dtype = dtype;
	t.n_shape = nd;
	t.shape = shape;
	t.offset = off;
	t.length = len;
	return t;
}

static void test_tensor_get(void **state)
{
	(void)state;
	static uint8_t data[1024];
	fosw_tensor v;
	uint64_t end = 0;
	int code;
	char msg[256];
	int64_t s[2] = {4, 8};
	Fos__Tensor t = tensor(FOS__DTYPE__DTYPE_BF16, 2, s, 64, 64);
	assert_int_equal(fosw_tensor_get(&t, data, sizeof data, "x", &v, &end, &code, msg, sizeof msg), 0);
	assert_ptr_equal(v.ptr, data + 64);
	assert_int_equal(v.len, 64);
	assert_int_equal(end, 128);
	assert_int_equal(v.shape[0], 4);
	assert_int_equal(v.shape[1], 8);
	/* f32 (4, 8) is 128 bytes */
	t = tensor(FOS__DTYPE__DTYPE_F32, 2, s, 0, 128);
	assert_int_equal(fosw_tensor_get(&t, data, sizeof data, "x", &v, &end, &code, msg, sizeof msg), 0);
	/* each failure */
	struct {
		Fos__Tensor t;
		const char *needle;
	} bad[] = {
		{tensor(FOS__DTYPE__DTYPE_BF16, 2, s, 64, 62), "does not match"},
		{tensor(FOS__DTYPE__DTYPE_BF16, 2, s, 32, 64), "multiple of 64"},
		{tensor(FOS__DTYPE__DTYPE_BF16, 2, s, 1088, 64), "outside"},
		{tensor(FOS__DTYPE__DTYPE_BF16, 2, s, 1024, 64), "outside"},
		{tensor(FOS__DTYPE__DTYPE_BF16, 0, s, 0, 0), "0 dimensions"},
		{tensor(0, 2, s, 0, 64), "not valid"},
		{tensor(17, 2, s, 0, 64), "not valid"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		if (fosw_tensor_get(&bad[i].t, data, sizeof data, "x", &v, &end, &code, msg, sizeof msg) != -1)
			fail_msg("case %zu accepted", i);
		assert_int_equal(code, FOS__CODE__INVALID_ARGUMENT);
		if (!strstr(msg, bad[i].needle))
			fail_msg("case %zu: '%s' lacks '%s'", i, msg, bad[i].needle);
	}
	int64_t big[2] = {1ll << 31, 1ll << 31};
	t = tensor(FOS__DTYPE__DTYPE_F32, 2, big, 0, 0);
	assert_int_equal(fosw_tensor_get(&t, data, sizeof data, "x", &v, &end, &code, msg, sizeof msg), -1);
	assert_non_null(strstr(msg, "too large"));
	int64_t neg[1] = {0};
	t = tensor(FOS__DTYPE__DTYPE_U8, 1, neg, 0, 0);
	assert_int_equal(fosw_tensor_get(&t, data, sizeof data, "x", &v, &end, &code, msg, sizeof msg), -1);
	/* trailing bytes: up to the padding of the last tensor are fine */
	assert_int_equal(fosw_check_trailing(100, 128, msg, sizeof msg), 0);
	assert_int_equal(fosw_check_trailing(100, 129, msg, sizeof msg), -1);
	assert_int_equal(fosw_check_trailing(0, 0, msg, sizeof msg), 0);
}

static void test_msg_build(void **state)
{
	(void)state;
	Fos__Response resp = FOS__RESPONSE__INIT;
	Fos__ForwardResult fr = FOS__FORWARD_RESULT__INIT;
	Fos__Tensor t1, t2;
	int64_t s1[2], s2[2], shape1[2] = {3, 5}, shape2[1] = {7};
	fosw_placer pl;
	memset(&pl, 0, sizeof pl);
	/* bf16 (3, 5) = 30 bytes at 0, padded to 64; f32 (7) = 28 bytes at 64, padded to 128 */
	assert_int_equal(fosw_tensor_init(&t1, s1, &pl, FOS__DTYPE__DTYPE_BF16, 2, shape1), 0);
	assert_int_equal(t1.length, 30);
	assert_int_equal(fosw_tensor_init(&t2, s2, &pl, FOS__DTYPE__DTYPE_F32, 1, shape2), 64);
	assert_int_equal(t2.length, 28);
	assert_int_equal(pl.cursor, 128);
	fr.y = &t1;
	resp.id = 42;
	resp.result_case = FOS__RESPONSE__RESULT_FORWARD;
	resp.forward = &fr;
	nng_msg *m;
	uint8_t *data;
	assert_int_equal(fosw_msg_build(&resp.base, &pl, &m, &data), 0);
	uint8_t *b = nng_msg_body(m);
	size_t h = fos__response__get_packed_size(&resp);
	assert_int_equal(b[0] | b[1] << 8 | b[2] << 16 | b[3] << 24, (int)h);
	size_t ds = (4 + h + 63) / 64 * 64;
	assert_ptr_equal(data, b + ds);
	assert_int_equal(nng_msg_len(m), ds + 128);
	for (size_t i = 4 + h; i < ds; i++)
		assert_int_equal(b[i], 0);
	for (size_t i = 30; i < 64; i++) /* the gap after t1 */
		assert_int_equal(data[i], 0);
	for (size_t i = 64 + 28; i < 128; i++)
		assert_int_equal(data[i], 0);
	Fos__Response *back = fos__response__unpack(NULL, h, b + 4);
	assert_non_null(back);
	assert_int_equal(back->id, 42);
	assert_int_equal(back->forward->y->offset, 0);
	fos__response__free_unpacked(back, NULL);
	nng_msg_free(m);
}

/* ---- validation ----------------------------------------------------------------------------- */

static uint8_t g_data[1 << 20];

static int validate(Fos__Request *rq, size_t dlen, fosd_args *a, char *msg)
{
	return fosd_validate(rq, g_data, dlen, 1 << 30, a, msg, 512);
}

static void test_validate_linear(void **state)
{
	(void)state;
	Fos__Request rq = FOS__REQUEST__INIT;
	Fos__LinearRequest lr = FOS__LINEAR_REQUEST__INIT;
	Fos__LinearOptions lo = FOS__LINEAR_OPTIONS__INIT;
	int64_t sx[2] = {128, 256}, sw[2] = {384, 256}, sb[1] = {384}, sdy[2] = {128, 384};
	/* x at 0 (65536 bytes), w at 65536 (196608), bias at 262144 (768), dy at 262912 (98304) */
	Fos__Tensor tx = tensor(FOS__DTYPE__DTYPE_BF16, 2, sx, 0, 65536);
	Fos__Tensor tw = tensor(FOS__DTYPE__DTYPE_BF16, 2, sw, 65536, 196608);
	Fos__Tensor tb = tensor(FOS__DTYPE__DTYPE_BF16, 1, sb, 262144, 768);
	Fos__Tensor tdy = tensor(FOS__DTYPE__DTYPE_BF16, 2, sdy, 262912, 98304);
	size_t dlen = 262912 + 98304;
	lr.x = &tx, lr.w = &tw, lr.bias = &tb, lr.dy = &tdy, lr.options = &lo;
	rq.op_case = FOS__REQUEST__OP_LINEAR;
	rq.linear = &lr;
	fosd_args a;
	char msg[512];
	assert_int_equal(validate(&rq, dlen, &a, msg), 0);
	assert_int_equal(a.op, FOSD_OP_LINEAR);
	assert_int_equal(a.u.lin.resolved, FOS_OVR_QUANTIZED);
	assert_int_equal(a.u.lin.opts.weight_block, FOS_BLOCK_16X16);
	assert_int_equal(a.u.lin.opts.bound, 256);
	assert_true(a.u.lin.has_bias && a.u.lin.has_dy);
	/* row-scaled: high precision by default; quantized refused */
	lo.row_scaled = 1;
	assert_int_equal(validate(&rq, dlen, &a, msg), 0);
	assert_int_equal(a.u.lin.resolved, FOS_OVR_HIGH_PRECISION);
	lo.override = FOS__OVERRIDE__OVERRIDE_QUANTIZED;
	assert_int_equal(validate(&rq, dlen, &a, msg), FOS__CODE__INVALID_ARGUMENT);
	lo.override = 0, lo.row_scaled = 0;
	lo.weight_block = FOS__BLOCK__BLOCK_1X16;
	lo.bound = 448;
	lo.err_mode = FOS__ERR_MODE__ERR_MSE;
	assert_int_equal(validate(&rq, dlen, &a, msg), 0);
	assert_int_equal(a.u.lin.opts.weight_block, FOS_BLOCK_1X16);
	assert_int_equal(a.u.lin.opts.bound, 448);
	assert_int_equal(a.u.lin.opts.err_mode, FOS_ERR_MSE);
	lo.bound = 300;
	assert_int_equal(validate(&rq, dlen, &a, msg), FOS__CODE__INVALID_ARGUMENT);
	assert_non_null(strstr(msg, "300"));
	lo.bound = 0;
	lo.err_mode = 2;
	assert_int_equal(validate(&rq, dlen, &a, msg), FOS__CODE__INVALID_ARGUMENT);
	lo.err_mode = 0;
	lo.weight_block = 3;
	assert_int_equal(validate(&rq, dlen, &a, msg), FOS__CODE__INVALID_ARGUMENT);
	lo.weight_block = 0;
	/* shapes that disagree */
	sb[0] = 256;
	tb.length = 512;
	assert_int_equal(validate(&rq, dlen, &a, msg), FOS__CODE__INVALID_ARGUMENT);
	assert_non_null(strstr(msg, "bias"));
	sb[0] = 384;
	tb.length = 768;
	sdy[0] = 256, tdy.length = 196608;
	assert_int_equal(validate(&rq, 262912 + 196608, &a, msg), FOS__CODE__INVALID_ARGUMENT);
	assert_non_null(strstr(msg, "dy"));
	sdy[0] = 128, tdy.length = 98304;
	sw[1] = 128, tw.length = 98304;
	assert_int_equal(validate(&rq, dlen, &a, msg), FOS__CODE__INVALID_ARGUMENT);
	assert_non_null(strstr(msg, "K"));
	sw[1] = 256, tw.length = 196608;
	/* M = 100: any M >= 1 is allowed (NUMERICS.md section 8) */
	sx[0] = 100, tx.length = 51200;
	sdy[0] = 100, tdy.length = 76800;
	assert_int_equal(validate(&rq, 262912 + 76800, &a, msg), 0);
	sx[0] = 128, tx.length = 65536, sdy[0] = 128, tdy.length = 98304;
	/* a reply over the limit */
	assert_int_equal(fosd_validate(&rq, g_data, dlen, 100000, &a, msg, sizeof msg), FOS__CODE__RESOURCE_EXHAUSTED);
	/* overlapping tensors are fine to read; a tensor beyond the data is not */
	assert_int_equal(validate(&rq, dlen - 64, &a, msg), FOS__CODE__INVALID_ARGUMENT);
}

static void test_validate_other_ops(void **state)
{
	(void)state;
	fosd_args a;
	char msg[512];
	Fos__Request rq = FOS__REQUEST__INIT;
	/* no op */
	assert_int_equal(validate(&rq, 0, &a, msg), FOS__CODE__INVALID_ARGUMENT);
	/* put weight */
	Fos__PutWeightRequest pw = FOS__PUT_WEIGHT_REQUEST__INIT;
	int64_t sw[2] = {128, 256};
	Fos__Tensor tw = tensor(FOS__DTYPE__DTYPE_BF16, 2, sw, 0, 65536);
	pw.name = (char *)"model.layers.0/q_proj:v1";
	pw.w = &tw;
	rq.op_case = FOS__REQUEST__OP_PUT_WEIGHT;
	rq.put_weight = &pw;
	assert_int_equal(validate(&rq, 65536, &a, msg), 0);
	assert_int_equal(a.u.put.keep_master, 1);
	assert_int_equal(a.u.put.want_col, 0);
	pw.drop_master = 1;
	assert_int_equal(validate(&rq, 65536, &a, msg), 0);
	assert_int_equal(a.u.put.keep_master, 0);
	assert_int_equal(a.u.put.want_col, 1);
	pw.name = (char *)"with space";
	assert_int_equal(validate(&rq, 65536, &a, msg), FOS__CODE__INVALID_ARGUMENT);
	char long_name[200];
	memset(long_name, 'a', sizeof long_name);
	long_name[129] = 0;
	pw.name = long_name;
	assert_int_equal(validate(&rq, 65536, &a, msg), FOS__CODE__INVALID_ARGUMENT);
	long_name[128] = 0;
	assert_int_equal(validate(&rq, 65536, &a, msg), 0);
	/* quantize */
	Fos__QuantizeRequest qr = FOS__QUANTIZE_REQUEST__INIT;
	Fos__QuantConfig qc = FOS__QUANT_CONFIG__INIT;
	int64_t sx[2] = {32, 64}, sa[1] = {32};
	Fos__Tensor tx = tensor(FOS__DTYPE__DTYPE_F32, 2, sx, 0, 8192);
	float amax[32];
	for (int i = 0; i < 32; i++)
		amax[i] = 1.0f + (float)i;
	memcpy(g_data + 8192, amax, sizeof amax);
	Fos__Tensor ta = tensor(FOS__DTYPE__DTYPE_F32, 1, sa, 8192, 128);
	qr.x = &tx, qr.config = &qc;
	rq.op_case = FOS__REQUEST__OP_QUANTIZE;
	rq.quantize = &qr;
	assert_int_equal(validate(&rq, 8192, &a, msg), 0);
	assert_int_equal(a.u.quant.dtype, FOS_F32);
	assert_int_equal(a.u.quant.cfg.block, FOS_BLOCK_1X16);
	qc.recipe = FOS__RECIPE__RECIPE_NVFP4;
	assert_int_equal(validate(&rq, 8192, &a, msg), 0);
	assert_int_equal(a.u.quant.cfg.bound, 448);
	qc.bound = 256;
	assert_int_equal(validate(&rq, 8192, &a, msg), FOS__CODE__INVALID_ARGUMENT);
	qc.bound = 0, qc.recipe = 0, qc.row_scaled = 1;
	qr.amax = &ta;
	assert_int_equal(validate(&rq, 8192 + 128, &a, msg), 0);
	assert_true(a.u.quant.has_amax);
	amax[3] = -1.0f;
	memcpy(g_data + 8192, amax, sizeof amax);
	assert_int_equal(validate(&rq, 8192 + 128, &a, msg), FOS__CODE__INVALID_ARGUMENT);
	assert_non_null(strstr(msg, "amax[3]"));
	qc.row_scaled = 0; /* then amax must have 1 value */
	assert_int_equal(validate(&rq, 8192 + 128, &a, msg), FOS__CODE__INVALID_ARGUMENT);
	qr.amax = NULL;
	qc.block = FOS__BLOCK__BLOCK_16X16;
	sx[0] = 24, tx.length = 24 * 64 * 4;
	assert_int_equal(validate(&rq, 24 * 64 * 4, &a, msg), FOS__CODE__INVALID_ARGUMENT);
	assert_non_null(strstr(msg, "rows 24"));
	/* dequantize: codes (32, 32) -> 64 columns, scales (32, 4) */
	Fos__DequantizeRequest dr = FOS__DEQUANTIZE_REQUEST__INIT;
	int64_t sc[2] = {32, 32}, ss[2] = {32, 4}, sa1[1] = {1};
	Fos__Tensor tc = tensor(FOS__DTYPE__DTYPE_U8, 2, sc, 0, 1024);
	Fos__Tensor ts = tensor(FOS__DTYPE__DTYPE_E4M3, 2, ss, 1024, 128);
	Fos__Tensor ta1 = tensor(FOS__DTYPE__DTYPE_F32, 1, sa1, 1152, 4);
	dr.codes = &tc, dr.scales = &ts, dr.amax = &ta1;
	rq.op_case = FOS__REQUEST__OP_DEQUANTIZE;
	rq.dequantize = &dr;
	assert_int_equal(validate(&rq, 1156, &a, msg), 0);
	assert_int_equal(a.u.deq.rows, 32);
	assert_int_equal(a.u.deq.cols, 64);
	assert_int_equal(a.u.deq.out_dtype, FOS_BF16);
	dr.out_dtype = FOS__DTYPE__DTYPE_U8;
	assert_int_equal(validate(&rq, 1156, &a, msg), FOS__CODE__INVALID_ARGUMENT);
	dr.out_dtype = FOS__DTYPE__DTYPE_F32;
	dr.row_scaled = 1;
	assert_int_equal(validate(&rq, 1156, &a, msg), FOS__CODE__INVALID_ARGUMENT);
	dr.row_scaled = 0;
	ss[1] = 8, ts.length = 256;
	assert_int_equal(validate(&rq, 1024 + 256 + 4, &a, msg), FOS__CODE__INVALID_ARGUMENT);
	/* wrong dtype for codes */
	ss[1] = 4, ts.length = 128;
	tc.dtype = FOS__DTYPE__DTYPE_E4M3;
	assert_int_equal(validate(&rq, 1156, &a, msg), FOS__CODE__INVALID_ARGUMENT);
	assert_non_null(strstr(msg, "u8 expected"));
}

/* ---- config --------------------------------------------------------------------------------- */

static void test_config(void **state)
{
	(void)state;
	uint64_t v;
	assert_int_equal(fosd_parse_size("1024", &v), 0);
	assert_int_equal(v, 1024);
	assert_int_equal(fosd_parse_size("64M", &v), 0);
	assert_int_equal(v, 64ull << 20);
	assert_int_equal(fosd_parse_size("8GiB", &v), 0);
	assert_int_equal(v, 8ull << 30);
	assert_int_equal(fosd_parse_size("2 kb", &v), 0);
	assert_int_equal(v, 2048);
	assert_int_equal(fosd_parse_size("-1", &v), -1);
	assert_int_equal(fosd_parse_size("12X", &v), -1);
	assert_int_equal(fosd_parse_size("", &v), -1);
	assert_int_equal(fosd_parse_size("99999999999T", &v), -1);
	assert_int_equal(fosd_parse_duration_ms("250ms", &v), 0);
	assert_int_equal(v, 250);
	assert_int_equal(fosd_parse_duration_ms("30", &v), 0);
	assert_int_equal(v, 30000);
	assert_int_equal(fosd_parse_duration_ms("1.5s", &v), 0);
	assert_int_equal(v, 1500);
	assert_int_equal(fosd_parse_duration_ms("5m", &v), 0);
	assert_int_equal(v, 300000);
	assert_int_equal(fosd_parse_duration_ms("2h", &v), 0);
	assert_int_equal(v, 7200000);
	assert_int_equal(fosd_parse_duration_ms("3 days", &v), -1);

	char path[] = "/tmp/fosd-conf-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	const char *text = "# a comment\n"
			   "listen = ipc:///tmp/a.sock   # trailing comment\n"
			   "listen = tcp://127.0.0.1:5555\n"
			   "allow_insecure_tcp = true\n" /* tcp without a tokens file */
			   "\n"
			   "cache_bytes = 2G\n"
			   "context-ttl = 90s\n"
			   "workers = 3\n"
			   "ipc_mode = 0660\n"
			   "log_level = debug\n";
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	fosd_config c;
	char msg[512];
	fosd_config_defaults(&c);
	char *argv[] = {"fosd", "--config", path, "--workers", "5", "--cache-bytes=512M", NULL};
	assert_int_equal(fosd_config_parse_args(&c, 6, argv, msg, sizeof msg), 0);
	assert_int_equal(fosd_config_finish(&c, msg, sizeof msg), 0);
	assert_int_equal(c.n_listen, 2);
	assert_string_equal(c.listen[0], "ipc:///tmp/a.sock");
	assert_string_equal(c.listen[1], "tcp://127.0.0.1:5555");
	assert_int_equal(c.cache_bytes, 512ull << 20); /* the flag wins */
	assert_int_equal(c.context_ttl_ms, 90000);
	assert_int_equal(c.workers, 5);
	assert_int_equal(c.ipc_mode, 0660);
	assert_int_equal(c.log_level, 3);
	fosd_config_free(&c);
	/* --listen flags replace the file's */
	fosd_config_defaults(&c);
	char *argv2[] = {"fosd", "--listen", "ipc:///tmp/b.sock", "--config", path, NULL};
	assert_int_equal(fosd_config_parse_args(&c, 5, argv2, msg, sizeof msg), 0);
	assert_int_equal(c.n_listen, 1);
	assert_string_equal(c.listen[0], "ipc:///tmp/b.sock");
	fosd_config_free(&c);
	/* errors name the file and line, or the flag */
	FILE *f = fopen(path, "w");
	fputs("workers = 2\nnonsense = 1\n", f);
	fclose(f);
	fosd_config_defaults(&c);
	char *argv3[] = {"fosd", "--config", path, NULL};
	assert_int_equal(fosd_config_parse_args(&c, 3, argv3, msg, sizeof msg), -1);
	assert_non_null(strstr(msg, ":2:"));
	assert_non_null(strstr(msg, "nonsense"));
	fosd_config_free(&c);
	fosd_config_defaults(&c);
	char *argv4[] = {"fosd", "--workers", "0", NULL};
	assert_int_equal(fosd_config_parse_args(&c, 3, argv4, msg, sizeof msg), -1);
	char *argv5[] = {"fosd", "--backend", "tpu", NULL};
	assert_int_equal(fosd_config_parse_args(&c, 3, argv5, msg, sizeof msg), -1);
	char *argv6[] = {"fosd", "--listen", "nourl", NULL};
	assert_int_equal(fosd_config_parse_args(&c, 3, argv6, msg, sizeof msg), -1);
	char *argv7[] = {"fosd", "--tokens", "/etc/fosd/tokens", NULL}; /* read at start, not here */
	assert_int_equal(fosd_config_parse_args(&c, 3, argv7, msg, sizeof msg), 0);
	assert_string_equal(c.tokens_path, "/etc/fosd/tokens");
	fosd_config_free(&c);
	/* defaults */
	fosd_config_defaults(&c);
	assert_int_equal(fosd_config_finish(&c, msg, sizeof msg), 0);
	assert_string_equal(c.listen[0], "ipc:///tmp/fosd.sock");
	assert_int_equal(c.max_message_bytes, 1ull << 30);
	fosd_config_free(&c);
	unlink(path);
}

/* deploy/fosd.conf.example with every setting uncommented parses, to the documented defaults */
static void test_config_example(void **state)
{
	(void)state;
	FILE *in = fopen("deploy/fosd.conf.example", "r");
	if (!in) {
		char p[1200];
		snprintf(p, sizeof p, "%s/../deploy/fosd.conf.example", tsrv_build_dir());
		in = fopen(p, "r");
	}
	if (!in)
		skip();
	char path[] = "/tmp/fosd-example-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	FILE *out = fdopen(fd, "w");
	char line[1024];
	int keys = 0;
	while (fgets(line, sizeof line, in)) {
		if (line[0] == '#' && line[1] >= 'a' && line[1] <= 'z') {
			fputs(line + 1, out);
			keys++;
		} else {
			fputs(line, out);
		}
	}
	fclose(in);
	fclose(out);
	assert_true(keys >= 15);
	fosd_config c, d;
	char msg[512];
	fosd_config_defaults(&c);
	fosd_config_defaults(&d);
	int rc = fosd_config_load_file(&c, path, msg, sizeof msg);
	if (rc)
		fail_msg("%s", msg);
	assert_int_equal(c.n_listen, 2);
	assert_int_equal(c.cache_bytes, d.cache_bytes);
	assert_int_equal(c.context_bytes, d.context_bytes);
	assert_int_equal(c.context_ttl_ms, d.context_ttl_ms);
	assert_int_equal(c.max_message_bytes, d.max_message_bytes);
	assert_int_equal(c.drain_timeout_ms, d.drain_timeout_ms);
	assert_int_equal(c.workers, d.workers);
	assert_int_equal(c.concurrency, d.concurrency);
	assert_int_equal(c.ipc_mode, d.ipc_mode);
	assert_int_equal(c.dedup_window_ms, d.dedup_window_ms);
	fosd_config_free(&c);
	fosd_config_free(&d);
	unlink(path);
}

/* ---- metrics -------------------------------------------------------------------------------- */

static void test_metrics(void **state)
{
	(void)state;
	fosd_metrics m;
	assert_int_equal(fosd_metrics_init(&m), 0);
	/* 100 OK requests of 1..100 us (answered without the executor: no lane times), and 5 failures */
	for (int i = 1; i <= 100; i++)
		fosd_metrics_record(&m, FOSD_OP_FORWARD, 0, (uint64_t)i, 1000, 0, 0, 0, 10, 20);
	for (int i = 0; i < 5; i++)
		fosd_metrics_record(&m, FOSD_OP_FORWARD, 5, 1000000, 1000, 0, 0, 0, 10, 0);
	fosd_metrics_snap *snap = malloc(sizeof *snap);
	assert_non_null(snap);
	fosd_metrics_snapshot(&m, snap);
	const fosd_op_snap *om = &snap->ops[FOSD_OP_FORWARD];
	assert_int_equal(om->requests, 105);
	assert_int_equal(om->codes[0], 100);
	assert_int_equal(om->codes[5], 5);
	assert_int_equal(om->lat[0].count, 100);
	assert_int_equal(om->lat[0].max_us, 100);
	assert_int_equal(om->bytes_in, 1050);
	assert_int_equal(om->bytes_out, 2000);
	/* values below 256 us have a bucket each: the ceil(q * 100)-th value exactly */
	assert_int_equal(om->lat[0].p50_us, 50);
	assert_int_equal(om->lat[0].p90_us, 90);
	assert_int_equal(om->lat[0].p99_us, 99);
	assert_int_equal(om->lat[0].p999_us, 100);
	assert_int_equal(fosd_hist_quantile(&m.ops[FOSD_OP_FORWARD].lat[0], 0.5), 50);
	/* 1 + 2 + ... + 100 = 5050 us over 100 */
	assert_true(fosd_hist_mean(&m.ops[FOSD_OP_FORWARD].lat[0]) == 50.5);
	assert_int_equal(om->lat[0].sum_us, 5050);
	/* the failures have their own distribution: 5 of 1 s */
	assert_int_equal(om->lat[5].count, 5);
	assert_int_equal(om->lat[5].p50_us, 1000000);
	/* no lane times: no queue or run */
	assert_int_equal(om->queue.count, 0);
	assert_int_equal(om->run.count, 0);
	assert_int_equal(om->run.p50_us, 0);
	free(snap);
	assert_string_equal(fosd_op_name(FOSD_OP_RELEASE_CONTEXT), "release_context");
	fosd_metrics_destroy(&m);
}

/* Queue (receipt to lane) and run (lane to done) of executor ops: OK requests with both lane times
 * only. Times in ns, recorded in whole microseconds (truncated). */
static void test_metrics_queue_run(void **state)
{
	(void)state;
	fosd_metrics m;
	assert_int_equal(fosd_metrics_init(&m), 0);
	const uint64_t t0 = 5000000000ull; /* receipt */
	/* 10 linear requests: queued 3 us + 999 ns (-> 3), ran i * 1000 us + 500 ns (-> i * 1000);
	 * the first 4 ran at once on the receiving thread */
	for (uint64_t i = 1; i <= 10; i++) {
		uint64_t lane = t0 + 3999, done = lane + i * 1000000u + 500;
		fosd_metrics_record(&m, FOSD_OP_LINEAR, 0, (done - t0) / 1000 + 7, t0, lane, done, i <= 4, 100, 200);
	}
	/* an executed request that failed (though run at once), one whose lane never finished (done 0),
	 * one the executor never took (lane 0), and a health request: none of them has a queue or run
	 * time, nor counts as run at once */
	fosd_metrics_record(&m, FOSD_OP_LINEAR, 13, 50, t0, t0 + 1000, t0 + 2000, 1, 1, 1);
	fosd_metrics_record(&m, FOSD_OP_LINEAR, 0, 60, t0, t0 + 1000, 0, 1, 1, 1);
	fosd_metrics_record(&m, FOSD_OP_LINEAR, 0, 70, t0, 0, 0, 0, 1, 1);
	fosd_metrics_record(&m, FOSD_OP_HEALTH, 0, 3, t0, 0, 0, 0, 1, 1);
	fosd_metrics_snap *snap = malloc(sizeof *snap);
	assert_non_null(snap);
	fosd_metrics_snapshot(&m, snap);
	const fosd_op_snap *om = &snap->ops[FOSD_OP_LINEAR];
	assert_int_equal(om->requests, 13);
	assert_int_equal(om->lat[0].count, 12);
	assert_int_equal(om->lat[13].count, 1);
	assert_int_equal(om->queue.count, 10);
	assert_int_equal(om->run.count, 10);
	assert_int_equal(om->ran_at_once, 4);
	assert_int_equal(om->queue.max_us, 3);
	assert_int_equal(om->queue.sum_us, 30);
	assert_int_equal(om->queue.p50_us, 3); /* all 3 us: exact below 256 */
	assert_int_equal(om->run.max_us, 10000);
	assert_int_equal(om->run.sum_us, 55000);
	/* without copy times all of the run is compute */
	assert_int_equal(om->compute.sum_us, 55000);
	assert_int_equal(om->in_copy.count, 10);
	assert_int_equal(om->in_copy.max_us, 0);
	assert_int_equal(om->out_copy.max_us, 0);
	/* run p50: the 5th of 10 values, 5000 us: 5000 >> 5 = 156, its bucket [156 * 32, 157 * 32) =
	 * [4992, 5024) -> 5023; p99: the 10th, 10000 us, in [156 * 64, 157 * 64) = [9984, 10048) ->
	 * 10047, clamped to the max 10000 */
	assert_int_equal(om->run.p50_us, 5023);
	assert_int_equal(om->run.p99_us, 10000);
	const fosd_op_snap *oh = &snap->ops[FOSD_OP_HEALTH];
	assert_int_equal(oh->lat[0].count, 1);
	assert_int_equal(oh->queue.count, 0);
	assert_int_equal(oh->run.count, 0);
	free(snap);
	fosd_metrics_destroy(&m);
}

/* ---- dedup ---------------------------------------------------------------------------------- */

static void test_dedup(void **state)
{
	(void)state;
	fosd_dedup dd;
	assert_int_equal(fosd_dedup_init(&dd, 60000, FOSD_DEDUP_MIN_BYTES), 0); /* 1024 ids */
	struct fosd_request *s1 = (struct fosd_request *)calloc(1, 4096), *s2 = (struct fosd_request *)calloc(1, 4096);
	int reg;
	assert_int_equal(fosd_dedup_begin(&dd, 1, 10, s1, &reg), FOSD_DEDUP_NEW);
	assert_int_equal(reg, 1);
	assert_int_equal(fosd_dedup_begin(&dd, 1, 10, s2, &reg), FOSD_DEDUP_WAIT);
	assert_int_equal(fosd_dedup_begin(&dd, 2, 10, s2, &reg), FOSD_DEDUP_NEW); /* another client */
	assert_ptr_equal(fosd_dedup_end(&dd, 1, 10, fosd_now_ns()), s2);
	assert_int_equal(fosd_dedup_begin(&dd, 1, 10, s1, &reg), FOSD_DEDUP_DONE);
	assert_null(fosd_dedup_end(&dd, 2, 10, fosd_now_ns()));
	/* at most 1024 ids are remembered: after 1024 more, (1, 10) is forgotten */
	for (uint64_t id = 20; id < 20 + 1024; id++) {
		assert_int_equal(fosd_dedup_begin(&dd, 1, id, s1, &reg), FOSD_DEDUP_NEW);
		fosd_dedup_end(&dd, 1, id, fosd_now_ns());
	}
	assert_int_equal(fosd_dedup_begin(&dd, 1, 10, s1, &reg), FOSD_DEDUP_NEW);
	fosd_dedup_destroy(&dd);
	free(s1);
	free(s2);
}

/* ---- weight cache and contexts on the CPU backend ------------------------------------------- */

static fos_backend *g_be;

static fosd_weight *make_weight(const char *name, uint64_t version, int keep_master)
{
	fosd_weight *w = calloc(1, sizeof *w);
	snprintf(w->name, sizeof w->name, "%s", name);
	w->version = version;
	uint16_t *host = g_be->alloc(g_be, 128 * 128 * 2);
	for (int i = 0; i < 128 * 128; i++)
		host[i] = (uint16_t)(0x3c00 + (i * 7 + (int)version) % 512);
	fos_linear_opts o = fos_linear_opts_default();
	fos_err e;
	assert_int_equal(fos_qweight_make(g_be, host, 128, 128, &o, keep_master, 0, &w->qw, &e), 0);
	g_be->free(g_be, host);
	return w;
}

static void test_wcache(void **state)
{
	(void)state;
	fos_err e;
	g_be = fos_backend_cpu(1, &e);
	assert_non_null(g_be);
	fosd_weight *probe = make_weight("probe", 1, 1);
	size_t one = fos_qweight_bytes(&probe->qw);
	/* 128 x 128 with its master (every use): rowwise and columnwise codes 8192 + scales 1024 + amax
	 * 4 each, master 32768 */
	assert_int_equal(one, 2 * (8192 + 1024 + 4) + 32768);
	fos_qweight_free(g_be, &probe->qw);
	free(probe);

	fosd_wcache wc;
	char msg[512];
	assert_int_equal(fosd_wcache_init(&wc, g_be, 3 * one), 0);
	fosd_wcache_insert(&wc, make_weight("a", 1, 1));
	fosd_wcache_insert(&wc, make_weight("b", 1, 1));
	fosd_wcache_insert(&wc, make_weight("c", 1, 1));
	fosd_wcache_stats st;
	fosd_wcache_stats_get(&wc, &st);
	assert_int_equal(st.entries, 3);
	assert_int_equal(st.bytes, 3 * one);
	/* use a: b is now the least recently used */
	fosd_weight *a;
	assert_int_equal(fosd_wcache_acquire(&wc, "a", 0, &a, msg, sizeof msg), 0);
	fosd_wcache_release(&wc, a);
	assert_int_equal(fosd_wcache_reserve(&wc, one, NULL, msg, sizeof msg), 0);
	assert_null(fosd_wcache_find(&wc, "b"));
	assert_non_null(fosd_wcache_find(&wc, "a"));
	fosd_wcache_insert(&wc, make_weight("d", 1, 1));
	/* c is LRU but in use, a is pinned: d is evicted next */
	fosd_weight *c;
	assert_int_equal(fosd_wcache_acquire(&wc, "c", 1, &c, msg, sizeof msg), 0);
	/* pinned while held (a put sets it before the insert; the cache counts what it may evict as
	 * references and attachment change) */
	assert_int_equal(fosd_wcache_acquire(&wc, "a", 0, &a, msg, sizeof msg), 0);
	a->pinned = 1;
	fosd_wcache_release(&wc, a);
	assert_int_equal(fosd_wcache_reserve(&wc, one, NULL, msg, sizeof msg), 0);
	assert_null(fosd_wcache_find(&wc, "d"));
	assert_non_null(fosd_wcache_find(&wc, "c"));
	/* nothing more can go: a pinned, c busy */
	assert_int_equal(fosd_wcache_reserve(&wc, 2 * one, NULL, msg, sizeof msg), FOS__CODE__RESOURCE_EXHAUSTED);
	/* replacing c while it is in use: the old entry lives until released */
	fosd_wcache_insert(&wc, make_weight("c", 2, 1));
	fosd_wcache_stats_get(&wc, &st);
	assert_int_equal(st.entries, 2);
	assert_int_equal(st.bytes, 3 * one);
	assert_int_equal(c->version, 1);
	assert_true(c->detached);
	fosd_wcache_release(&wc, c);
	fosd_wcache_stats_get(&wc, &st);
	assert_int_equal(st.bytes, 2 * one);
	/* versions */
	assert_int_equal(fosd_wcache_acquire(&wc, "c", 1, &c, msg, sizeof msg), FOS__CODE__FAILED_PRECONDITION);
	assert_int_equal(fosd_wcache_acquire(&wc, "zz", 0, &c, msg, sizeof msg), FOS__CODE__NOT_FOUND);
	assert_int_equal(fosd_wcache_drop(&wc, "c", msg, sizeof msg), 0);
	assert_int_equal(fosd_wcache_drop(&wc, "c", msg, sizeof msg), FOS__CODE__NOT_FOUND);
	fosd_wcache_stats_get(&wc, &st);
	assert_int_equal(st.entries, 1);
	assert_int_equal(st.bytes, one);
	assert_int_equal(st.evictions, 2);

	/* contexts: budget of 2 contexts, TTL 50 ms */
	fosd_contexts cx;
	fosd_weight *w;
	assert_int_equal(fosd_wcache_acquire(&wc, "a", 0, &w, msg, sizeof msg), 0);
	uint16_t *x = g_be->alloc(g_be, 128 * 128 * 2), *y = g_be->alloc(g_be, 128 * 128 * 2);
	for (int i = 0; i < 128 * 128; i++)
		x[i] = (uint16_t)(0x3f00 + i % 100);
	fos_linear_opts o = fos_linear_opts_default();
	o.override = FOS_OVR_HIGH_PRECISION;
	fosd_context *ctxs[3];
	size_t cbytes = 0;
	for (int i = 0; i < 3; i++) {
		ctxs[i] = calloc(1, sizeof *ctxs[i]);
		assert_int_equal(fos_linear_forward(g_be, x, 128, &w->qw, &o, NULL, y, &ctxs[i]->saved, &e), 0);
		cbytes = fos_saved_bytes(&ctxs[i]->saved);
		ctxs[i]->w = w;
		fosd_wcache_acquire_ref(&wc, w);
	}
	assert_int_equal(cbytes, 128 * 128 * 2); /* high_precision keeps X */
	assert_int_equal(fosd_contexts_init(&cx, g_be, &wc, 2 * cbytes, 50), 0);
	uint64_t ids[3];
	for (int i = 0; i < 3; i++) {
		assert_int_equal(fosd_contexts_add(&cx, ctxs[i], msg, sizeof msg), 0);
		ids[i] = ctxs[i]->id;
		assert_int_not_equal(ids[i], 0);
	}
	fosd_contexts_stats cst;
	fosd_contexts_stats_get(&cx, &cst);
	assert_int_equal(cst.count, 2);
	assert_int_equal(cst.evicted, 1);
	fosd_context *got;
	assert_int_equal(fosd_contexts_get(&cx, ids[0], &got, msg, sizeof msg), FOS__CODE__NOT_FOUND);
	assert_non_null(strstr(msg, "evicted"));
	assert_int_equal(fosd_contexts_get(&cx, ids[2], &got, msg, sizeof msg), 0);
	assert_ptr_equal(got, ctxs[2]);
	assert_int_equal(fosd_contexts_release(&cx, ids[2], msg, sizeof msg), 0);
	assert_int_equal(fosd_contexts_release(&cx, ids[2], msg, sizeof msg), FOS__CODE__NOT_FOUND);
	assert_non_null(strstr(msg, "released"));
	/* expiry */
	usleep(80 * 1000);
	assert_int_equal(fosd_contexts_sweep(&cx, fosd_now_ns()), 1);
	assert_int_equal(fosd_contexts_get(&cx, ids[1], &got, msg, sizeof msg), FOS__CODE__NOT_FOUND);
	assert_non_null(strstr(msg, "expired"));
	fosd_contexts_stats_get(&cx, &cst);
	assert_int_equal(cst.count, 0);
	assert_int_equal(cst.bytes, 0);
	assert_int_equal(cst.expired, 1);
	/* a context larger than the whole budget */
	fosd_context *huge = calloc(1, sizeof *huge);
	assert_int_equal(fos_linear_forward(g_be, x, 128, &w->qw, &o, NULL, y, &huge->saved, &e), 0);
	huge->w = w;
	fosd_wcache_acquire_ref(&wc, w);
	cx.budget = 100;
	assert_int_equal(fosd_contexts_add(&cx, huge, msg, sizeof msg), FOS__CODE__RESOURCE_EXHAUSTED);
	/* all references were given back: only our own remains */
	assert_int_equal(w->refs, 1);
	fosd_wcache_release(&wc, w);
	fosd_contexts_destroy(&cx);
	g_be->free(g_be, x);
	g_be->free(g_be, y);
	fosd_wcache_destroy(&wc);
	g_be->destroy(g_be);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_split),
		cmocka_unit_test(test_tensor_get),
		cmocka_unit_test(test_msg_build),
		cmocka_unit_test(test_validate_linear),
		cmocka_unit_test(test_validate_other_ops),
		cmocka_unit_test(test_config),
		cmocka_unit_test(test_config_example),
		cmocka_unit_test(test_metrics),
		cmocka_unit_test(test_metrics_queue_run),
		cmocka_unit_test(test_dedup),
		cmocka_unit_test(test_wcache),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
