#!/usr/bin/env python3
"""The layering rule of flps, checked on the include graph.

Reads every #include "..." in the product folders' .c and .h files and
fails when one runs up or sideways between folders. The rule (also in
docs/design.md, "Folders and the direction of dependencies"):

    include  <- common <- proto <- rdma <- transports
                          proto <- compress
    compress, transports <- services <- ps, worker <- scheduler, cli

A folder may include its own headers, the folders listed for it in
ALLOWED below, and whatever those may include (the arrows are
transitive). So ps/ and worker/ never include each other, nor do
scheduler/ and cli/, and nothing includes a folder above it. One more
rule, whatever the layers say: rdma/ is included only by transports/
(the registry that makes transports, so nobody else names one) and
scheduler/ (flagent reports the node's RDMA probe). The allowed graph
must itself have no cycle, and a folder with C files that has no place
in it fails the check until it is given one.

Inside worker/, the client library's files have layers of their own
(worker/client_internal.h lists them, bottom first): client_req <-
client_send <- client_pairs <- client_recv <- client_push, client_wait,
client_setup <- client, with client_internal.h beneath them all. A
worker/client*.c or .h may include its own header, client_internal.h and
the headers of layers below it, never one beside or above it; a client
file missing from CLIENT_LAYERS, or a layer list in client_internal.h
that disagrees with it, fails the check too.

Tests, benchmarks and examples are not product folders and may include
anything. Exit 0 when every arrow is allowed; 1 with every offending
include (file:line) and the folder cycles found otherwise.

usage: check_includes.py [SOURCE_DIR]   (default: the repository root)
"""
import os
import re
import sys

# folder -> the folders it may include directly; see the docstring.
ALLOWED = {
    "include": [],  # include/flps.h, the public header
    "common": ["include"],
    "proto": ["common"],
    "rdma": ["proto"],
    "compress": ["proto"],
    "transports": ["rdma"],
    "services": ["compress", "transports"],
    "ps": ["services"],
    "worker": ["services"],
    "scheduler": ["ps", "worker"],
    "cli": ["ps", "worker"],
}

# folder -> the only folders that may include it.
SEALED = {"rdma": {"transports", "scheduler"}}

# worker/'s client files: module -> layer, bottom first (the order of the
# list in worker/client_internal.h; files of one layer do not include each
# other).
CLIENT_LAYERS = {
    "client_internal": 0,
    "client_req": 1,
    "client_metrics": 1,
    "client_send": 2,
    "client_energy": 2,
    "client_pairs": 3,
    "client_recv": 4,
    "client_push": 5,
    "client_wait": 5,
    "client_setup": 5,
    "client": 6,
}
CLIENT_DOC = "worker/client_internal.h"
CLIENT_FILE_RE = re.compile(r"^(client(?:_\w+)?)\.[ch]$")
CLIENT_DOC_RE = re.compile(r"^ \*\s+(client(?:_\w+)?)\.c\s")

# Top-level folders that hold no product C code.
NOT_PRODUCT = {"tests", "bench", "examples", "python", "helm", "docs",
               "scripts", "cmake", "build"}

INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def closure(allowed):
    """folder -> every folder it may include, or raise on a cycle."""
    done, out = set(), {}

    def visit(f, path):
        if f in path:
            raise SystemExit("the allowed graph has a cycle: " +
                             " -> ".join(path[path.index(f):] + [f]))
        if f in done:
            return out[f]
        reach = set()
        for g in allowed.get(f, []):
            if g not in allowed:
                raise SystemExit("ALLOWED names an unknown folder: " + g)
            reach |= {g} | visit(g, path + [f])
        done.add(f)
        out[f] = reach
        return reach

    for f in allowed:
        visit(f, [])
    return out


def product_folders(root):
    """Top-level folders holding .c or .h files, but for the non-product
    ones and hidden or build directories."""
    found = set()
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if (not os.path.isdir(path) or name.startswith(".") or
                name in NOT_PRODUCT or name.startswith("build")):
            continue
        for _, _, files in os.walk(path):
            if any(f.endswith((".c", ".h")) for f in files):
                found.add(name)
                break
    return found


def target_folder(root, folder, src_dir, inc):
    """The folder an include names: its first component when that is a
    top-level folder, the including folder for a file beside the source,
    include/ for the public header."""
    head = inc.split("/", 1)[0]
    if "/" in inc and os.path.isdir(os.path.join(root, head)):
        return head
    if os.path.exists(os.path.join(src_dir, inc)):
        return folder
    if os.path.exists(os.path.join(root, "include", inc)):
        return "include"
    return head if "/" in inc else folder


