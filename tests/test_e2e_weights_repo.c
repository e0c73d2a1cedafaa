/* test_e2e_weights_repo.c: `fosd --weights DIR` and `fos put-weight --safetensors`. The test writes
 * its own .safetensors files (a small writer here, independent of the reader) and .npy files, bf16
 * and float32, plus bad ones: a bad header, a truncated file, an F16 tensor, a shape fosd refuses
 * (after a good tensor of the same file: nothing of the file may stay), a duplicate name, a bad
 * .npy, a uint8 .npy. fosd must start with the good ones, with weights.conf's options applied,
 * log each bad file by name, and its repository weights must forward bit-identical to the
 * in-process reference and to the same weights put with `fos put-weight` (.npy and
 * --safetensors --match). A missing directory or a bad weights.conf stops fosd (exit 1);
 * tenant= gives the weights to a tokens-file tenant. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <sys/wait.h>

#include "cli.h"
#include "fos.h"
#include "support_safetensors.h"
#include "support_server.h"
#include "test_cli_harness.h"
#include "support_json.h"

static tsrv g_srv;
static char g_wdir[600]; /* the repository */
static fos_client *g_c;

/* f32 -> bf16 bits, round to nearest even (finite inputs). */
static uint16_t rne_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/* Deterministic floats that are not bf16 values (so rounding matters), ~N(0, 0.05). */
static void fill_f32(float *p, size_t n, uint64_t seed)
{
	uint64_t s = seed;
	for (size_t i = 0; i < n; i++)
		p[i] = (float)((int64_t)(th_rand(&s) % 200001) - 100000) / 1.0e6f + 1.0e-7f;
}

static void st_write(const char *path, const tst_in *t, int n, uint64_t extra_data, const char *header_override)
{
	assert_int_equal(tst_write(path, t, n, extra_data, header_override), 0);
}

static const char *wpath(const char *name)
{
	static char buf[8][800];
	static int i;
	i = (i + 1) % 8;
	snprintf(buf[i], sizeof buf[i], "%s/%s", g_wdir, name);
	return buf[i];
}

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
}

/* ---- the weights, kept for the references ------------------------------------------------------- */

enum { NW_A = 64 * 32, NF_A = 32 * 48, NB = 32 * 64, NC = 48 * 32 };
static uint16_t g_wa[NW_A];  /* "blk.0.w" (64, 32) bf16 in a.safetensors */
static float g_fa[NF_A];     /* "blk.1.w" (32, 48) f32 in a.safetensors */
static uint16_t g_b[NB];     /* b.npy (32, 64) bf16 */
static float g_cf[NC];       /* c.npy (48, 32) f32 */

