#!/usr/bin/env python3
"""Fails when the source tree breaks the layering of docs/ARCHITECTURE.md.

Rules (each file's quoted #include lines; a name is resolved to the project header of that name,
the including file's own folder first; angle-bracket includes are system headers):

  layers   Which planner headers a file may include, by where the file is:
             planner/format/  canzona.h and planner/format's own headers (the format builds on
                              nothing else of the planner);
             planner/lib/     canzona.h, cz_format.h and planner/lib's own headers;
             planner/cli/     canzona.h, cz_format.h, planner/lib's and planner/cli's headers;
             anywhere else    canzona.h and cz_format.h only (the executor, tools, tests,
                              examples): never a planner/lib or planner/cli header, nor a
                              header private to the format (format_internal.h, json_util.h,
                              cz_error.h, cz_assert.h, which cz_format.h includes itself).
           Exempt: tests/unit/ and fuzz/, the planner's white-box tests, which test the
           planner library's and the format's internal functions by design.
  cycles   The header include graph of planner/format/, planner/lib/ and executor/ (with the
           public headers in planner/include/ and executor/include/) has no cycle: no header
           includes itself, directly or through others. .c files include headers but are never
           included, so they cannot close a cycle and are not part of the graph.
  names    Every function or global defined without `static` in planner/format/*.c,
           planner/lib/*.c or executor/src/ (its .c and .cu files, the GPU plugin's included)
           is public (declared in canzona.h, or for the executor in canzona_exec.h, named cz_)
           or internal and named cz__ (the naming rule of docs/ARCHITECTURE.md). (The CLI is a
           program, not a library: its cz_cli_ and cz_cmd_ functions are exported by nothing.)

Usage: check_layers.py [ROOT]      (default: the source tree this script is in)
       check_layers.py --self-test (proves each rule catches a planted violation and passes a
                                    clean tree)
Prints each violation as RULE: FILE:LINE: what, and exits 1 when there is one.
"""
import os
import re
import shutil
import sys
import tempfile

PUBLIC_HEADERS = {"canzona.h", "cz_format.h"}  # what a file outside planner/ may include
EXEMPT = ("tests/unit/", "fuzz/")
SOURCE_EXT = (".c", ".h", ".cu", ".cuh")
HEADER_EXT = (".h", ".cuh")
CYCLE_SCOPE = ("planner/format/", "planner/lib/", "planner/include/", "executor/")
INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)


def strip_comments_and_strings(text):
    """Blanks comments and string literals, keeping line breaks so line numbers stay right."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(c if c == "\n" else " " for c in text[i:j]))
            i = j
        elif text[i] in "\"'":
            q, j = text[i], i + 1
            while j < n and text[j] != q and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(q + " " * (j - i - 1) + q)
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def source_files(root):
    """Every C/CUDA source and header under root, as paths relative to it ('/'-separated),
    leaving out build trees and hidden folders."""
    found = []
    for d, dirs, files in os.walk(root):
        rel = os.path.relpath(d, root)
        dirs[:] = sorted(x for x in dirs if not x.startswith(".") and
                         not (rel == "." and x.startswith("build")))
        for f in sorted(files):
            if f.endswith(SOURCE_EXT):
                found.append(os.path.normpath(os.path.join(rel, f)).replace(os.sep, "/"))
    return found


def includes(root, rel):
    """(line, name) of each quoted include of a file; a blanked comment hides none."""
    with open(os.path.join(root, rel), errors="replace") as fh:
        text = fh.read()
    # Comments blanked, but include names are strings: find them in the original text at the
    # lines where the stripped text still has an #include.
    stripped = strip_comments_and_strings(text)
    lines, kept = text.split("\n"), stripped.split("\n")
    out = []
    for no, (line, s) in enumerate(zip(lines, kept), 1):
        m = INCLUDE.match(line)
        if m and re.match(r"^[ \t]*#[ \t]*include", s):
            out.append((no, m.group(1)))
    return out


def header_index(files):
    """basename -> [paths] of the project's headers."""
    index = {}
    for f in files:
        if f.endswith(HEADER_EXT):
            index.setdefault(os.path.basename(f), []).append(f)
    return index


def resolve(index, including, name):
    """The project header an include names, or None for one outside the project."""
    own = os.path.normpath(os.path.join(os.path.dirname(including), name)).replace(os.sep, "/")
    candidates = index.get(os.path.basename(name), [])
    if own in candidates:
        return own
    return candidates[0] if len(candidates) == 1 else None


def layer_of(path):
    for layer in ("planner/format/", "planner/lib/", "planner/cli/", "planner/include/"):
        if path.startswith(layer):
            return layer
    return None


