/* bench_smallm.h: bench_cuda's rows for the small-M forward that reads W's NVFP4 codes itself
 * (be->gemm_w4, kernels/cuda_smallm.cu; issue 28), included by bench_cuda.c (it uses its be, err,
 * CK, dev_rand, cmpf, g_ctx, op_gemm, l_ctx, op_fwd and row). W comes from HBM: a 256 MiB
 * memset (outside the timed interval) flushes L2 before every timed op; op and baseline alternate
 * run by run (median of 11 each, after warm-ups). Shapes (N x K) 4096x4096, 4096x14336 and
 * 14336x4096 at M = 1, 2, 4, 8, 16, 32, 64, 128 (variant rows at M = 2, 4, 8: variants 0, 1 and RP only):
 *   - the forward (4/6 quantize of X + the GEMM, no context: graph replay; 16x16 weight) as fosd
 *     runs it (gemm_w4 where be->gemm_w4_takes says so), and with gemm_w4 wherever it runs, against
 *     the plain bf16 cuBLASLt GEMM of the same shape (32 MiB workspace, heuristic's first choice);
 *   - at M <= 16, the forward with gemm_w4's variant "RP MT1 S10" (cuda_smallm_rp.cuh);
 *   - the same forward with be->gemm_w4 switched off (the path before: decode W + cuBLASLt);
 *   - the forward with row-scaled X, and the forward saving a context (quantized override);
 *   - be->gemm_w4 alone on the decoded X (the GEMM without the X quantize), and the X quantize alone
 *     (be->quantize, 4/6 per tensor with the decoded operand, launched directly);
 * and, with `smallm variants`, gemm_w4 alone for every kernel variant and timing probe (wrong bits,
 * named "PROBE"; the ring-depth sweeps of sessions 8 and 9 are in git history) (fos_cuda_smallm_variant:
 * tests/support_smallm_variants.h, in libfosbench.a, not in libfosnum). `smallm [variants] first`: only 4096x4096 at M = 1 (for a profiler run). */
#ifndef FOS_BENCH_SMALLM_H
#define FOS_BENCH_SMALLM_H

static void *sm_flush_buf;

static void sm_flush(void)
{
	CK(be->zero(be, sm_flush_buf, (size_t)256 << 20, &err));
}

static void sm_row(const char *what, const char *shape, op_fn f, void *c, op_fn bf, void *bc)
{
	double t, tb;
	time_pair_us_with(f, c, bf, bc, &t, &tb, sm_flush); /* L2 flushed before each */
	row(what, shape, t, "plain bf16 GEMM (L2 flushed)", tb);
}

typedef int (*sm_w4_fn)(fos_backend *, const uint16_t *, const fos_qtensor *, int64_t, const fos_gemm_epi *,
			uint16_t *, fos_err *);
static sm_w4_fn sm_w4_keep;

static void sm_fwd_old(void *c) /* the forward with gemm_w4 switched off */
{
	be->gemm_w4 = NULL;
	op_fwd(c);
	be->gemm_w4 = sm_w4_keep;
}

static void sm_fwd_w4(void *c) /* the forward with gemm_w4 wherever it runs (M <= 128) */
{
	CK(fos_cuda_smallm_variant(be, -2, 0, NULL, 0, &err));
	op_fwd(c);
	CK(fos_cuda_smallm_variant(be, -1, 0, NULL, 0, &err));
}



static void sm_fwd_save(void *c)
{
	l_ctx *x = c;
	fos_saved sv;
	CK(fos_linear_forward(be, x->x, x->m, x->qw, &x->o, NULL, x->y, &sv, &err));
	fos_saved_free(be, &sv);
}

typedef struct {
	const uint16_t *x;
	int64_t m, k;
	fos_qtensor *xq;
	uint16_t *xdec;
} sm_xq_ctx;
static void sm_xq(void *c) /* the forward's X quantize alone (4/6, per tensor, decoded operand) */
{
	sm_xq_ctx *s = c;
	fos_qcfg qc = fos_qcfg_default();
	CK(be->quantize(be, s->x, FOS_BF16, s->m, s->k, &qc, NULL, s->xq, s->xdec, &err));
}

typedef struct {
	const uint16_t *xdec;
	const fos_qtensor *w;
	int64_t m;
	uint16_t *y;
} sm_ctx;
static void sm_w4(void *c)
{
	sm_ctx *s = c;
	const fos_gemm_epi e = fos_gemm_epi_plain();
	CK(be->gemm_w4(be, s->xdec, s->w, s->m, &e, s->y, &err));
}

static int sm_rp = -1; /* the variant "RP MT1 S10" (warp-private rings, register pipeline) */