static void write_repo(void)
{
	uint16_t norm[64];
	tsrv_fill_bf16(g_wa, NW_A, 11, 0.05f);
	fill_f32(g_fa, NF_A, 12);
	tsrv_fill_bf16(g_b, NB, 13, 0.05f);
	fill_f32(g_cf, NC, 14);
	tsrv_fill_bf16(norm, 64, 15, 1.0f);
	/* a.safetensors: two weights and a 1-d norm that weights.conf's match= leaves out */
	tst_in a[] = {{"blk.0.w", "BF16", 2, 64, 32, g_wa, sizeof g_wa},
		     {"blk.1.w", "F32", 2, 32, 48, g_fa, sizeof g_fa},
		     {"norm", "BF16", 1, 64, 0, norm, sizeof norm}};
	st_write(wpath("a.safetensors"), a, 3, 0, NULL);
	th_save(wpath("b.npy"), NPY_U2, 2, 32, 64, g_b);
	th_save(wpath("c.npy"), NPY_F4, 2, 48, 32, g_cf);
	/* bad files */
	st_write(wpath("bad_header.safetensors"), NULL, 0, 0, "{\"x\": [1, 2");
	tst_in f16[] = {{"f16.w", "F16", 2, 32, 32, g_wa, 32 * 32 * 2}};
	st_write(wpath("f16.safetensors"), f16, 1, 0, NULL);
	tst_in shp[] = {{"s.a_good", "BF16", 2, 32, 32, g_wa, 32 * 32 * 2}, {"s.b_bad", "BF16", 2, 24, 32, g_wa, 24 * 32 * 2}};
	st_write(wpath("shape.safetensors"), shp, 2, 0, NULL);
	tst_in dup[] = {{"blk.0.w", "BF16", 2, 32, 32, g_wa, 32 * 32 * 2}};
	st_write(wpath("dup.safetensors"), dup, 1, 0, NULL);
	tst_in tr[] = {{"t.w", "BF16", 2, 32, 32, g_wa, 32 * 32 * 2}};
	st_write(wpath("trunc.safetensors"), tr, 1, 64, NULL);
	write_text(wpath("bad.npy"), "\x93NUMPY but not really");
	uint8_t u8[32 * 32] = {0};
	th_save(wpath("u8.npy"), NPY_U1, 2, 32, 32, u8);
	write_text(wpath("README.txt"), "not a weight: ignored\n");
	write_text(wpath("weights.conf"), "# per-file options\n"
					  "a.safetensors match=blk.* err_mode=mse\n"
					  "b.npy version=3 weight_block=1x16 pin=true   # a comment\n"
					  "\n"
					  "*.npy bound=448\n"
					  "c.npy uses=forward,dequantized\n");
}

static int repo_setup(void **state)
{
	if (th_setup(state))
		return -1;
	snprintf(g_wdir, sizeof g_wdir, "%s/weights", th_dir());
	if (mkdir(g_wdir, 0755))
		return -1;
	write_repo();
	const char *args[] = {"--weights", g_wdir, NULL};
	if (tsrv_start(&g_srv, args))
		return -1;
	setenv("FOS_SERVER", g_srv.url, 1);
	fos_status st;
	return fos_connect(g_srv.url, NULL, 20000, &g_c, &st) ? -1 : 0;
}

static int repo_teardown(void **state)
{
	fos_close(g_c);
	int rc = tsrv_stop(&g_srv, SIGTERM, 10000);
	if (rc != 0)
		tsrv_dump_log(&g_srv);
	tsrv_cleanup(&g_srv);
	return th_teardown(state) || rc != 0 ? -1 : 0;
}

static const fos_weight_info *find_w(const fos_weight_info *l, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(l[i].name, name))
			return &l[i];
	return NULL;
}