def allowed(src, header):
    """Whether file src may include project header header under the layers rule."""
    hl = layer_of(header)
    if hl is None or hl == "planner/include/":  # not the planner's, or the public header
        return True
    sl = layer_of(src)
    name = os.path.basename(header)
    if sl == "planner/format/":
        return hl == "planner/format/"
    if sl == "planner/lib/":
        return hl == "planner/lib/" or name == "cz_format.h"
    if sl == "planner/cli/":
        return hl in ("planner/lib/", "planner/cli/") or name == "cz_format.h"
    return name in PUBLIC_HEADERS


def check_layers(root, files, index):
    bad = []
    for f in files:
        if f.startswith(EXEMPT):
            continue
        for no, name in includes(root, f):
            h = resolve(index, f, name)
            if h and not allowed(f, h):
                bad.append("layers: %s:%d: includes %s (%s); %s" % (
                    f, no, name, h, "the format builds on nothing else of the planner"
                    if layer_of(f) == "planner/format/" else
                    "outside planner/ include only canzona.h or cz_format.h"
                    if layer_of(f) is None else "include cz_format.h, not the format's insides"))
    return bad


def check_cycles(root, files, index):
    graph = {}
    for f in files:
        if f.endswith(HEADER_EXT) and f.startswith(CYCLE_SCOPE):
            graph[f] = [h for _, name in includes(root, f)
                        for h in [resolve(index, f, name)] if h and h.startswith(CYCLE_SCOPE)]
    bad, state, stack = [], {}, []

    def visit(h):  # depth-first; state 1 = on the stack, 2 = done
        state[h] = 1
        stack.append(h)
        for nxt in graph.get(h, []):
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt):] + [nxt]
                bad.append("cycles: %s: header include cycle: %s" % (nxt, " -> ".join(cycle)))
            elif state.get(nxt) is None:
                visit(nxt)
        stack.pop()
        state[h] = 2

    for h in sorted(graph):
        if state.get(h) is None:
            visit(h)
    return bad


DEFINITION = re.compile(r"(?m)^([A-Za-z_][\w \t\*]*?)\b([A-Za-z_]\w*)[ \t]*(\(|\[[^\]]*\][ \t]*=|=)")


def public_names(root, header):
    path = os.path.join(root, header)
    if not os.path.exists(path):
        return set()
    with open(path) as fh:
        return set(re.findall(r"\b(cz_\w+)\s*\(", strip_comments_and_strings(fh.read())))


def toplevel_definitions(text):
    """(line, name) of each function or global defined at file scope without static."""
    code = strip_comments_and_strings(text)
    # Preprocessor lines (with their continuations) define no symbol of their own.
    code = re.sub(r"(?m)^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", lambda m: "\n" * m.group(0).count("\n"),
                  code)
    depth, out, opened = 0, [], []
    i, n = 0, len(code)
    while i < n:
        c = code[i]
        if c == "{":
            # The braces of a CUDA file's extern "C" { ... } enclose file-scope definitions.
            linkage = re.search(r'\bextern\s*"\s*"\s*$', code[code.rfind("\n", 0, i) + 1:i])
            opened.append(bool(linkage))
            depth += 0 if linkage else 1
        elif c == "}":
            depth -= 0 if opened and opened.pop() else 1
        elif depth == 0 and (i == 0 or code[i - 1] == "\n"):
            m = DEFINITION.match(code, i)
            if m and "static" not in m.group(1).split() and "typedef" not in m.group(1).split() \
                    and "extern" not in m.group(1).split() and m.group(1).strip():
                line = code.count("\n", 0, i) + 1
                if m.group(3) == "(":  # a function only when a body follows its parameters
                    j, d = m.end() - 1, 0
                    while j < n:
                        d += code[j] == "("
                        d -= code[j] == ")"
                        if d == 0:
                            break
                        j += 1
                    rest = code[j + 1:j + 200].lstrip()
                    if rest.startswith("{"):
                        out.append((line, m.group(2)))
                else:
                    out.append((line, m.group(2)))
        i += 1
    return out


def check_names(root, files):
    planner = public_names(root, "planner/include/canzona.h")
    executor = planner | public_names(root, "executor/include/canzona_exec.h")
    bad = []
    for f in files:
        if f.startswith(("planner/format/", "planner/lib/")) and f.endswith(".c"):
            public, header = planner, "canzona.h"
        elif f.startswith("executor/src/") and f.endswith((".c", ".cu")):
            public, header = executor, "canzona.h or canzona_exec.h"
        else:
            continue
        with open(os.path.join(root, f), errors="replace") as fh:
            defs = toplevel_definitions(fh.read())
        for no, name in defs:
            if name in public or name.startswith("cz__"):
                continue
            bad.append("names: %s:%d: %s is defined without static but is not in %s; "
                       "name it cz__%s (internal) or make it static" % (
                           f, no, name, header, name[3:] if name.startswith("cz_") else name))
    return bad


def check(root):
    files = source_files(root)
    index = header_index(files)
    return check_layers(root, files, index) + check_cycles(root, files, index) + \
        check_names(root, files)


