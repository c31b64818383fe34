#!/usr/bin/env python3
"""Fails on an error that is only a string in production code: a function returning
`Result<_, String>` (an `Err` a caller can only print, not tell apart) or an error turned into
one with `anyhow::Error::msg`. Errors are typed (`thiserror`) where they cross a function;
ARCHITECTURE.md, "Across the crates". Tests are exempt: files named `tests.rs` or under a
`tests/` folder, and everything from a file's `#[cfg(test)]` on.

Usage: errors.py SRC_DIR…   exit 1 and every site printed with its file and line
"""
import re
import sys

from source import production_files

STRING_ERROR = re.compile(r"Result<(?:[^<>]|<(?:[^<>]|<[^<>]*>)*>)*,\s*String\s*>")
MSG = re.compile(r"anyhow::Error::msg")


def production_lines(path):
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip().startswith("#[cfg(test)]"):
            return
        code = line.split("//", 1)[0]
        yield number, code


def main(dirs):
    found = 0
    for path in production_files(dirs):
        for number, code in production_lines(path):
            if STRING_ERROR.search(code) or MSG.search(code):
                print(f"{path}:{number}: {code.strip()}")
                found += 1
    if found:
        print(f"{found} errors that are only strings: give them a type (thiserror) a caller can match")
    return 1 if found else 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1:]))
