#!/usr/bin/env python3
"""Fails on a production function longer than the house's limit (80 lines, ARCHITECTURE.md:
"functions under ~80"): a driver grows back into one long loop one case at a time. A function
is counted from its `fn` line to its closing brace, comments and blank lines included (what a
reader scrolls through). Tests are exempt: files named `tests.rs` or under a `tests/` folder,
and everything from a file's `#[cfg(test)]` on.

Usage: lengths.py [--max N] SRC_DIR…   exit 1 and every long function printed with its
file, line and length
"""
import re
import sys

from source import production_files

FN = re.compile(r"^\s*(?:pub(?:\([a-z:]+\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?fn\s+([A-Za-z_][A-Za-z0-9_]*)")


def production_text(path):
    """The file's lines up to its `#[cfg(test)]`, with comments, strings and chars blanked
    (their braces do not count)."""
    text = path.read_text()
    cut = re.search(r"^\s*#\[cfg\(test\)\]", text, re.M)
    if cut:
        text = text[: cut.start()]
    blank = lambda m: re.sub(r"[^\n]", " ", m.group(0))  # noqa: E731 (keeps line numbers)
    text = re.sub(r"/\*.*?\*/", blank, text, flags=re.S)
    text = re.sub(r'r#*"[\s\S]*?"#*|"(?:\\[\s\S]|[^"\\])*"', blank, text)
    text = re.sub(r"'(?:\\.|[^'\\])'", blank, text)
    return [line.split("//", 1)[0] for line in text.splitlines()]


def functions(lines):
    """(name, first line number, length) of every function with a body."""
    for start, line in enumerate(lines):
        match = FN.match(line)
        if not match:
            continue
        depth, opened = 0, False
        for end in range(start, len(lines)):
            for ch in lines[end]:
                if ch == "{":
                    depth, opened = depth + 1, True
                elif ch == "}":
                    depth -= 1
                elif ch == ";" and not opened and depth == 0:
                    break  # a declaration without a body (a trait's)
            else:
                if opened and depth == 0:
                    yield match.group(1), start + 1, end - start + 1
                    break
                continue
            break


def main(args):
    limit = 80
    if args[:1] == ["--max"]:
        limit, args = int(args[1]), args[2:]
    found = 0
    for path in production_files(args):
        for name, line, length in functions(production_text(path)):
            if length > limit:
                print(f"{path}:{line}: {name} is {length} lines")
                found += 1
    if found:
        print(f"{found} production functions over {limit} lines: split them into steps")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