# ---- self-test ------------------------------------------------------------------------------
CLEAN = {
    "planner/include/canzona.h": "int cz_plan_read(void);\n",
    "planner/format/cz_format.h": '#include "canzona.h"\n#include "cz_error.h"\n',
    "planner/format/cz_error.h": '#include "canzona.h"\nint cz__strdup(void);\n',
    "planner/format/format_internal.h": '#include "cz_format.h"\n',
    "planner/format/plan_io.c": '#include "format_internal.h"\n'
                                "int cz_plan_read(void)\n{\n    return 0;\n}\n"
                                "static int helper(void)\n{\n    return 1;\n}\n"
                                "int cz__strdup(void)\n{\n    return 2;\n}\n"
                                "int cz__error_set(void)\n{\n    return 3;\n}\n"
                                "const char *const cz__names[] = {\"a\", 0};\n",
    "planner/lib/cz_types.h": '#include "cz_format.h"\n#include "cz_algorithms.h"\n',
    "planner/lib/cz_algorithms.h": '#include "cz_format.h"\n',
    "planner/lib/cost.c": '#include "cz_types.h"\n',
    "planner/cli/main.c": '#include "cz_types.h"\n',
    "executor/src/executor_impl.h": '#include "cz_format.h"\n#include "ns_plan.h"\n',
    "executor/src/ns_plan.h": "/* #include \"executor_impl.h\" (a comment closes no cycle) */\n",
    "executor/src/step.c": '#include "executor_impl.h"\n#include <stdio.h>\n'
                           "int cz_executor_step(void)\n{\n    return 0;\n}\n"
                           "int cz__exec_step_run(void)\n{\n    return 1;\n}\n",
    "executor/src/cuda/kernels.cu": 'extern "C" {\nint cz__k_scale(void)\n{\n    return 0;\n}\n'
                                    '} // extern "C"\n',
    "executor/include/canzona_exec.h": '#include "canzona.h"\nint cz_executor_step(void);\n',
    "tools/bench/npy.c": '#include "cz_format.h"\n#include "canzona.h"\n',
    "tests/unit/test_cost.c": '#include "cz_types.h"\n#include "format_internal.h"\n',
    "build/junk.c": '#include "cz_types.h"\n',
}
PLANTED = {  # rule -> (file, content) that breaks only that rule
    "layers": [("tools/bench/bad.c", '#include "cz_types.h"\n'),
               ("executor/src/bad.c", '#include "format_internal.h"\n'),
               ("planner/format/bad.c", '#include "cz_algorithms.h"\n'),
               ("planner/lib/bad.c", '#include "cz_error.h"\n')],
    "cycles": [("executor/src/ns_plan.h", '#include "executor_impl.h"\n'),
               ("planner/lib/cz_algorithms.h", '#include "cz_types.h"\n')],
    "names": [("planner/format/bad.c", '#include "cz_format.h"\nint cz_helper(int a,\n'
                                       "              int b)\n{\n    return a + b;\n}\n"),
              ("planner/format/bad.c", "const char *const cz_table[] = {0};\n"),
              ("planner/lib/bad.c", "double cz_cost_of(void)\n{\n    return 1.0;\n}\n"),
              ("executor/src/bad.c", "int cz_exec_helper(void)\n{\n    return 0;\n}\n"),
              ("executor/src/cuda/bad.cu", 'extern "C" {\nint cz_k_bad(void)\n{\n    return 0;\n}\n'
                                           '} // extern "C"\n')],
}


def write_tree(root, files):
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as fh:
            fh.write(text)


def self_test():
    ok = True
    tmp = tempfile.mkdtemp(prefix="check_layers.")
    try:
        clean = os.path.join(tmp, "clean")
        write_tree(clean, CLEAN)
        found = check(clean)
        print("self-test: clean tree:", "passed" if not found else "FAILED %s" % found)
        ok &= not found
        for rule, plants in PLANTED.items():
            for k, (rel, text) in enumerate(plants):
                tree = os.path.join(tmp, "%s%d" % (rule, k))
                write_tree(tree, dict(CLEAN, **{rel: text}))
                found = check(tree)
                caught = bool(found) and all(v.startswith(rule + ":") for v in found)
                print("self-test: %s planted in %s: %s" % (
                    rule, rel, "caught" if caught else "NOT CAUGHT (found %s)" % found))
                ok &= caught
    finally:
        shutil.rmtree(tmp)
    print("self-test:", "passed" if ok else "FAILED")
    return 0 if ok else 1


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    root = argv[1] if len(argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(argv[0])))
    found = check(root)
    for v in found:
        print(v)
    if found:
        print("check_layers: %d violation(s); the rules are in docs/ARCHITECTURE.md, "
              "\"Layers\"" % len(found))
        return 1
    print("check_layers: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
