/* weights_repo.h: fosd's weight repository (`--weights DIR`): at start, before fosd listens, every
 * *.safetensors file of DIR (each BF16 or F32 (N, K) tensor a weight named by its tensor name) and
 * every *.npy file (bf16 '<u2' or float32 '<f4' (N, K), the weight named by the file name without
 * .npy) is put into the weight cache, through the same validation and PutWeight handler as a
 * client's PutWeight; float32 is rounded to bf16 to nearest even, as `fos put-weight` does.
 *
 * DIR/weights.conf (optional) gives per-file options, one rule a line:
 *     GLOB key=value ...      # GLOB: fnmatch(3) on the file name; '#' starts a comment
 * keys: version=N (default 1), weight_block=16x16|1x16, err_mode=mae|mse, bound=256|448,
 * pin=, drop_master=, eager_columnwise= (true|false), uses=LIST (comma-separated forward,
 * quantized, high_precision, dequantized: what the weights serve, PutWeight's uses; default all),
 * match=GLOB (the tensors of a .safetensors file to load; default every one), tenant=NAME (the
 * tokens file's tenant owning the weights; default the anonymous tenant). Every rule matching a
 * file applies, in order; a later one overrides a key.
 *
 * A file is all or nothing: one with a bad header, a dtype other than bf16/f32, a shape that is
 * not (N, K) with N and K multiples of 16, a bad or duplicate weight name (within the repository),
 * or a put fosd refuses (e.g. the cache budget) is rejected with an error naming the file and why,
 * none of its weights stay cached, and fosd starts with the rest. A directory that cannot be read
 * or a bad weights.conf stops fosd from starting. */
#ifndef FOSD_WEIGHTS_REPO_H
#define FOSD_WEIGHTS_REPO_H

#include <stddef.h>

struct fosd_server;

/* Loads dir into srv's cache (srv initialized and its tenants set; executor not started). Returns
 * 0 (bad weight files are logged and skipped), or -1 with msg when dir or its weights.conf cannot
 * be used. */
int fosd_weights_repo_load(struct fosd_server *srv, const char *dir, char *msg, size_t msgsz);

#endif
