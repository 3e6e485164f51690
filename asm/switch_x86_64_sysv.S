/*
** Context switch for x86-64, System V ABI (Linux, ELF).
**
** ch_ctx_switch(struct ch_ctx *from, struct ch_ctx *to) saves the callee-saved
** state on the current stack, stores the stack pointer in from->sp, loads
** to->sp and pops the frame found there. Caller-saved registers need no
** saving: the C caller already assumes the call clobbers them.
**
**   saved sp ->  +0x00  MXCSR (4) | x87 CW (2) | pad (2)
**                +0x08  R12
**                +0x10  R13
**                +0x18  R14
**                +0x20  R15
**                +0x28  RBX
**                +0x30  RBP
**                +0x38  return address (pushed by the caller's call)
**                +0x40  caller's frame
**
** The offsets are CH_CTX_* in runtime/ctx.h, pinned there by _Static_assert.
** Alignment: on entry (RSP - 8) % 16 == 0, as at any call, so the saved sp
** is 16-byte aligned and ch_ctx_make forges frames with the same rule.
** The switch ends in jmp, not ret: a ret to an address the return-stack
** predictor never saw mispredicts on every switch (measured 3x slower).
*/
#include "../runtime/ctx.h"

    .text

    .globl  ch_ctx_switch
    .hidden ch_ctx_switch
    .type   ch_ctx_switch, @function
    .p2align 4
ch_ctx_switch:
    .cfi_startproc
    leaq    -0x38(%rsp), %rsp               /* room for the frame below the return address */
    .cfi_adjust_cfa_offset 0x38
    stmxcsr CH_CTX_FPU(%rsp)                /* save MXCSR */
    fnstcw  CH_CTX_FPU+4(%rsp)              /* save x87 control word */
    movq    %r12, CH_CTX_R12(%rsp)          /* save R12 */
    movq    %r13, CH_CTX_R13(%rsp)          /* save R13 */
    movq    %r14, CH_CTX_R14(%rsp)          /* save R14 */
    movq    %r15, CH_CTX_R15(%rsp)          /* save R15 */
    movq    %rbx, CH_CTX_RBX(%rsp)          /* save RBX */
    movq    %rbp, CH_CTX_RBP(%rsp)          /* save RBP */

    movl    CH_CTX_FPU(%rsp), %eax          /* MXCSR we leave, for the compare below */
    movq    %rsp, CH_CTX_SP(%rdi)           /* from->sp = current frame */
    movq    CH_CTX_SP(%rsi), %rsp           /* switch to the target stack */

    /* ldmxcsr costs ~70 ns whenever the value changes, and the six sticky
    ** exception flags (bits 0-5) change with any inexact result, i.e. with
    ** nearly every LuaJIT number operation. The ABI makes only the control
    ** bits callee-saved (the flags are caller-saved), so reload MXCSR only
    ** when a control bit differs. */
    xorl    CH_CTX_FPU(%rsp), %eax          /* old ^ new */
    testl   $0xffc0, %eax                   /* control bits differ? */
    jz      1f
    ldmxcsr CH_CTX_FPU(%rsp)                /* restore MXCSR */
1:
    fldcw   CH_CTX_FPU+4(%rsp)              /* restore x87 control word */
    movq    CH_CTX_R12(%rsp), %r12          /* restore R12 */
    movq    CH_CTX_R13(%rsp), %r13          /* restore R13 */
    movq    CH_CTX_R14(%rsp), %r14          /* restore R14 */
    movq    CH_CTX_R15(%rsp), %r15          /* restore R15 */
    movq    CH_CTX_RBX(%rsp), %rbx          /* restore RBX */
    movq    CH_CTX_RBP(%rsp), %rbp          /* restore RBP */
    movq    CH_CTX_RIP(%rsp), %rcx          /* resume address (rcx is caller-saved) */
    leaq    CH_CTX_FRAME(%rsp), %rsp        /* drop the frame and the return address */
    jmp     *%rcx                           /* resume the target */
    .cfi_endproc
    .size   ch_ctx_switch, .-ch_ctx_switch

/*
** ch_ctx_make(struct ch_ctx *ctx, void *top, void (*fn)(void *), void *arg)
** forges a frame below top whose resume address is ch_ctx_entry, with fn in
** R12 and arg in R13; the MXCSR and x87 control word are the caller's, so a
** coroutine starts with the rounding and exception masks of its creator.
*/
    .globl  ch_ctx_make
    .hidden ch_ctx_make
    .type   ch_ctx_make, @function
    .p2align 4
ch_ctx_make:
    .cfi_startproc
    andq    $-16, %rsi                      /* align top down to 16 */
    leaq    -CH_CTX_FRAME(%rsi), %rax       /* frame sits right below top */
    stmxcsr CH_CTX_FPU(%rax)                /* inherit MXCSR */
    fnstcw  CH_CTX_FPU+4(%rax)              /* inherit x87 control word */
    movq    %rdx, CH_CTX_R12(%rax)          /* R12 = fn */
    movq    %rcx, CH_CTX_R13(%rax)          /* R13 = arg */
    xorl    %r8d, %r8d
    movq    %r8, CH_CTX_R14(%rax)           /* R14 = 0 */
    movq    %r8, CH_CTX_R15(%rax)           /* R15 = 0 */
    movq    %r8, CH_CTX_RBX(%rax)           /* RBX = 0 */
    movq    %r8, CH_CTX_RBP(%rax)           /* RBP = 0: end of the frame-pointer chain */
    leaq    ch_ctx_entry(%rip), %r8
    movq    %r8, CH_CTX_RIP(%rax)           /* resume at the trampoline */
    movq    %rax, CH_CTX_SP(%rdi)           /* ctx->sp = forged frame */
    ret
    .cfi_endproc
    .size   ch_ctx_make, .-ch_ctx_make

/*
** ch_ctx_entry: first code a new context runs. After the switch popped the
** forged frame, RSP == top, which is 16-byte aligned, so the call below
** enters fn with (RSP - 8) % 16 == 0 as the ABI wants. fn never returns.
** .cfi_undefined rip tells unwinders (LuaJIT's error unwinding, gdb, perf)
** that this is the outermost frame of the coroutine's stack.
*/
    .globl  ch_ctx_entry
    .hidden ch_ctx_entry
    .type   ch_ctx_entry, @function
    .p2align 4
ch_ctx_entry:
    .cfi_startproc
    .cfi_undefined rip
    movq    %r13, %rdi                      /* first argument: arg */
    callq   *%r12                           /* fn(arg) */
    ud2                                     /* fn must not return */
    .cfi_endproc
    .size   ch_ctx_entry, .-ch_ctx_entry

    .section .note.GNU-stack,"",%progbits
