#!/usr/bin/python3
"""Checks that what the docs and the source comments name exists.

Reads every .md file and the comments of every source file (C, assembly,
C++, Lua, shell, Python, the Makefile) and checks:

- a path under one of this repository's own top-level folders (asm/,
  docs/, examples/, host/, lua/, runtime/, scripts/, spec/), written as
  such: `host/net/stream.c`, `spec/c/test_*.c` (a glob: something must
  match), `lua/cohost/` (a folder), `spec/fuzz/corpus/<harness>/` or
  `scripts/bench/sections/NAME.sh` (a placeholder, in angle brackets or
  upper case: something must match in its place). A leading `../` is
  dropped (a Markdown link from docs/), and so is a trailing `.`, `,`, `:`
  or `;`; `host/lib_task.c:292` must have that line. A path that another
  word, a `/` or `./` runs into is not one of ours: `build/spec/test_io`
  is a build output, `/usr/share/lua/5.1` and a path in a URL are someone
  else's, and `./spec/app_spec.lua` is in the reader's own project;
- a `ch_`-prefixed C name (`ch_stream_fill`, `struct ch_fd`, `ch_libc`):
  it must occur in code, comments and Markdown left out, of a C, assembly,
  C++, Lua (FFI declarations), shell, Python or Makefile file. `ch_io_*`
  and a name ending in `_` (`ch_`) are prefixes: some name must start
  with them;
- a bare file name (no folder) that was once a file of this repository
  (git history) and is no file of the tree now: a renamed file's old
  name. Other bare names are not checked: most are other
  projects' files (Lua's `ldo.c`, Redis's `networking.c`);
- a Markdown link to another file (`[stacks.md](stacks.md#guards)`):
  the file must exist, relative to the page (anchors are not checked);
- no instruction or cycle count in a source comment: figures live in
  docs/benchmarks.md, the comment says why;
- docs/architecture.md's source tree names every C file under runtime/
  and host/ (by path, by name, or through a glob such as `host/lib_*.c`).

Left out: build/, .git/, the fuzz corpora and kept crashes (generated,
spec/fuzz/corpus/ and spec/fuzz/crashes/), and files that are data rather
than prose (dictionaries, suppressions, web assets).

Prints one line per finding, "check_docs: FILE:LINE: ...", and a summary;
exits 1 if there is any. Usage: scripts/check_docs.py [ROOT] (default:
the repository this script is in). Takes well under a second.
"""
import fnmatch
import glob
import os
import re
import subprocess
import sys

TOP = ("asm", "docs", "examples", "host", "lua", "runtime", "scripts", "spec")
SKIP = {"build", ".git", "spec/fuzz/corpus", "spec/fuzz/crashes"}

C_LIKE = (".c", ".h", ".S", ".cpp")
HASH = (".sh", ".py")
SOURCE_EXT = r"(?:c|h|S|cpp|lua|sh|py|md)"

