/*
** Context switch for AArch64, AAPCS64 (Linux, ELF).
**
** ch_ctx_switch(struct ch_ctx *from, struct ch_ctx *to) saves the callee-saved
** state in a frame below the current sp, stores sp in from->sp, loads to->sp
** and reloads the frame found there. AAPCS64 makes x19-x28, x29 (fp), sp and
** the low 64 bits of v8-v15 (d8-d15) callee-saved, plus the control bits of
** FPCR; FPSR (cumulative exception flags) and everything else are
** caller-saved, so the C caller already assumes the call clobbers them.
**
**   saved sp ->  +0x00  d8      +0x08  d9
**                +0x10  d10     +0x18  d11
**                +0x20  d12     +0x28  d13
**                +0x30  d14     +0x38  d15
**                +0x40  x19     +0x48  x20
**                +0x50  x21     +0x58  x22
**                +0x60  x23     +0x68  x24
**                +0x70  x25     +0x78  x26
**                +0x80  x27     +0x88  x28
**                +0x90  x29 fp  +0x98  x30 lr = resume address
**                +0xa0  FPCR (8, high half 0)   +0xa8  pad
**                +0xb0  caller's frame (the sp it had at the bl)
**
** The offsets are CH_CTX_* in runtime/ctx.h, pinned there by _Static_assert.
** Alignment: sp is 16-byte aligned at every call and the kernel faults any
** sp-based access while it is not (SCTLR_EL1.SA0), so the frame is 0xb0, a
** multiple of 16, and ch_ctx_make forges frames on a 16-byte aligned top.
**
** The switch ends in br, not ret: ret pops the return-stack predictor,
** whose top is the bl of the context we leave, so it would mispredict on
** every switch (the x86-64 version measured jmp 3x faster than ret). br
** goes through the indirect predictor, which learns ping-pong targets. The
** price: a br target must be a BTI landing pad when BTI is enforced, and
** the resume address (just after some bl in C) never is. This file
** therefore carries no GNU BTI property note, so the linker marks a program
** containing it as not BTI-protected, and BTI stays off for it. PAC
** (pac-ret) is unaffected: callers sign lr in their own frames; the lr we
** save is the raw return address the bl produced.
*/
#include "../runtime/ctx.h"

    .text

    .globl  ch_ctx_switch
    .hidden ch_ctx_switch
    .type   ch_ctx_switch, %function
    .p2align 4