def arrows(root, folders):
    """(from, to) -> [file:line, ...] over every product source."""
    out = {}
    for folder in sorted(folders):
        for dirpath, _, files in os.walk(os.path.join(root, folder)):
            for name in sorted(files):
                if not name.endswith((".c", ".h")):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8", errors="replace") as fh:
                    for no, line in enumerate(fh, 1):
                        m = INCLUDE_RE.match(line)
                        if not m:
                            continue
                        to = target_folder(root, folder, dirpath, m.group(1))
                        if to != folder:
                            where = "%s:%d" % (os.path.relpath(path, root), no)
                            out.setdefault((folder, to), []).append(where)
    return out


def cycles(edges):
    """Folder cycles of the observed graph, each as a list of folders."""
    graph = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    found, seen = [], set()

    def walk(f, path):
        for g in sorted(graph.get(f, ())):
            if g in path:
                cyc = path[path.index(g):]
                key = frozenset(cyc)
                if key not in seen:
                    seen.add(key)
                    found.append(cyc + [g])
            else:
                walk(g, path + [g])

    for f in sorted(graph):
        walk(f, [f])
    return found


def client_layering(root):
    """Every include among worker/client*.c and .h that does not point
    down the client's layers, and every disagreement between
    CLIENT_LAYERS, the files and the list in CLIENT_DOC."""
    bad, worker = [], os.path.join(root, "worker")
    for name in sorted(os.listdir(worker)):
        m = CLIENT_FILE_RE.match(name)
        if not m:
            continue
        mod = m.group(1)
        if mod not in CLIENT_LAYERS:
            bad.append("worker/%s has no client layer: give it one in "
                       "CLIENT_LAYERS (tests/layering/check_includes.py) "
                       "and in %s's list" % (name, CLIENT_DOC))
            continue
        with open(os.path.join(worker, name), encoding="utf-8",
                  errors="replace") as fh:
            for no, line in enumerate(fh, 1):
                inc = INCLUDE_RE.match(line)
                if not inc:
                    continue
                target = os.path.basename(inc.group(1))
                t = CLIENT_FILE_RE.match(target)
                if (not t or not inc.group(1).startswith(("worker/", "client"))
                        or t.group(1) == mod):
                    continue
                to = t.group(1)
                if to not in CLIENT_LAYERS:
                    bad.append("worker/%s:%d includes %s, which has no "
                               "client layer" % (name, no, inc.group(1)))
                elif CLIENT_LAYERS[to] >= CLIENT_LAYERS[mod]:
                    bad.append("worker/%s:%d -> %s (client layer %d -> %d: "
                               "up or sideways)" % (
                                   name, no, inc.group(1),
                                   CLIENT_LAYERS[mod], CLIENT_LAYERS[to]))
    listed = []
    with open(os.path.join(root, CLIENT_DOC), encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("#"):
                break  # the list is in the comment before the code
            m = CLIENT_DOC_RE.match(line)
            if m:
                listed.append(m.group(1))
    files = sorted(k for k in CLIENT_LAYERS if k != "client_internal")
    ranks = [CLIENT_LAYERS.get(k, -1) for k in listed]
    if sorted(listed) != files or ranks != sorted(ranks):
        bad.append("%s lists the client's layers as %s; CLIENT_LAYERS has "
                   "them as %s" % (CLIENT_DOC, ", ".join(listed), ", ".join(
                       sorted(files, key=lambda k: (CLIENT_LAYERS[k], k)))))
    return bad


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), "..", ".."))
    reach = closure(ALLOWED)
    folders = product_folders(root)
    bad = []
    for f in sorted(folders - set(ALLOWED)):
        bad.append("%s/ has no place in the layering: give it one in "
                   "ALLOWED (tests/layering/check_includes.py) and "
                   "docs/design.md" % f)
    edges = arrows(root, folders)
    for (a, b), where in sorted(edges.items()):
        why = None
        if a in ALLOWED and b not in ALLOWED:
            why = "%s/ is not a product folder" % b
        elif a in ALLOWED and b not in reach[a]:
            why = "up or sideways"
        elif b in SEALED and a not in SEALED[b]:
            why = "%s/ is included only by %s" % (
                b, ", ".join(sorted(SEALED[b])))
        if why:
            bad.append("%s -> %s (%s): %s" % (a, b, why, ", ".join(where)))
    for cyc in cycles(edges):
        bad.append("include cycle between folders: " + " -> ".join(cyc))
    if "worker" in folders:
        bad.extend(client_layering(root))
    if bad:
        print("the include graph breaks the layering:")
        for line in bad:
            print("  " + line)
        return 1
    print("include graph: %d arrows between %d folders, all allowed:" %
          (len(edges), len(folders)))
    for a, b in sorted(edges):
        print("  %s -> %s (%d)" % (a, b, len(edges[(a, b)])))
    print("worker/client*: every include runs down the %d client layers" %
          (max(CLIENT_LAYERS.values()) + 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