# Comments, and the strings that may hold what would look like one.
C_TOKENS = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
LUA_TOKENS = re.compile(r'--\[(=*)\[.*?\]\1\]|--[^\n]*|\[(=*)\[.*?\]\2\]|'
                        r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
# Shell and Makefile: a # at the start of a line or after a blank (not
# $# or ${#a}); Python's docstrings count as comments.
HASH_TOKENS = re.compile(r'"""(?:.|\n)*?"""|(?:^|(?<=[ \t]))#[^\n]*|'
                         r'"(?:\\.|[^"\\\n])*"|\'[^\'\n]*\'', re.M)

PATH = re.compile(r'(?<![A-Za-z0-9_./~$-])(?:\.\./)*((?:%s)/[A-Za-z0-9_.*/+<>-]*)'
                  r'(?::([0-9]+)(?:-([0-9]+))?)?' % "|".join(TOP))
NAME = re.compile(r'(?<![A-Za-z0-9_.>$-])(ch_[A-Za-z0-9_]*)(\*|<)?')
CODE_NAME = re.compile(r'\bch_[A-Za-z0-9_]+')
BARE = re.compile(r'(?<![A-Za-z0-9_./-])([A-Za-z0-9_-]+\.%s)\b(?![/-])' % SOURCE_EXT)
LINK = re.compile(r'\]\(([^)\s]+)\)')
# An instruction or cycle count in a comment, across its line breaks
# (a comment's continuation marks included): a number, maybe a sum or a
# percentage, then a few small words, then "instructions" or "cycles".
SEP = r'(?:[ \t]|\n[ \t]*(?:\*+|--|#)?[ \t]*)+'
FIGURE = re.compile(r'\b\d[\d,]*(?:%s\+%s\d+)?%%?%s(?:(?:per|of|a|an|its|Lua|frame)%s)*'
                    r'(?:instructions|cycles)\b' % (SEP, SEP, SEP, SEP))


def split(text, tokens, is_comment):
    """(comments, code): lists of (offset, text)."""
    comments, code, pos = [], [], 0
    for m in tokens.finditer(text):
        if is_comment(m.group(0)):
            code.append((pos, text[pos:m.start()]))
            comments.append((m.start(), m.group(0)))
            pos = m.end()
    code.append((pos, text[pos:]))
    return comments, code


def kind(path):
    base = os.path.basename(path)
    if base == "Makefile":
        return "hash"
    ext = os.path.splitext(base)[1]
    if ext in C_LIKE:
        return "c"
    if ext == ".lua":
        return "lua"
    if ext in HASH:
        return "hash"
    if ext == ".md":
        return "md"
    return None


def parts(path, text):
    """(prose, code) of a file: its comments and the rest, or all of a
    Markdown file as prose."""
    k = kind(path)
    if k == "c":
        return split(text, C_TOKENS, lambda t: t.startswith(("/*", "//")))
    if k == "lua":
        return split(text, LUA_TOKENS, lambda t: t.startswith("--"))
    if k == "hash":
        return split(text, HASH_TOKENS, lambda t: t.startswith(("#", '"""')))
    return [(0, text)], []


def walk(root):
    """Every file of the tree, build outputs and fetched data left out."""
    for d, subdirs, names in os.walk(root):
        rel = os.path.relpath(d, root)
        rel = "" if rel == "." else rel + "/"
        subdirs[:] = sorted(s for s in subdirs if rel + s not in SKIP)
        for n in sorted(names):
            yield rel + n


def path_exists(root, p):
    """Whether p names something in the tree: a placeholder (<name>) or an
    upper-case word standing for one (sections/NAME.sh) matches anything
    there, a * whatever a shell glob would."""
    if os.path.exists(os.path.join(root, p)):
        return True
    p = re.sub(r"<[^>/]*>?|\b[A-Z][A-Z0-9]+\b", "*", p)
    return "*" in p and bool(glob.glob(os.path.join(root, p)))


def lines_of(root, p, cache={}):
    if p not in cache:
        with open(os.path.join(root, p), "rb") as fh:
            cache[p] = fh.read().count(b"\n")
    return cache[p]


def former_names(root, now):
    """Base names of files this repository once had and has no more (from
    git's history; empty without git or history)."""
    try:
        out = subprocess.run(["git", "-C", root, "log", "--format=", "--name-only"],
                             capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return set()
    return {os.path.basename(p) for p in out.split()} - now


def source_tree(text):
    """The lines of docs/architecture.md's "Source tree" block."""
    m = re.search(r"^## Source tree\n.*?^```\n(.*?)^```", text, re.S | re.M)
    return m.group(1) if m else ""


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), ".."))
    tree = list(walk(root))
    texts = {}
    for f in tree:
        if kind(f):
            with open(os.path.join(root, f), encoding="utf-8", errors="replace") as fh:
                texts[f] = fh.read()
    former = former_names(root, {os.path.basename(f) for f in tree})

    # Every ch_ name the code uses: what a doc or comment may name.
    defined = set()
    prose_of = {}
    for f, text in texts.items():
        prose, code = parts(f, text)
        prose_of[f] = prose
        if kind(f) != "md":
            for _, chunk in code:
                defined.update(CODE_NAME.findall(chunk))
    defined_sorted = sorted(defined)

    found = []
    npaths = nnames = 0
    for f, prose in prose_of.items():
        text = texts[f]

        def at(off, m):
            return text.count("\n", 0, off + m.start()) + 1

        for off, chunk in prose:
            for m in PATH.finditer(chunk):
                p = m.group(1).rstrip(".,:;-")
                if p.endswith("/") and "/" not in p[:-1]:
                    continue  # the folder itself ("lua/"): the layout
                npaths += 1
                if not path_exists(root, p):
                    found.append("%s:%d: no such path: %s" % (f, at(off, m), p))
                elif m.group(2) and os.path.isfile(os.path.join(root, p)):
                    last = int(m.group(3) or m.group(2))
                    if last > lines_of(root, p):
                        found.append("%s:%d: %s has no line %d" % (f, at(off, m), p, last))
            for m in BARE.finditer(chunk):
                if m.group(1) in former:
                    npaths += 1
                    found.append("%s:%d: no such file now: %s" % (f, at(off, m), m.group(1)))
            for m in NAME.finditer(chunk):
                name, tail = m.group(1), m.group(2)
                nnames += 1
                if tail or name.endswith("_"):
                    ok = any(d.startswith(name) for d in defined_sorted)
                else:
                    ok = name in defined
                if not ok:
                    found.append("%s:%d: no such C name: %s%s" % (f, at(off, m), name, tail or ""))
            if kind(f) != "md":
                for m in FIGURE.finditer(chunk):
                    figure = " ".join(w for w in m.group(0).split() if w not in ("*", "**", "--", "#"))
                    found.append("%s:%d: a figure in a comment (docs/benchmarks.md has them): %s"
                                 % (f, at(off, m), figure))
            else:
                for m in LINK.finditer(chunk):
                    target = m.group(1).split("#", 1)[0]
                    if not target or re.match(r"[a-z]+:", target):
                        continue
                    npaths += 1
                    p = os.path.normpath(os.path.join(os.path.dirname(f), target))
                    if not os.path.exists(os.path.join(root, p)):
                        found.append("%s:%d: link to a missing file: %s" % (f, at(off, m), target))

    arch = "docs/architecture.md"
    if arch in texts:
        block = source_tree(texts[arch])
        named = set(re.findall(r"[A-Za-z0-9_./*-]+\.[chS]\b", block))
        for f in tree:
            if not re.match(r"(runtime|host)/.*\.c$", f):
                continue
            if not any(n == f or n == os.path.basename(f) or ("*" in n and fnmatch.fnmatch(f, n))
                       for n in named):
                found.append("%s: the source tree does not name %s" % (arch, f))

    for m in found:
        print("check_docs: " + m)
    print("check_docs: %d files, %d paths and %d ch_ names checked, %d findings"
          % (len(texts), npaths, nnames, len(found)))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