/* fosd started with exactly the good weights, weights.conf applied, every bad file logged. */
static void test_repo_loaded(void **state)
{
	(void)state;
	fos_weight_info *l = NULL;
	size_t n = 0;
	fos_status st;
	assert_int_equal(fos_list_weights(g_c, &l, &n, &st), 0);
	if (n != 4)
		tsrv_dump_log(&g_srv);
	assert_int_equal(n, 4); /* blk.0.w blk.1.w b c */
	const fos_weight_info *a0 = find_w(l, n, "blk.0.w"), *a1 = find_w(l, n, "blk.1.w"), *b = find_w(l, n, "b"),
			      *c = find_w(l, n, "c");
	assert_non_null(a0);
	assert_non_null(a1);
	assert_non_null(b);
	assert_non_null(c);
	assert_true(a0->n == 64 && a0->k == 32 && a0->version == 1 && a0->err_mode == FOS_ERRMODE_MSE);
	assert_true(a1->n == 32 && a1->k == 48 && a1->err_mode == FOS_ERRMODE_MSE && !a1->pinned);
	assert_true(b->n == 32 && b->k == 64 && b->version == 3 && b->pinned && b->bound == 448);
	assert_int_equal(b->weight_block, FOS_BLOCKS_1X16);
	assert_true(c->n == 48 && c->k == 32 && c->version == 1 && c->bound == 448 && !c->pinned);
	assert_int_equal(c->weight_uses, FOS_WEIGHT_USE_FORWARD | FOS_WEIGHT_USE_DEQUANTIZED);
	assert_int_equal(b->weight_uses, FOS_WEIGHT_USE_FORWARD | FOS_WEIGHT_USE_QUANTIZED |
						 FOS_WEIGHT_USE_HIGH_PRECISION | FOS_WEIGHT_USE_DEQUANTIZED);
	assert_int_equal(c->weight_block, FOS_BLOCKS_16X16);
	free(l);
	static const char *const bad[] = {"bad_header.safetensors", "f16.safetensors", "shape.safetensors",
					  "dup.safetensors", "trunc.safetensors", "bad.npy", "u8.npy"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char needle[900];
		snprintf(needle, sizeof needle, "weights: rejected %s", wpath(bad[i]));
		if (!tsrv_log_contains(&g_srv, needle)) {
			tsrv_dump_log(&g_srv);
			fail_msg("the log does not say '%s'", needle);
		}
	}
	assert_true(tsrv_log_contains(&g_srv, "bad safetensors header"));
	assert_true(tsrv_log_contains(&g_srv, "tensor 'f16.w' has dtype F16"));
	assert_true(tsrv_log_contains(&g_srv, "tensor 's.b_bad'"));
	assert_true(tsrv_log_contains(&g_srv, "tensor 'blk.0.w': a weight of that name was already loaded"));
	assert_true(tsrv_log_contains(&g_srv, "truncated file?"));
	assert_true(tsrv_log_contains(&g_srv, "dtype uint8"));
	assert_true(tsrv_log_contains(&g_srv, "weights: 4 weights from 3 of 10 files"));
	/* the ready line comes after the repository */
	char log[65536];
	th_slurp(g_srv.log, log, sizeof log);
	const char *ld = strstr(log, "weights: 4 weights"), *rd = strstr(log, "] ready");
	if (!rd)
		rd = strstr(log, " ready");
	assert_non_null(ld);
	assert_non_null(rd);
	assert_true(ld < rd);
}

/* Y of weight name (N, K) for a fixed X through fosd: malloc'd m * n bf16. */
static uint16_t *forward(const char *name, uint64_t version, const uint16_t *x, int64_t m, int64_t n, int64_t k)
{
	fos_tensor tx = fos_tensor_2d(FOS_DTYPE_BF16, m, k, x), y = fos_tensor_out();
	fos_forward_opts fo = {version, 0, 0, 0, 0};
	fos_status st;
	int rc = fos_forward(g_c, name, &tx, NULL, &fo, &y, NULL, &st);
	if (rc)
		fail_msg("forward %s: %s", name, st.message);
	assert_int_equal(y.size, (size_t)(m * n * 2));
	return y.data;
}

static void check_ref(const uint16_t *y, const uint16_t *x, const uint16_t *w, int64_t m, int64_t n, int64_t k,
		      int err_mode, int bound, int block)
{
	fos_linear_opts o = fos_linear_opts_default();
	o.err_mode = err_mode;
	o.bound = bound;
	o.weight_block = block;
	uint16_t *ry = malloc((size_t)(m * n * 2));
	assert_int_equal(tsrv_ref_linear(x, w, NULL, NULL, m, n, k, &o, ry, NULL, NULL, NULL), 0);
	assert_memory_equal(y, ry, (size_t)(m * n * 2));
	free(ry);
}

/* Repository weights forward like the in-process reference and like the same files put with fos
 * put-weight. */
