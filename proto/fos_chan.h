/* fos_chan.h: the layout of a request channel, shared by fosd and libfos (PROTOCOL.md "Request
 * channels"). A channel is a registered shared-memory region (RegisterRegion with channel = true)
 * through which one client thread at a time hands fosd whole request messages and takes back the
 * replies, with no socket in between: the bytes of a message are exactly those it would have on
 * the socket, and a doorbell (a sequence number in the region, with a futex for a side that
 * sleeps) says that one is ready.
 *
 *   [0, 512)            control words, each on its own 64-byte line (fos_chan_ctl)
 *   [512, 512 + cap)    the request area
 *   [512 + cap, 512 + 2 cap)  the reply area;  cap = ((size - 512) / 2) rounded down to 64
 *
 * One exchange (only when rep_seq == req_seq: the previous one was answered, so fosd is not
 * reading the area): the client writes the request into the request area and its length into
 * req_len, then stores req_seq + 1 (release) and, if srv_sleeping is set, wakes req_seq's futex.
 * fosd copies the request out of the region before reading it (the client can change the region
 * at any time), runs it as a request of the connection that registered the region, writes the
 * reply and rep_len, stores rep_seq = req_seq (release) and, if cli_sleeping is set, wakes
 * rep_seq's futex. A reply longer than cap is replaced by a RESOURCE_EXHAUSTED reply whose
 * message starts with FOS_CHAN_OVERFLOW (the operation did run). fosd sets state to
 * FOS_CHAN_SERVING when it starts serving and FOS_CHAN_CLOSED (and wakes rep_seq) when it stops. */
#ifndef FOS_CHAN_H
#define FOS_CHAN_H

#include <stdint.h>

#define FOS_CHAN_MAGIC 0x6e616863736f66ull /* "foschan" */
#define FOS_CHAN_HDR 512u
#define FOS_CHAN_MIN_SIZE (FOS_CHAN_HDR + 2u * 4096u)
#define FOS_CHAN_OVERFLOW "channel reply overflow:"

enum { FOS_CHAN_NEW = 0, FOS_CHAN_SERVING = 1, FOS_CHAN_CLOSED = 2 };

/* The control words at the start of the region; the 32-bit ones are futex words. */
typedef struct fos_chan_ctl {
	uint64_t magic;          /* written by the client before registering (checked by fosd) */
	uint32_t state;          /* fosd: FOS_CHAN_* */
	uint32_t pad0[13];
	uint32_t req_seq;        /* client: the number of requests placed */
	uint32_t pad1[15];
	uint32_t rep_seq;        /* fosd: the number of the request last answered */
	uint32_t pad2[15];
	uint32_t srv_sleeping;   /* fosd: 1 while it may sleep on req_seq's futex */
	uint32_t pad3[15];
	uint32_t cli_sleeping;   /* client: 1 while it may sleep on rep_seq's futex */
	uint32_t pad4[15];
	uint64_t req_len;        /* client: bytes of the request placed */
	uint32_t pad5[14];
	uint64_t rep_len;        /* fosd: bytes of the reply */
	uint32_t pad6[14];
} fos_chan_ctl;

_Static_assert(sizeof(fos_chan_ctl) <= FOS_CHAN_HDR, "channel control words exceed the header");

/* Bytes of each of the two areas of a channel region of size bytes (0 if too small). */
static inline uint64_t fos_chan_cap(uint64_t size)
{
	return size < FOS_CHAN_MIN_SIZE ? 0 : ((size - FOS_CHAN_HDR) / 2) & ~(uint64_t)63;
}

#endif
