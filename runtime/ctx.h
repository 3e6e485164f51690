/*
** Machine context of a coroutine: the saved-frame layout shared by C and the
** per-architecture switch in asm/. This header is included from assembly, so
** everything C-only sits under #ifndef __ASSEMBLER__.
*/
#ifndef CH_CTX_H
#define CH_CTX_H

#if defined(__x86_64__)
/*
** x86-64 System V. ch_ctx_switch pushes this frame on the stack it leaves and
** stores the stack pointer in ctx->sp; switching back pops it. Byte offsets
** from the saved stack pointer:
*/
#define CH_CTX_FPU    0x00  /* MXCSR (4 bytes) then x87 control word (2 bytes) */
#define CH_CTX_R12    0x08
#define CH_CTX_R13    0x10
#define CH_CTX_R14    0x18
#define CH_CTX_R15    0x20
#define CH_CTX_RBX    0x28
#define CH_CTX_RBP    0x30
#define CH_CTX_RIP    0x38  /* where the switch resumes: pushed by the call */
#define CH_CTX_FRAME  0x40  /* frame size; a multiple of 16 keeps alignment */
#elif defined(__aarch64__)
/*
** AArch64 AAPCS64. Same scheme: ch_ctx_switch stores this frame below sp
** and keeps sp in ctx->sp. There is no pushed return address: lr (x30),
** saved with fp, is where the switch resumes. Byte offsets from the saved
** stack pointer (the table is drawn in asm/switch_aarch64_aapcs.S):
*/
#define CH_CTX_D8     0x00  /* d8..d15 at 0x00..0x38, 8 bytes each */
#define CH_CTX_X19    0x40  /* x19..x28 at 0x40..0x88, 8 bytes each */
#define CH_CTX_FP     0x90  /* x29 */
#define CH_CTX_LR     0x98  /* x30: resume address */
#define CH_CTX_FPCR   0xa0  /* FPCR in the low 32 bits, then 8 bytes pad */
#define CH_CTX_FRAME  0xb0  /* frame size; sp must stay 16-byte aligned */
#else
#error "cohost: no context switch for this architecture yet (see asm/)"
#endif

#define CH_CTX_SP     0x00  /* offset of sp in struct ch_ctx */

#ifndef __ASSEMBLER__
#include <stddef.h>
#include <stdint.h>

/* A suspended context is nothing but its stack pointer: the rest lives in
** the frame the switch pushed below it. */
struct ch_ctx {
  void *sp;               /* saved stack pointer; NULL while running */
};

/* The frame ch_ctx_switch leaves on a suspended stack, for the asserts below
** and for ch_ctx_make, which forges the first one. */
#if defined(__x86_64__)
struct ch_ctx_frame {
  uint32_t mxcsr;         /* SSE control and status */
  uint16_t x87cw;         /* x87 control word */
  uint16_t pad;
  uint64_t r12, r13, r14, r15, rbx, rbp;
  uint64_t rip;           /* resume address */
};

_Static_assert(offsetof(struct ch_ctx, sp) == CH_CTX_SP, "ctx sp");
_Static_assert(offsetof(struct ch_ctx_frame, mxcsr) == CH_CTX_FPU, "mxcsr");
_Static_assert(offsetof(struct ch_ctx_frame, x87cw) == CH_CTX_FPU + 4, "x87");
_Static_assert(offsetof(struct ch_ctx_frame, r12) == CH_CTX_R12, "r12");
_Static_assert(offsetof(struct ch_ctx_frame, r13) == CH_CTX_R13, "r13");
_Static_assert(offsetof(struct ch_ctx_frame, r14) == CH_CTX_R14, "r14");
_Static_assert(offsetof(struct ch_ctx_frame, r15) == CH_CTX_R15, "r15");
_Static_assert(offsetof(struct ch_ctx_frame, rbx) == CH_CTX_RBX, "rbx");
_Static_assert(offsetof(struct ch_ctx_frame, rbp) == CH_CTX_RBP, "rbp");
_Static_assert(offsetof(struct ch_ctx_frame, rip) == CH_CTX_RIP, "rip");
#elif defined(__aarch64__)
struct ch_ctx_frame {
  uint64_t d[8];          /* d8..d15: low halves of v8..v15 */
  uint64_t x[10];         /* x19..x28 */
  uint64_t fp;            /* x29; 0 in a forged frame: end of the chain */
  uint64_t lr;            /* x30: resume address */
  uint64_t fpcr;          /* FPCR (control only; FPSR is caller-saved) */
  uint64_t pad;           /* keeps the frame a multiple of 16 */
};

_Static_assert(offsetof(struct ch_ctx, sp) == CH_CTX_SP, "ctx sp");
_Static_assert(offsetof(struct ch_ctx_frame, d) == CH_CTX_D8, "d8");
_Static_assert(offsetof(struct ch_ctx_frame, d[7]) == CH_CTX_D8 + 0x38, "d15");
_Static_assert(offsetof(struct ch_ctx_frame, x) == CH_CTX_X19, "x19");
_Static_assert(offsetof(struct ch_ctx_frame, x[9]) == CH_CTX_X19 + 0x48, "x28");
_Static_assert(offsetof(struct ch_ctx_frame, fp) == CH_CTX_FP, "fp");
_Static_assert(offsetof(struct ch_ctx_frame, lr) == CH_CTX_LR, "lr");
_Static_assert(offsetof(struct ch_ctx_frame, fpcr) == CH_CTX_FPCR, "fpcr");
#endif
_Static_assert(sizeof(struct ch_ctx_frame) == CH_CTX_FRAME, "frame size");
_Static_assert(CH_CTX_FRAME % 16 == 0, "frame keeps 16-byte alignment");

/* Saves the current context in *from and resumes *to. Returns when some
** later switch names *from as its target. Defined in asm/. */
void ch_ctx_switch(struct ch_ctx *from, struct ch_ctx *to);

/* Prepares *ctx so that the first switch to it calls fn(arg) on the stack
** that ends (exclusive) at top. fn must never return: it ends by switching
** away for good. Cost: one frame written, no system call. */
void ch_ctx_make(struct ch_ctx *ctx, void *top, void (*fn)(void *), void *arg);

/* The entry trampoline ch_ctx_make points new contexts at (asm/). */
void ch_ctx_entry(void);
#endif

#endif
