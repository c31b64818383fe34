"""What the static checks read: the production Rust files below some folders. Tests are
exempt: files named `tests.rs` or under a `tests/` folder (a file's own `#[cfg(test)]` part is
cut by each check, which keeps its line numbers)."""
import pathlib


def production_files(dirs):
    """Every `.rs` file below `dirs` that is not a test file, sorted within each folder."""
    for d in dirs:
        for path in sorted(pathlib.Path(d).rglob("*.rs")):
            if path.name != "tests.rs" and "tests" not in path.parts:
                yield path