static void test_repo_forward_bits(void **state)
{
	(void)state;
	enum { M = 32 };
	uint16_t x[M * 64], wbits[NC], wabits[NF_A];
	tsrv_fill_bf16(x, M * 64, 21, 1.0f);
	for (int i = 0; i < NC; i++)
		wbits[i] = rne_bf16(g_cf[i]);
	for (int i = 0; i < NF_A; i++)
		wabits[i] = rne_bf16(g_fa[i]);
	/* c.npy (f32, rounded) and b.npy against the reference */
	uint16_t *yc = forward("c", 0, x, M, 48, 32);
	check_ref(yc, x, wbits, M, 48, 32, FOS_ERR_MAE, 448, FOS_BLOCK_16X16);
	uint16_t *yb = forward("b", 0, x, M, 32, 64);
	check_ref(yb, x, g_b, M, 32, 64, FOS_ERR_MAE, 448, FOS_BLOCK_1X16);
	uint16_t *y0 = forward("blk.0.w", 0, x, M, 64, 32);
	check_ref(y0, x, g_wa, M, 64, 32, FOS_ERR_MSE, 256, FOS_BLOCK_16X16);
	uint16_t *y1 = forward("blk.1.w", 0, x, M, 32, 48);
	check_ref(y1, x, wabits, M, 32, 48, FOS_ERR_MSE, 256, FOS_BLOCK_16X16);

	/* the same .npy put by the CLI under another name */
	th_result r;
	th_run(&r, "put-weight", "c.cli", wpath("c.npy"), "--bound", "448", NULL);
	th_expect_ok(&r);
	uint16_t *yc2 = forward("c.cli", 0, x, M, 48, 32);
	assert_memory_equal(yc, yc2, sizeof(uint16_t) * M * 48);

	/* the checkpoint's blk.* put by the CLI as version 2 (replacing the repository's) */
	th_run(&r, "put-weight", "--safetensors", wpath("a.safetensors"), "--match", "blk.*", "--version", "2", "--err",
	       "mse", NULL);
	th_expect_ok(&r);
	assert_non_null(strstr(r.out, "cached blk.0.w version 2: (64, 32)"));
	assert_non_null(strstr(r.out, "cached blk.1.w version 2: (32, 48)"));
	assert_non_null(strstr(r.out, "cached 2 weights from "));
	assert_non_null(strstr(r.out, "(1 tensor not matched)"));
	uint16_t *y0b = forward("blk.0.w", 2, x, M, 64, 32), *y1b = forward("blk.1.w", 2, x, M, 32, 48);
	assert_memory_equal(y0, y0b, sizeof(uint16_t) * M * 64);
	assert_memory_equal(y1, y1b, sizeof(uint16_t) * M * 32);
	free(yc), free(yb), free(y0), free(y1), free(yc2), free(y0b), free(y1b);
}

