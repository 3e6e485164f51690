# cohost: a Lua-scriptable server host on native coroutines.
# Targets: all (default), test, run, bench, install, clean.

# == USER SETTINGS (override on the command line: make CC=clang) ==========
CC      ?= gcc
CXX     ?= g++
OPT     ?= -O2 -g
ARCH    ?= $(shell uname -m)
PREFIX  ?= /usr/local
PORT    ?= 8080
FUZZ_SECONDS ?= 40
# Sanitizers, e.g. SAN=address,undefined (docs/sanitizers.md); empty: none.
SAN     ?=
# Stack mode of every scheduler the tests start (docs/stacks.md): copy or
# separate (the default); exported to them as CH_STACK_MODE.
STACK_MODE ?=
# I/O backend of every scheduler the tests start (docs/runtime.md): uring
# or epoll (the default); exported to them as CH_IO_BACKEND.
IO_BACKEND ?=
# Build the io_uring backend (runtime/ring.c) with Debian's liburing: 1 or
# 0. Without it every ring request says ENOSYS and schedulers stay on epoll.
IO_URING ?= 1
# == END OF USER SETTINGS ==================================================

B := build
WARN    := -Wall -Wextra -Wshadow -Wmissing-prototypes -Wstrict-prototypes
CFLAGS  := $(OPT) -std=gnu11 -D_GNU_SOURCE -fno-omit-frame-pointer $(WARN) \
           -MMD -MP -I runtime/include -iquote runtime
LDLIBS  := -ldl -lpthread
# runtime/include/ holds the public header alone, found with -I as an
# outside program finds it; the runtime's own headers are found with
# -iquote, which #include <...> never searches, so runtime/poll.h cannot
# stand in for <poll.h>.

# Sanitizer builds: every C file (runtime, host, C tests, spec modules) and
# every link gets -fsanitize=$(SAN), through CC so no rule changes. CH_ASAN
# turns on the fiber annotations of runtime/sched.c and stack.c. build/.san
# records the SAN of the objects in build/: when it differs, it is
# rewritten and everything rebuilds; a plain build without it creates it
# dated 1970, so a plain make rebuilds nothing. See docs/sanitizers.md.
comma := ,
SAN_STAMP := $(B)/.san
ifneq ($(strip $(SAN)),)
SAN_FLAGS := -fsanitize=$(SAN) -fno-omit-frame-pointer
ifneq ($(filter address,$(subst $(comma), ,$(SAN))),)
SAN_FLAGS += -DCH_ASAN
endif
override CC := $(CC) $(SAN_FLAGS)
endif
ifneq ($(strip $(SAN)),$(shell cat $(SAN_STAMP) 2>/dev/null))
$(shell mkdir -p $(B) && echo '$(strip $(SAN))' > $(SAN_STAMP))
endif

ifneq ($(strip $(STACK_MODE)),)
export CH_STACK_MODE := $(STACK_MODE)
endif
ifneq ($(strip $(IO_BACKEND)),)
export CH_IO_BACKEND := $(IO_BACKEND)
endif
ifeq ($(IO_URING),1)
CFLAGS += -DCH_RING_LIBURING
LDLIBS += -luring
endif

ifeq ($(ARCH),x86_64)
ASM_SRC := asm/switch_x86_64_sysv.S
else ifneq ($(filter aarch64 arm64,$(ARCH)),)
ASM_SRC := asm/switch_aarch64_aapcs.S
else
$(error cohost: no context switch for ARCH=$(ARCH) yet; see asm/)
endif

# The runtime library. Order does not matter; hook.c is pulled into every
# program because sched.c references ch_hook_init.
RUNTIME_SRC := runtime/panic.c runtime/libc.c runtime/stack.c runtime/fault.c \
               runtime/timer.c runtime/fd.c runtime/coro.c runtime/sched.c \
               runtime/fdwait.c runtime/poll.c runtime/ring.c runtime/io.c runtime/pool.c runtime/hook.c \
               runtime/waitq.c runtime/buf.c
RUNTIME_OBJ := $(RUNTIME_SRC:%.c=$(B)/%.o) $(ASM_SRC:%.S=$(B)/%.o)
LIB := $(B)/libcohost.a

