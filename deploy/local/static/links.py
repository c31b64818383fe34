#!/usr/bin/env python3
"""Fails on a link in the repository's Markdown that does not resolve: a relative path to a
file or folder that does not exist, or a `#fragment` that names no heading of the page it
points at (GitHub's anchors: lower case, punctuation dropped, spaces as `-`, a repeated
heading numbered `-1`, `-2`, …). Links to other sites are not fetched (the machine has no
internet). Fenced code blocks and inline code are skipped.

Usage: links.py FILE.md…   exit 1 and every broken link printed with its file and line
"""
import pathlib
import re
import sys

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def prose(text, code=False):
    """(line number, line) outside fenced blocks; inline code blanked unless `code`."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line if code else re.sub(r"`[^`]*`", "``", line)


def slug(heading):
    text = re.sub(r"`|\*\*|__", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        seen, found = {}, set()
        for _, line in prose(path.read_text(), code=True):
            m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
            if not m:
                continue
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
        found |= set(re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", path.read_text()))
        cache[path] = found
    return cache[path]


def broken(md):
    for number, line in prose(md.read_text()):
        for m in LINK.finditer(line):
            target = m.group(1)
            if re.match(r"[a-z][a-z0-9+.-]*:", target):
                continue  # https:, mailto:, …
            path, _, fragment = target.partition("#")
            dest = (md.parent / path).resolve() if path else md.resolve()
            if not dest.exists():
                yield number, target, "no such file"
            elif fragment and dest.suffix == ".md" and fragment.lower() not in anchors(dest):
                yield number, target, f"no heading #{fragment} in {dest.name}"


def main(files):
    bad = 0
    for name in files:
        md = pathlib.Path(name)
        for number, target, why in broken(md):
            print(f"{md}:{number}: ({target}): {why}")
            bad += 1
    checked = sum(len(LINK.findall(line)) for f in files for _, line in prose(pathlib.Path(f).read_text()))
    print(f"{checked} links in {len(files)} pages checked, {bad} broken")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1:]))