static void test_put_safetensors_cli(void **state)
{
	(void)state;
	th_result r;
	/* --match one tensor, --json */
	th_run(&r, "put-weight", "--safetensors", wpath("a.safetensors"), "--match", "blk.1.*", "--version", "7",
	       "--pin", "--json", NULL);
	th_expect_ok(&r);
	cli_jv v;
	fos_err e = {0, ""};
	if (cli_json_parse(r.out, strlen(r.out), &v, &e))
		fail_msg("--json output is not JSON (%s): %s", e.msg, r.out);
	assert_string_equal(cli_json_get(&v, "safetensors")->str, wpath("a.safetensors"));
	const cli_jv *ws = cli_json_get(&v, "weights");
	assert_int_equal(ws->n, 1);
	assert_string_equal(cli_json_get(&ws->items[0], "name")->str, "blk.1.w");
	assert_true(cli_json_get(&ws->items[0], "version")->num == 7);
	assert_true(cli_json_get(&ws->items[0], "pinned")->b);
	assert_true(cli_json_get(&v, "skipped")->num == 2);
	cli_json_free(&v);
	/* nothing matches */
	th_run(&r, "put-weight", "--safetensors", wpath("a.safetensors"), "--match", "zzz*", NULL);
	th_expect_fail(&r, 1, "no tensor name matches --match 'zzz*' (3 tensors in the file)");
	/* every tensor: the 1-d norm is refused before anything is sent */
	th_run(&r, "put-weight", "--safetensors", wpath("a.safetensors"), "--version", "9", NULL);
	th_expect_fail(&r, 1, "tensor 'norm' has shape (64,)");
	fos_weight_info *l = NULL;
	size_t n = 0;
	fos_status st;
	assert_int_equal(fos_list_weights(g_c, &l, &n, &st), 0);
	for (size_t i = 0; i < n; i++)
		assert_int_not_equal(l[i].version, 9);
	free(l);
	/* bad files, named */
	th_run(&r, "put-weight", "--safetensors", wpath("f16.safetensors"), NULL);
	th_expect_fail(&r, 1, "tensor 'f16.w' has dtype F16");
	th_run(&r, "put-weight", "--safetensors", wpath("bad_header.safetensors"), NULL);
	th_expect_fail(&r, 1, "bad_header.safetensors: bad safetensors header");
	th_run(&r, "put-weight", "--safetensors", wpath("trunc.safetensors"), NULL);
	th_expect_fail(&r, 1, "trunc.safetensors: tensor 't.w': data_offsets");
	th_run(&r, "put-weight", "--safetensors", wpath("b.npy"), NULL);
	th_expect_fail(&r, 1, "b.npy: not a safetensors file");
	/* fosd refuses a shape: the error names the tensor and what was cached before it */
	th_run(&r, "put-weight", "--safetensors", wpath("shape.safetensors"), "--version", "5", NULL);
	th_expect_fail(&r, 1, "put-weight s.b_bad from ");
	assert_non_null(strstr(r.err, "(1 of 2 weights cached before it)"));
	/* command line */
	th_run(&r, "put-weight", "w", wpath("b.npy"), "--match", "x*", NULL);
	th_expect_fail(&r, 2, "--match selects tensors of a --safetensors FILE");
	th_run(&r, "put-weight", "w", "--safetensors", wpath("a.safetensors"), NULL);
	th_expect_fail(&r, 2, "unexpected argument 'w'");
	th_run(&r, "put-weight", "--help", NULL);
	th_expect_ok(&r);
	assert_non_null(strstr(r.out, "--safetensors FILE"));
	assert_non_null(strstr(r.out, "--match GLOB"));
}

/* Runs fosd with extra args to its exit (it must not start); returns the exit status, stderr in err. */
static int fosd_exit(const char *const *extra, char *err, size_t errsz)
{
	tsrv s;
	memset(&s, 0, sizeof s);
	snprintf(s.dir, sizeof s.dir, "%s", th_dir());
	snprintf(s.url, sizeof s.url, "ipc://%s/never.sock", th_dir());
	char bin[1024], ep[700];
	const char *argv[64];
	tsrv_fosd_argv(&s, extra, bin, sizeof bin, argv);
	snprintf(ep, sizeof ep, "%s/fosd-exit.err", th_dir());
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int fd = open(ep, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fd < 0 || dup2(fd, 2) < 0)
			_exit(126);
		execv(bin, (char *const *)argv);
		_exit(127);
	}
	int stt;
	while (waitpid(pid, &stt, 0) < 0)
		assert_int_equal(errno, EINTR);
	th_slurp(ep, err, errsz);
	return WIFEXITED(stt) ? WEXITSTATUS(stt) : 128 + WTERMSIG(stt);
}

