#!/usr/bin/env python3
"""Fails on a module cycle inside any crate (ARCHITECTURE.md: "no modules importing each other
in a circle").

Each `.rs` file under a crate's `src/` is a module (`src/a/b.rs` and `src/a/b/mod.rs` are
`a::b`). A path a module names (`crate::x::y`, `super::z`, `self::w`, in `use` or inline, code
only: comments are skipped) is an edge to the longest module that path starts with. An edge
between two modules neither of which contains the other is lifted to the two children of
their nearest common ancestor (`a::b → c::d` is `a → c` under the root), so a cycle is one
between siblings: the layering a reader sees in the folder tree. Parents and their own
submodules may use each other freely (a parent declares its children; a child uses its
parent's types).

Usage: cycles.py CRATE_DIR…   exit 1 and every cycle printed when there is one
"""
import pathlib
import re
import sys

PATH = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+|::\{)")
GROUP = re.compile(r"\b(crate|super|self)::\{([^;]*)\}", re.S)


def modules(src):
    """Module path (a tuple) → file, for every .rs file under src."""
    found = {}
    for file in sorted(src.rglob("*.rs")):
        parts = list(file.relative_to(src).with_suffix("").parts)
        if parts[-1] == "mod" or (len(parts) == 1 and parts[0] in ("lib", "main")):
            parts = parts[:-1]
        if parts and parts[0] == "bin":
            continue  # each src/bin file is a crate of its own
        found.setdefault(tuple(parts), file)
    return found


def code(text):
    """The text without comments (line and block) and string literals' contents."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
    return "\n".join(line.split("//", 1)[0] for line in text.splitlines())


def resolve(module, head, rest):
    """The absolute path that `head::rest` names from `module`."""
    if head == "crate":
        base = ()
    elif head == "self":
        base = module
    else:  # super, possibly repeated: super::super::x
        base = module
        while True:
            base = base[:-1]
            if rest[:1] == ["super"]:
                rest = rest[1:]
                continue
            break
    return base + tuple(rest)


def named_paths(text):
    """Every (head, [segments]) a file's code names, grouped imports expanded one level."""
    for m in GROUP.finditer(text):
        for item in re.split(r",(?![^{]*\})", m.group(2)):
            item = item.strip()
            name = re.match(r"[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*", item)
            if name:
                yield m.group(1), name.group(0).split("::")
    for m in PATH.finditer(text):
        if m.group(2) != "::{":
            yield m.group(1), m.group(2).strip(":").split("::")


def edges(mods):
    """(parent, child a, child b) → the first file and path that made a use b."""
    out = {}
    for module, file in mods.items():
        text = code(file.read_text())
        for head, rest in named_paths(text):
            target = resolve(module, head, rest)
            while target and target not in mods:
                target = target[:-1]
            if target == module or not target:
                continue
            common = 0
            while common < min(len(module), len(target)) and module[common] == target[common]:
                common += 1
            if common == len(module) or common == len(target):
                continue  # an ancestor and its descendant
            parent = module[:common]
            out.setdefault((parent, module[common], target[common]), f"{file}: {head}::{'::'.join(rest)}")
    return out


def cycles(graph):
    """Strongly connected components with more than one member (Tarjan's)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def main(crates):
    failed = False
    for crate in crates:
        src = pathlib.Path(crate) / "src"
        mods = modules(src)
        by_parent, witness = {}, edges(mods)
        for parent, a, b in witness:
            by_parent.setdefault(parent, {}).setdefault(a, set()).add(b)
        for parent, graph in sorted(by_parent.items()):
            for component in cycles(graph):
                failed = True
                where = "::".join(parent) or "the crate root"
                print(f"{crate}: modules in a cycle under {where}: {', '.join(component)}")
                for a in component:
                    for b in sorted(graph.get(a, ())):
                        if b in component:
                            print(f"  {a} → {b}  ({witness[(parent, a, b)]})")
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1:]))