# The host: LuaJIT embedding and the Lua bindings. -rdynamic exports the
# lua_* API and the hooks to C modules the scripts load (LuaSocket's
# core.so); -fexceptions lets LuaJIT's unwinder run host cleanups.
HOST_SRC := host/main.c host/testmode.c host/ngx_abi.c host/worker.c host/log.c host/utf8.c \
            host/vm/task.c host/vm/ljvm.c host/vm/cstack.c host/vm/lua_alloc.c host/vm/heap.c host/vm/refs.c \
            host/vm/vmhook.c host/vm/inspect.c host/vm/acct.c \
            host/net/addr.c host/net/stream.c host/net/tls.c host/net/listener.c \
            host/net/listen.c host/net/keepalive.c host/net/proxy.c host/net/activation.c host/net/pg.c \
            host/http/parse.c host/http/conn.c host/http/response.c host/http/sendfile.c \
            host/http/url.c host/http/metrics.c host/http/h2.c host/http/h2_writer.c host/http/h2_response.c host/http/h2_client.c \
            host/proc/master.c host/proc/master_listen.c host/proc/watchdog.c host/proc/notify.c host/proc/profile.c \
            host/stats/stats.c host/stats/stats_procs.c host/stats/metrics.c host/stats/debug.c \
            host/shdict/store.c host/shdict/tlsf.c \
            host/lib_task.c host/lib_sys.c host/lib_socket.c host/lib_udp.c \
            host/lib_listen.c host/lib_ssl.c host/lib_crypto.c host/lib_http.c host/lib_h2client.c host/lib_file.c \
             host/lib_re.c host/lib_shdict.c host/lib_bus.c host/lib_metrics.c host/lib_postgres.c host/lib_postgres_rows.c host/lib_debug.c
HOST_OBJ := $(HOST_SRC:%.c=$(B)/%.o)
LUAJIT_CFLAGS := $(shell pkg-config --cflags luajit 2>/dev/null || echo -I/usr/include/luajit-2.1)
LUAJIT_LIBS   := $(shell pkg-config --libs luajit 2>/dev/null || echo -lluajit-5.1)
# libpq (Debian's libpq-dev) for cohost.postgres: net/pg.c and its binding.
PQ_CFLAGS := $(shell pkg-config --cflags libpq 2>/dev/null || echo -I/usr/include/postgresql)
# jemalloc's position-independent static archive (libjemalloc-dev), and
# the copy with renamed symbols that host/vm/heap.c uses.
JEMALLOC_PIC := $(shell pkg-config --variable=libdir jemalloc 2>/dev/null || echo /usr/lib/$$(gcc -print-multiarch))/libjemalloc_pic.a
JEMALLOC_LUA := $(B)/jemalloc_lua.a
HOST := $(B)/cohost

# C tests: one binary per spec/c/test_<mod>.c, cmocka from Debian.
CTEST_SRC := $(wildcard spec/c/test_*.c)
CTEST_BIN := $(CTEST_SRC:spec/c/%.c=$(B)/spec/%)
CTEST_LIBS := -lcmocka -lhiredis -lcrypto

# The LuaJIT VM-state probe: host/vm/ljvm.c under 100 coroutines per scenario
# (parking in classic C calls, never in FFI calls, finalizers, callbacks).
LJVM_PROBE := $(B)/spec/ljvm_probe

