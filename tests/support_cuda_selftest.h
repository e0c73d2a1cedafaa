/* support_cuda_selftest.h: the GPU proofs of the quantize kernels' fast forms
 * (support_cuda_selftest.cu, built into the GPU tests' library with CUDA=1; no program of fosd or
 * fos carries them). */
#ifndef FOS_SUPPORT_CUDA_SELFTEST_H
#define FOS_SUPPORT_CUDA_SELFTEST_H

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exhaustive self-tests on the GPU; each sets *bad to the number of inputs where the fast form
 * differs from the exact one (0 = proven equal over every input):
 *   which 0: x / D for D in {6, 1536, 2688}, every float x, against __fdiv_rn (3 * 2^32 inputs);
 *   which 1: the e2m1 code of rn(|x| * inv) by 3 comparisons, every float, against fos_e2m1_encode;
 *   which 2: the hardware e4m3 conversion against fos_e4m3_encode(min(x, 448)), every float;
 *   which 3: the e2m1 magnitude code by one FMA against the 3-comparison search, every float >= 0,
 *            every NaN and -0 (2^31 + 2^23 inputs);
 *   which 4: the decoded bf16 by byte permutes against the sdec table, every scale byte 0..127 x
 *            every 4-code chunk in every position, twice (2^28 elements);
 *   which 5: the sign bits of 16 bf16 by byte permutes, every 2^16 sign pattern x 64 fills (2^22
 *            blocks). */
int fos_cuda_selftest(fos_backend *be, int which, unsigned long long *bad, fos_err *err);

#ifdef __cplusplus
}
#endif

#endif