ch_ctx_switch:
    .cfi_startproc
    sub     sp, sp, #CH_CTX_FRAME                   /* room for the frame */
    .cfi_def_cfa_offset CH_CTX_FRAME
    stp     d8,  d9,  [sp, #CH_CTX_D8]              /* save d8, d9 */
    stp     d10, d11, [sp, #CH_CTX_D8+0x10]         /* save d10, d11 */
    stp     d12, d13, [sp, #CH_CTX_D8+0x20]         /* save d12, d13 */
    stp     d14, d15, [sp, #CH_CTX_D8+0x30]         /* save d14, d15 */
    stp     x19, x20, [sp, #CH_CTX_X19]             /* save x19, x20 */
    stp     x21, x22, [sp, #CH_CTX_X19+0x10]        /* save x21, x22 */
    stp     x23, x24, [sp, #CH_CTX_X19+0x20]        /* save x23, x24 */
    stp     x25, x26, [sp, #CH_CTX_X19+0x30]        /* save x25, x26 */
    stp     x27, x28, [sp, #CH_CTX_X19+0x40]        /* save x27, x28 */
    stp     x29, x30, [sp, #CH_CTX_FP]              /* save fp and lr (resume address) */
    .cfi_offset x29, CH_CTX_FP-CH_CTX_FRAME
    .cfi_offset x30, CH_CTX_LR-CH_CTX_FRAME
    mrs     x9, fpcr                                /* FPCR we leave (x9 is caller-saved) */
    str     x9, [sp, #CH_CTX_FPCR]                  /* save FPCR */

    mov     x10, sp
    str     x10, [x0, #CH_CTX_SP]                   /* from->sp = current frame */
    ldr     x10, [x1, #CH_CTX_SP]
    mov     sp, x10                                 /* switch to the target stack */

    /* A write to FPCR is self-synchronising on many cores (tens of cycles),
    ** and nearly every context has the same FPCR, so write it only when the
    ** target's differs, as glibc's fesetround does. */
    ldr     x10, [sp, #CH_CTX_FPCR]                 /* target's FPCR */
    cmp     x9, x10
    b.eq    1f
    msr     fpcr, x10                               /* restore FPCR */
1:
    ldp     d8,  d9,  [sp, #CH_CTX_D8]              /* restore d8, d9 */
    ldp     d10, d11, [sp, #CH_CTX_D8+0x10]         /* restore d10, d11 */
    ldp     d12, d13, [sp, #CH_CTX_D8+0x20]         /* restore d12, d13 */
    ldp     d14, d15, [sp, #CH_CTX_D8+0x30]         /* restore d14, d15 */
    ldp     x19, x20, [sp, #CH_CTX_X19]             /* restore x19, x20 */
    ldp     x21, x22, [sp, #CH_CTX_X19+0x10]        /* restore x21, x22 */
    ldp     x23, x24, [sp, #CH_CTX_X19+0x20]        /* restore x23, x24 */
    ldp     x25, x26, [sp, #CH_CTX_X19+0x30]        /* restore x25, x26 */
    ldp     x27, x28, [sp, #CH_CTX_X19+0x40]        /* restore x27, x28 */
    ldp     x29, x30, [sp, #CH_CTX_FP]              /* restore fp and lr */
    add     sp, sp, #CH_CTX_FRAME                   /* drop the frame */
    .cfi_def_cfa_offset 0
    .cfi_restore x29
    .cfi_restore x30
    br      x30                                     /* resume the target (see top) */
    .cfi_endproc
    .size   ch_ctx_switch, .-ch_ctx_switch

/*
** ch_ctx_make(struct ch_ctx *ctx, void *top, void (*fn)(void *), void *arg)
** forges a frame below top whose resume address is ch_ctx_entry, with fn in
** x19 and arg in x20, every other saved register zero, and the caller's
** FPCR, so a coroutine starts with the rounding mode and flush-to-zero
** setting of its creator (as the x86-64 version inherits MXCSR).
*/
    .globl  ch_ctx_make
    .hidden ch_ctx_make
    .type   ch_ctx_make, %function
    .p2align 4
ch_ctx_make:
    .cfi_startproc
    and     x1, x1, #-16                            /* align top down to 16 */
    sub     x9, x1, #CH_CTX_FRAME                   /* frame sits right below top */
    stp     xzr, xzr, [x9, #CH_CTX_D8]              /* d8-d15 = 0 */
    stp     xzr, xzr, [x9, #CH_CTX_D8+0x10]
    stp     xzr, xzr, [x9, #CH_CTX_D8+0x20]
    stp     xzr, xzr, [x9, #CH_CTX_D8+0x30]
    stp     x2,  x3,  [x9, #CH_CTX_X19]             /* x19 = fn, x20 = arg */
    stp     xzr, xzr, [x9, #CH_CTX_X19+0x10]        /* x21-x28 = 0 */
    stp     xzr, xzr, [x9, #CH_CTX_X19+0x20]
    stp     xzr, xzr, [x9, #CH_CTX_X19+0x30]
    stp     xzr, xzr, [x9, #CH_CTX_X19+0x40]
    adr     x10, ch_ctx_entry
    stp     xzr, x10, [x9, #CH_CTX_FP]              /* fp = 0: end of the frame chain;
                                                    ** lr = the trampoline */
    mrs     x10, fpcr
    stp     x10, xzr, [x9, #CH_CTX_FPCR]            /* inherit FPCR; pad = 0 */
    str     x9, [x0, #CH_CTX_SP]                    /* ctx->sp = forged frame */
    ret
    .cfi_endproc
    .size   ch_ctx_make, .-ch_ctx_make

/*
** ch_ctx_entry: first code a new context runs. After the switch dropped the
** forged frame, sp == top, 16-byte aligned, and x29 == 0, so fn starts a
** fresh frame-pointer chain. fn never returns.
** .cfi_undefined x30 tells DWARF unwinders (LuaJIT's error unwinding
** through libgcc, gdb, perf --call-graph=dwarf) that this is the outermost
** frame of the coroutine's stack; x29 == 0 stops frame-pointer walkers.
*/
    .globl  ch_ctx_entry
    .hidden ch_ctx_entry
    .type   ch_ctx_entry, %function
    .p2align 4
ch_ctx_entry:
    .cfi_startproc
    .cfi_undefined x30
    .cfi_undefined x29
    mov     x0, x20                                 /* first argument: arg */
    blr     x19                                     /* fn(arg) */
    brk     #0                                      /* fn must not return */
    .cfi_endproc
    .size   ch_ctx_entry, .-ch_ctx_entry

    .section .note.GNU-stack,"",%progbits