# Lua C modules used only by specs: spec/mod/<name>.c -> build/spec/mod/<name>.so,
# found through package.cpath; the lua_* API and hooks come from build/cohost.
SPECMOD_SRC := $(wildcard spec/mod/*.c)
SPECMOD_SO  := $(SPECMOD_SRC:spec/mod/%.c=$(B)/spec/mod/%.so)

# Benchmarks: every scripts/bench/*.c links the runtime; *.cpp links
# boost.context (a shim for comparison only).
BENCH_C   := $(wildcard scripts/bench/*.c)
BENCH_CXX := $(wildcard scripts/bench/*.cpp)
BENCH_BIN := $(BENCH_C:scripts/bench/%.c=$(B)/bench/%) \
             $(BENCH_CXX:scripts/bench/%.cpp=$(B)/bench/%)

.PHONY: all deps test run bench fuzz soak test-aarch64 install clean valgrind FORCE

all: $(LIB) $(HOST)

deps:
	@bash scripts/deps.sh test

$(B)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c $< -o $@

$(B)/%.o: %.S
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c $< -o $@

# COHOST_LUA_DIR is only main.c's last resort: the binary finds its Lua
# modules from its own path first (../lua, ../share/cohost/lua), so a
# later make install PREFIX=... needs no rebuild.
$(B)/host/%.o: host/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -fexceptions -iquote host $(LUAJIT_CFLAGS) \
	  -DCOHOST_LUA_DIR='"$(PREFIX)/share/cohost/lua"' -c $< -o $@

# Layers (docs/architecture.md): the lower folders of host/ are built
# without -iquote host. Each gets -iquote of a view instead, a folder of
# links under build/layers/ to the headers its layer may include, so an
# #include of a layer above it fails to compile ("proc/master.h: No such
# file or directory"), and without -iquote runtime, so the runtime's
# internals are out of reach too: cohost.h, the public header, is all.
# <...> never searches -iquote folders. A quote include looks in the
# including file's own folder first (host/ for log.c) and follows "../",
# so each build then reads the dependencies the compiler wrote (-MMD) and
# fails if one is neither the file, nor in the view (by either path), nor
# the public header (system headers, by absolute paths, are not the
# check's business). The runtime itself is built with runtime/ alone on its path: it
# cannot reach host/.
#   log.c    log.h
#   net/     net/ and log.h: never worker.h, proc/, vm/, http/, lib_*
#   shdict/  shdict/ and log.h
#   http/    http/, net/, log.h, worker.h, the metrics registry: never
#            proc/, lib_*, vm/
# net/, shdict/, log.c and http/ are C without Lua: built without
# $(LUAJIT_CFLAGS), so a Lua header included there fails to build too.
# net/ and shdict/ never call into Lua, so no Lua error unwinds through
# them either (no -fexceptions); http/ runs the handler through the
# server's run callback (lib_http.c), so it keeps unwind tables.
VIEW_log    := log.h
VIEW_net    := net log.h
VIEW_shdict := shdict log.h
VIEW_http   := http net log.h worker.h stats/metrics.h
LAYER_CFLAGS = $(subst -iquote runtime,,$(CFLAGS)) -iquote $(B)/layers/$(1)
LAYER_CHECK = @bad=$$(sed -e 's/\\$$//' -e 's/^[^:]*: *//' $(@:.o=.d) | tr ' ' '\n' | \
                grep -v -e '^$$' -e '^/' -e '^$<$$' -e '^runtime/include/' -e '^$(B)/layers/$(1)/' \
                  $(foreach v,$(VIEW_$(1)),-e '^host/$(v)$$' -e '^host/$(v)/[^.]')); \
              if [ -n "$$bad" ]; then rm -f $@; \
                echo "$<: includes what its layer may not (the Makefile's views):" $$bad; exit 1; fi

VIEWS := log net shdict http
$(VIEWS:%=$(B)/layers/%/.made): $(B)/layers/%/.made: Makefile
	@rm -rf $(@D) && mkdir -p $(@D)
	@for p in $(VIEW_$*); do mkdir -p $(@D)/$$(dirname $$p) && ln -s $(CURDIR)/host/$$p $(@D)/$$p; done
	@touch $@

$(B)/host/log.o: host/log.c | $(B)/layers/log/.made
	@mkdir -p $(@D)
	$(CC) $(call LAYER_CFLAGS,log) -c $< -o $@
	$(call LAYER_CHECK,log)

$(B)/host/net/%.o: host/net/%.c | $(B)/layers/net/.made
	@mkdir -p $(@D)
	$(CC) $(call LAYER_CFLAGS,net) -c $< -o $@
	$(call LAYER_CHECK,net)

$(B)/host/shdict/%.o: host/shdict/%.c | $(B)/layers/shdict/.made
	@mkdir -p $(@D)
	$(CC) $(call LAYER_CFLAGS,shdict) -c $< -o $@
	$(call LAYER_CHECK,shdict)

$(B)/host/http/%.o: host/http/%.c | $(B)/layers/http/.made
	@mkdir -p $(@D)
	$(CC) $(call LAYER_CFLAGS,http) -fexceptions -c $< -o $@
	$(call LAYER_CHECK,http)