static void bench_smallm(int variants, int first)
{
	const int64_t shapes[][2] = {{4096, 4096}, {4096, 14336}, {14336, 4096}}, ms[] = {1, 2, 4, 8, 16, 32, 64, 128};
	if (!be->gemm_w4) {
		printf("bench_cuda: this backend has no gemm_w4\n");
		return;
	}
	sm_w4_keep = be->gemm_w4;
	for (int v = 0; v < fos_cuda_smallm_variants(); v++) {
		char name[64];
		CK(fos_cuda_smallm_variant(be, v, 0, name, sizeof name, &err));
		if (!strcmp(name, "RP MT1 S10"))
			sm_rp = v;
	}
	CK(fos_cuda_smallm_variant(be, -1, 0, NULL, 0, &err));
	sm_flush_buf = be->alloc(be, (size_t)256 << 20);
	if (!sm_flush_buf) {
		fprintf(stderr, "bench_cuda: out of device memory (L2 flush buffer)\n");
		exit(1);
	}
	for (int s = 0; s < (first ? 1 : 3); s++) {
		const int64_t n = shapes[s][0], k = shapes[s][1];
		uint16_t *w = dev_rand(n * k, 0.02f), *x = dev_rand(128 * k, 1.0f);
		uint16_t *y = be->alloc(be, (size_t)(128 * n) * 2), *xdec = be->alloc(be, (size_t)(128 * k) * 2);
		fos_linear_opts o = fos_linear_opts_default();
		fos_qweight qw;
		CK(fos_qweight_make_uses(be, w, n, k, &o, FOS_USES_ALL, &qw, &err));
		fos_qtensor xq;
		CK(fos_qtensor_alloc(be, &xq, 128, k, 0, &err));
		fos_qcfg qc = fos_qcfg_default();
		CK(be->quantize(be, x, FOS_BF16, 128, k, &qc, NULL, &xq, xdec, &err));
		fos_qtensor xq2; /* sm_xq's output: xq and xdec stay gemm_w4's input */
		CK(fos_qtensor_alloc(be, &xq2, 128, k, 0, &err));
		uint16_t *xdec2 = be->alloc(be, (size_t)(128 * k) * 2);
		for (int i = 0; i < (first ? 1 : 8); i++) {
			const int64_t m = ms[i];
			char shape[64];
			snprintf(shape, sizeof shape, "M=%lld N=%lld K=%lld", (long long)m, (long long)n, (long long)k);
			g_ctx g = {x, w, m, n, k, y, 32u << 20, 0, NULL, 0, 0};
			l_ctx l = {x, NULL, m, &qw, o, y, NULL, NULL, {0}};
			sm_ctx sc = {xdec, &qw.q, m, y};
			if (variants) {
				for (int v = 0; v < fos_cuda_smallm_all(); v++) {
					char name[64], what[128];
					CK(fos_cuda_smallm_variant(be, v, 0, name, sizeof name, &err));
					if (m > 1 && m < 16 && v > 1 && strncmp(name, "RP", 2))
						continue; /* M = 2, 4, 8: variants 0, 1 and RP only */
					snprintf(what, sizeof what, "gemm_w4 variant %d (%s)", v, name);
					sm_row(what, shape, sm_w4, &sc, op_gemm, &g);
				}
				CK(fos_cuda_smallm_variant(be, -1, 0, NULL, 0, &err));
				continue;
			}
			sm_row("smallm: forward, fosd's pick (graph replay)", shape, op_fwd, &l, op_gemm, &g);
			sm_row("smallm: forward, gemm_w4 (codes read by the GEMM)", shape, sm_fwd_w4, &l, op_gemm, &g);
			if (sm_rp >= 0 && m <= 16) { /* forced for the whole row: a forced variant drops recorded graphs */
				CK(fos_cuda_smallm_variant(be, sm_rp, 0, NULL, 0, &err));
				sm_row("smallm: forward, gemm_w4 variant RP MT1 S10", shape, op_fwd, &l, op_gemm, &g);
				CK(fos_cuda_smallm_variant(be, -1, 0, NULL, 0, &err));
			}
			sm_row("smallm: forward, decode W + cuBLASLt (gemm_w4 off)", shape, sm_fwd_old, &l, op_gemm, &g);
			sm_row("smallm: gemm_w4 alone (X decoded beforehand)", shape, sm_w4, &sc, op_gemm, &g);
			sm_xq_ctx xc = {x, m, k, &xq2, xdec2};
			sm_row("smallm: X quantize alone (be->quantize, no replay)", shape, sm_xq, &xc, op_gemm, &g);
			l.o.row_scaled = 1;
			sm_row("smallm: forward, row-scaled X", shape, op_fwd, &l, op_gemm, &g);
			l.o.row_scaled = 0;
			l.o.override = FOS_OVR_QUANTIZED;
			sm_row("smallm: forward + saved context (quantized)", shape, sm_fwd_save, &l, op_gemm, &g);
		}
		fos_qtensor_free(be, &xq);
		fos_qtensor_free(be, &xq2);
		fos_qweight_free(be, &qw);
		uint16_t *bufs[] = {w, x, y, xdec, xdec2};
		for (int i = 0; i < 5; i++)
			be->free(be, bufs[i]);
		CK(be->sync(be, &err));
	}
	be->free(be, sm_flush_buf);
	CK(be->sync(be, &err));
}

#endif
