/* shm_copy.c: copies to and from a client's shared memory that survive the client shrinking the
 * object under fosd. A page beyond the new end of a shared mapping raises SIGBUS; fosd's handler
 * jumps back out of the copy in progress on that thread, which then reports failure. A SIGBUS on a
 * thread that is not inside a guarded copy is not ours: the default action is restored and the
 * faulting access repeated, so a real bug still dumps core. */
#include "shm.h"

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <string.h>

static __thread sigjmp_buf *volatile fosd_bus_jmp __attribute__((tls_model("initial-exec")));
static pthread_once_t fosd_bus_once = PTHREAD_ONCE_INIT;

static void fosd_bus_handler(int sig, siginfo_t *si, void *uc)
{
	(void)si;
	(void)uc;
	sigjmp_buf *jb = fosd_bus_jmp;
	if (jb) {
		fosd_bus_jmp = NULL;
		siglongjmp(*jb, 1);
	}
	signal(sig, SIG_DFL); /* not a guarded copy: crash as usual on return */
}

static void fosd_bus_install(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = fosd_bus_handler;
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGBUS, &sa, NULL);
}

int fosd_shm_copy(void *dst, const void *src, size_t n)
{
	if (!n)
		return 0;
	pthread_once(&fosd_bus_once, fosd_bus_install);
	sigjmp_buf jb;
	if (sigsetjmp(jb, 1)) /* restores the signal mask, SIGBUS unblocked again */
		return -1;
	fosd_bus_jmp = &jb;
	memcpy(dst, src, n);
	fosd_bus_jmp = NULL;
	return 0;
}