$(B)/host/net/pg.o $(B)/host/lib_postgres.o $(B)/host/lib_postgres_rows.o: CFLAGS += $(PQ_CFLAGS)

$(HOST): $(HOST_OBJ) $(LIB) $(JEMALLOC_LUA)
	$(CC) -rdynamic $(HOST_OBJ) -o $@ $(LIB) $(JEMALLOC_LUA) $(LUAJIT_LIBS) -lhttp_parser -lnghttp2 -lpq -lssl -lcrypto -lpcre2-8 $(LDLIBS) -lm

# The Lua heaps' allocator (host/vm/heap.c): Debian's static jemalloc
# (libjemalloc-dev) with its public names renamed, so that it serves the
# Lua heaps alone; linked as is, it would replace malloc process-wide.
$(JEMALLOC_LUA): $(JEMALLOC_PIC) host/vm/jemalloc.syms
	@mkdir -p $(@D)
	objcopy --redefine-syms=host/vm/jemalloc.syms $(JEMALLOC_PIC) $@

$(LIB): $(RUNTIME_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(B)/spec/%: spec/c/%.c $(LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $< -o $@ $(LIB) $(CTEST_LIBS) $(LDLIBS)

# Tests of host modules below Lua link the objects they test: the
# stream's the Lua-free network layer, test_log the log's kinds of event,
# test_tlsf the allocator. Each sees its layer's view only, so it needs
# (and stubs) nothing of the layers above.
STREAM_OBJ := $(B)/host/net/stream.o $(B)/host/net/tls.o $(B)/host/log.o
$(B)/spec/test_stream: spec/c/test_stream.c $(STREAM_OBJ) $(LIB) | $(B)/layers/net/.made
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -iquote $(B)/layers/net $< $(STREAM_OBJ) -o $@ $(LIB) $(CTEST_LIBS) -lssl $(LDLIBS)

$(B)/spec/test_log: spec/c/test_log.c $(B)/host/log.o $(LIB) | $(B)/layers/log/.made
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -iquote $(B)/layers/log $< $(B)/host/log.o -o $@ $(LIB) $(CTEST_LIBS) $(LDLIBS)

$(B)/spec/test_tlsf: spec/c/test_tlsf.c $(B)/host/shdict/tlsf.o $(LIB) | $(B)/layers/shdict/.made
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -iquote $(B)/layers/shdict $< $(B)/host/shdict/tlsf.o -o $@ $(LIB) $(CTEST_LIBS) $(LDLIBS)

$(LJVM_PROBE): spec/c/ljvm_probe/probe.c host/vm/ljvm.c host/vm/ljvm.h $(LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -fexceptions -iquote host $(LUAJIT_CFLAGS) -rdynamic \
	  spec/c/ljvm_probe/probe.c host/vm/ljvm.c -o $@ $(LIB) $(LUAJIT_LIBS) $(LDLIBS)

# Programs specs run: spec/c/tools/<name>.c -> build/spec/<name>.
SPECTOOL_SRC := $(wildcard spec/c/tools/*.c)
SPECTOOL_BIN := $(SPECTOOL_SRC:spec/c/tools/%.c=$(B)/spec/%)

$(B)/spec/%: spec/c/tools/%.c
	@mkdir -p $(@D)
	$(CC) $(OPT) -std=gnu11 -D_GNU_SOURCE $(WARN) $< -o $@

$(B)/spec/mod/%.so: spec/mod/%.c
	@mkdir -p $(@D)
	$(CC) $(OPT) -std=gnu11 -D_GNU_SOURCE -fPIC -shared $(WARN) $(LUAJIT_CFLAGS) $< -o $@

$(B)/bench/%: scripts/bench/%.c $(LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $< -o $@ $(LIB) $(LDLIBS) -lm

# The io_uring echo (the ceiling of a completion backend) needs liburing
# (in LDLIBS already when the runtime is built with it).
$(B)/bench/echo_uring: LDLIBS += $(if $(filter 1,$(IO_URING)),,-luring)

$(B)/bench/%: scripts/bench/%.cpp
	@mkdir -p $(@D)
	$(CXX) $(OPT) -iquote runtime $< -o $@ -lboost_context

test: deps
	@$(MAKE) --no-print-directory all $(CTEST_BIN) $(LJVM_PROBE) $(SPECMOD_SO) $(SPECTOOL_BIN) $(B)/bench/loadgen
	@bash scripts/test.sh

# Objects and programs follow the SAN they were built with (see SAN_STAMP).
$(RUNTIME_OBJ) $(HOST_OBJ) $(CTEST_BIN) $(LJVM_PROBE) $(SPECMOD_SO): $(SAN_STAMP)
$(SAN_STAMP):
	@mkdir -p $(@D)
	@touch -d @0 $@

# The C runtime tests under valgrind memcheck (docs/sanitizers.md); no SAN.
valgrind: deps
	@$(MAKE) --no-print-directory $(CTEST_BIN)
	@VALGRIND=1 FUZZ_SECONDS=0 bash scripts/test.sh

run: deps all
	@echo "cohost: serving examples/hello.lua on port $(PORT) (try: curl http://127.0.0.1:$(PORT)/); Ctrl-C stops"
	$(HOST) examples/hello.lua $(PORT)

bench:
	@bash scripts/deps.sh bench
	@$(MAKE) --no-print-directory all $(BENCH_BIN)
	@bash scripts/bench/run.sh

# The libFuzzer harnesses (spec/fuzz/README.md: HTTP parser, WebSocket
# frames, RESP, a whole HTTP connection) with ASan + UBSan (clang), each
# FUZZ_SECONDS long; make test runs each for 40 s.
fuzz: deps
	bash scripts/fuzz.sh $(FUZZ_SECONDS)

# Mixed load for MINUTES (default 10) with a leak and error check
# (docs/soak.md); writes build/soak/.
MINUTES ?= 10
soak: deps
	@$(MAKE) --no-print-directory all $(B)/bench/loadgen
	@bash scripts/soak.sh $(MINUTES)

# The runtime cross-built for AArch64 and run under qemu-user (installs the
# cross compiler and qemu itself); docs/aarch64.md.
test-aarch64:
	@bash scripts/test_arm64.sh

# pkg-config's description of the installed runtime, for outside C
# programs (docs/runtime.md). libcohost.a is a static archive, so Libs
# names the libraries it needs as well. Written on every install: it
# holds PREFIX.
VERSION := $(shell sed -n 's/^\#define COHOST_VERSION "\(.*\)"/\1/p' host/main.c)
RUNTIME_LIBS := $(if $(filter 1,$(IO_URING)),-luring )-ldl -lpthread
define COHOST_PC_TEXT
prefix=$(PREFIX)
includedir=$${prefix}/include
libdir=$${prefix}/lib

Name: cohost
Description: native coroutines, their scheduler and libc hooks (libcohost.a)
Version: $(VERSION)
Cflags: -I$${includedir}
Libs: -L$${libdir} -lcohost $(RUNTIME_LIBS)
endef

$(B)/cohost.pc: export COHOST_PC = $(COHOST_PC_TEXT)
$(B)/cohost.pc: FORCE
	@mkdir -p $(@D)
	@printf '%s\n' "$$COHOST_PC" > $@

FORCE:

install: all $(B)/cohost.pc
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig \
	  $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/share/cohost/lua/cohost
	install -m 755 $(HOST) $(DESTDIR)$(PREFIX)/bin/
	install -m 644 $(LIB) $(DESTDIR)$(PREFIX)/lib/
	install -m 644 $(B)/cohost.pc $(DESTDIR)$(PREFIX)/lib/pkgconfig/
	install -m 644 runtime/include/cohost.h $(DESTDIR)$(PREFIX)/include/
	cd lua && find cohost \( -name '*.lua' -o -name '*.proto' \) -exec install -D -m 644 {} $(DESTDIR)$(PREFIX)/share/cohost/lua/{} \;
	for v in 5.1 5.2 5.3 5.4; do \
	  install -D -m 644 lua/outside/cohost.lua $(DESTDIR)$(PREFIX)/share/lua/$$v/cohost.lua; done

clean:
	rm -rf $(B)

-include $(shell find $(B) -name '*.d' 2>/dev/null)