static void test_repo_refuses_to_start(void **state)
{
	(void)state;
	char err[16384], dir[700], missing[700];
	snprintf(missing, sizeof missing, "%s/no-such-dir", th_dir());
	const char *a1[] = {"--weights", missing, NULL};
	assert_int_equal(fosd_exit(a1, err, sizeof err), 1);
	assert_non_null(strstr(err, "weights: cannot read the directory"));
	assert_non_null(strstr(err, "no-such-dir"));
	/* bad weights.conf lines */
	static const struct {
		const char *conf, *why;
	} bad[] = {
		{"x.npy pin=maybe\n", "line 1: pin 'maybe' is not true or false"},
		{"# c\nx.npy colour=red\n", "line 2: unknown key 'colour'"},
		{"x.npy\n", "line 1: 'x.npy' has no key=value options"},
		{"x.npy version=0\n", "version '0' is not a whole number >= 1"},
		{"x.npy weight_block=2x2\n", "weight_block '2x2' is not 16x16 or 1x16"},
		{"x.npy bound\n", "'bound' is not key=value"},
		{"x.npy uses=forward,backward\n", "uses 'forward,backward': unknown use 'backward'"},
		{"x.npy uses=forward,forward\n", "repeated use 'forward'"},
		{"x.npy uses=forward,\n", "ends with a comma"},
		{"x.npy tenant=bob\n", "tenant 'bob' is not in the tokens file (fosd has no --tokens)"},
	};
	snprintf(dir, sizeof dir, "%s/badconf", th_dir());
	assert_int_equal(mkdir(dir, 0755), 0);
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char conf[800];
		snprintf(conf, sizeof conf, "%s/weights.conf", dir);
		write_text(conf, bad[i].conf);
		const char *a[] = {"--weights", dir, NULL};
		int rc = fosd_exit(a, err, sizeof err);
		if (rc != 1 || !strstr(err, bad[i].why) || !strstr(err, "weights.conf"))
			fail_msg("%s: exit %d, stderr: %s", bad[i].conf, rc, err);
	}
}

/* tenant=: the weights belong to that tokens-file tenant, invisible to another one. */
static void test_repo_tenant(void **state)
{
	(void)state;
	char dir[700], tokens[700];
	snprintf(dir, sizeof dir, "%s/tenant-repo", th_dir());
	snprintf(tokens, sizeof tokens, "%s/tokens", th_dir());
	assert_int_equal(mkdir(dir, 0755), 0);
	char p1[800], p2[800];
	snprintf(p1, sizeof p1, "%s/t.npy", dir);
	snprintf(p2, sizeof p2, "%s/weights.conf", dir);
	th_save(p1, NPY_U2, 2, 32, 32, g_wa);
	write_text(p2, "t.npy tenant=alice pin=true\n");
	write_text(tokens, "alice alice-secret-0123456789\nbob bob-secret-0123456789ab\n");
	assert_int_equal(chmod(tokens, 0600), 0);
	tsrv s;
	const char *args[] = {"--tokens", tokens, "--weights", dir, NULL};
	assert_int_equal(tsrv_start(&s, args), 0);
	fos_client *alice = NULL, *bob = NULL;
	fos_status st;
	assert_int_equal(fos_connect(s.url, "alice-secret-0123456789", 20000, &alice, &st), 0);
	assert_int_equal(fos_connect(s.url, "bob-secret-0123456789ab", 20000, &bob, &st), 0);
	fos_weight_info *l = NULL;
	size_t n = 0;
	assert_int_equal(fos_list_weights(alice, &l, &n, &st), 0);
	assert_int_equal(n, 1);
	assert_string_equal(l[0].name, "t");
	assert_true(l[0].pinned);
	free(l);
	assert_int_equal(fos_list_weights(bob, &l, &n, &st), 0);
	assert_int_equal(n, 0);
	free(l);
	fos_close(alice);
	fos_close(bob);
	assert_int_equal(tsrv_stop(&s, SIGTERM, 10000), 0);
	tsrv_cleanup(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_repo_loaded),
		cmocka_unit_test(test_repo_forward_bits),
		cmocka_unit_test(test_put_safetensors_cli),
		cmocka_unit_test(test_repo_refuses_to_start),
		cmocka_unit_test(test_repo_tenant),
	};
	return cmocka_run_group_tests(tests, repo_setup, repo_teardown);
}
