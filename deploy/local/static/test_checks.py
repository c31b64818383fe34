#!/usr/bin/env python3
"""The static checks on small trees written here. cycles.py must find a cycle between
siblings (through `use`, grouped imports, inline paths and `super::`), name its arrows, and
leave alone a parent using its child, paths in comments and strings, and a layered tree.
links.py must report a missing file and a missing heading, and accept GitHub's anchors of
headings with code and punctuation, repeated headings, and links inside code. errors.py must
report `Result<_, String>` (nested generics too) and `anyhow::Error::msg` in production code
and leave alone tests, comments and `anyhow::Result<String>`. lengths.py must report a function
one line over its limit with its line and length, and leave alone one at the limit, a trait's
declarations, braces in strings, chars and comments, and tests."""
import contextlib
import io
import pathlib
import sys
import tempfile
import unittest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import cycles  # noqa: E402
import errors  # noqa: E402
import lengths  # noqa: E402
import links  # noqa: E402


def crate(files):
    root = pathlib.Path(tempfile.mkdtemp())
    for name, text in files.items():
        path = root / "src" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def check(files):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cycles.main([str(crate(files))])
    return code, out.getvalue()


class Cycles(unittest.TestCase):
    def test_a_cycle_between_siblings_is_named_with_its_arrows(self):
        code, out = check({
            "lib.rs": "pub mod a;\npub mod b;\n",
            "a.rs": "use crate::{b::Thing, c};\n",
            "b.rs": "fn f() -> crate::a::Other { todo!() }\n",
        })
        self.assertEqual(code, 1)
        self.assertIn("modules in a cycle under the crate root: a, b", out)
        self.assertIn("a → b", out)
        self.assertIn("b → a", out)

    def test_a_cycle_through_super_in_nested_modules_is_lifted_to_the_siblings(self):
        code, out = check({
            "lib.rs": "pub mod x;\n",
            "x/mod.rs": "pub mod p;\npub mod q;\n",
            "x/p/inner.rs": "use super::super::q::Q;\n",
            "x/p.rs": "mod inner;\n",
            "x/q.rs": "use crate::x::p::P;\n",
        })
        self.assertEqual(code, 1)
        self.assertIn("under x: p, q", out)

    def test_parents_children_comments_and_layers_are_no_cycle(self):
        code, out = check({
            "lib.rs": "pub mod a;\npub mod b;\npub mod c;\n",
            "a.rs": "mod child;\nuse crate::b::B;\nuse self::child::C;\n",
            "a/child.rs": "use super::A;\nuse crate::a::Z;\n",
            "b.rs": "use crate::c::C;\n// crate::a::A is mentioned only here\nconst S: &str = \"crate::a::A\";\n",
            "c.rs": "/* crate::b::B */\n",
        })
        self.assertEqual((code, out), (0, ""))


def check_links(pages):
    root = pathlib.Path(tempfile.mkdtemp())
    for name, text in pages.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = links.main([str(root / name) for name in pages if name.endswith(".md")])
    return code, out.getvalue()


class Links(unittest.TestCase):
    def test_missing_files_and_headings_are_reported_with_their_line(self):
        code, out = check_links({
            "README.md": "# Top\n\nsee [docs](docs/a.md#gone) and [b](docs/b.md)\n",
            "docs/a.md": "# A\n## Here\n",
        })
        self.assertEqual(code, 1)
        self.assertIn("README.md:3: (docs/a.md#gone): no heading #gone in a.md", out)
        self.assertIn("(docs/b.md): no such file", out)

    def test_anchors_code_and_repeats_resolve(self):
        code, out = check_links({
            "README.md": "[a](docs/a.md#the-sluice_lag-cli-v2) [b](docs/a.md#notes-1) [c](#top)\n"
                         "`[d](nowhere.md)`\n```\n[e](nowhere.md)\n```\n# Top\n",
            "docs/a.md": "# A\n## The `sluice_lag` CLI (v2)\n## Notes\n## Notes\n[up](../README.md)\n",
        })
        self.assertEqual(code, 0, out)


class Errors(unittest.TestCase):
    def test_string_errors_in_production_code_are_reported_and_tests_are_not(self):
        src = crate({
            "lib.rs": "pub fn a() -> Result<Vec<Option<u8>>, String> { todo!() }\n"
                      "pub fn b() -> anyhow::Result<String> { todo!() }\n"
                      "// fn c() -> Result<(), String>\n"
                      "fn d() { x.map_err(anyhow::Error::msg); }\n"
                      "#[cfg(test)]\nmod tests { fn e() -> Result<(), String> { Ok(()) } }\n",
            "m/tests.rs": "fn f() -> Result<(), String> { Ok(()) }\n",
        }) / "src"
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = errors.main([str(src)])
        self.assertEqual(code, 1)
        self.assertIn("lib.rs:1:", out.getvalue())
        self.assertIn("lib.rs:4:", out.getvalue())
        self.assertNotIn("lib.rs:2:", out.getvalue())
        self.assertNotIn("lib.rs:3:", out.getvalue())
        self.assertNotIn("tests.rs", out.getvalue())
        self.assertIn("2 errors that are only strings", out.getvalue())


class Lengths(unittest.TestCase):
    def test_a_function_over_the_limit_is_reported_and_the_rest_are_not(self):
        body = lambda n: "\n".join(["    let _ = 1;"] * (n - 2))  # noqa: E731
        src = crate({
            "lib.rs": "pub trait T {\n    fn declared(&self);\n}\n"
                      f"pub fn at_limit() {{\n{body(10)}\n}}\n"
                      f"pub(crate) async fn over() {{\n    let s = \"}}}}\"; let c = '}}'; // }}\n{body(10)}\n}}\n"
                      f"#[cfg(test)]\nmod tests {{ fn long() {{\n{body(30)}\n}} }}\n",
            "m/tests.rs": f"fn f() {{\n{body(30)}\n}}\n",
        }) / "src"
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = lengths.main(["--max", "10", str(src)])
        self.assertEqual(code, 1, out.getvalue())
        self.assertIn("lib.rs:14: over is 11 lines", out.getvalue())
        self.assertNotIn("at_limit", out.getvalue())
        self.assertNotIn("declared", out.getvalue())
        self.assertNotIn("long", out.getvalue())
        self.assertIn("1 production functions over 10 lines", out.getvalue())


if __name__ == "__main__":
    unittest.main()
