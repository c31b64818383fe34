//! A service's settings as data: each one's name, type, default, what it sets and why the
//! default is what it is, in one table per crate. The environment reader takes its names and
//! defaults from the table ([`crate::env::EnvReader::get`] and its kin), and the docs'
//! settings tables and `--help` are rendered from it, so the three cannot drift: each
//! service's tests compare its docs page with [`markdown`] and read an empty environment to
//! check that its reader reads exactly its table.

use std::fmt::Write as _;

/// One variable a service reads (after its prefix, e.g. `SLUICE_PROCESSOR_`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    /// The name after the prefix, e.g. `CONCURRENCY`.
    pub name: &'static str,
    /// What a value looks like: `integer`, `milliseconds`, `true or false`, `host:port`, …
    pub kind: &'static str,
    pub default: Default,
    /// What it sets, in a line.
    pub what: &'static str,
    /// Why the default is what it is: a client's or broker's default, a measured result, a
    /// relation to another setting. Empty for a required setting or one without a default.
    pub why: &'static str,
}

impl Setting {
    /// A table's row (a `const`).
    pub const fn new(
        name: &'static str,
        kind: &'static str,
        default: Default,
        what: &'static str,
        why: &'static str,
    ) -> Self {
        Self { name, kind, default, what, why }
    }

    /// The table's default value as `T`.
    ///
    /// # Panics
    /// If the default is not a [`Default::Value`] or does not parse as `T`: a mistake in the
    /// table, which every test that reads the service's configuration finds.
    pub fn value<T: std::str::FromStr>(&self) -> T
    where
        T::Err: std::fmt::Display,
    {
        let Default::Value(text) = self.default else {
            panic!("setting {}: its default is {:?}, not a value", self.name, self.default)
        };
        text.parse().unwrap_or_else(|e| panic!("setting {}: its default {text:?} does not parse: {e}", self.name))
    }
}

/// A setting's value when its variable is unset (or empty).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Default {
    /// The service does not start without it.
    Required,
    /// Unset means none (the feature is off, or the client's own default applies).
    Unset,
    /// This value, written as the variable would be; [`crate::env::EnvReader::get`] parses it.
    Value(&'static str),
    /// Computed at start (from other settings, the host, or the workload), said in words.
    Derived(&'static str),
}

impl Default {
    fn text(self) -> String {
        match self {
            Self::Required => "required".into(),
            Self::Unset => "unset".into(),
            Self::Value(v) => format!("`{v}`"),
            Self::Derived(words) => words.into(),
        }
    }
}

/// The names in `tables` (a service's test compares them with what its reader read).
pub fn names(tables: &[&[Setting]]) -> std::collections::BTreeSet<String> {
    tables.iter().flat_map(|t| t.iter()).map(|s| s.name.to_string()).collect()
}

/// A service's tables, rendered as Markdown: one row per setting under `prefix`.
pub fn markdown(prefix: &str, tables: &[&[Setting]]) -> String {
    let mut out = format!("| `{prefix}…` | type | default | what, and why this default |\n|---|---|---|---|\n");
    for s in tables.iter().flat_map(|t| t.iter()) {
        let why = if s.why.is_empty() { String::new() } else { format!(" *Why:* {}", s.why) };
        let cells = [s.kind.to_string(), s.default.text(), format!("{}{why}", s.what)].map(|c| c.replace('|', "\\|"));
        let _ = writeln!(out, "| `{}` | {} | {} | {} |", s.name, cells[0], cells[1], cells[2]);
    }
    out
}

/// The same as plain text for `--help`: each setting with its type and default, then what
/// it sets.
pub fn help(prefix: &str, tables: &[&[Setting]]) -> String {
    let mut out = String::new();
    for s in tables.iter().flat_map(|t| t.iter()) {
        let default = s.default.text().replace('`', "");
        let _ = writeln!(out, "  {prefix}{}  ({}; {})\n      {}", s.name, s.kind, default, s.what);
    }
    out
}

/// The Markdown between `<!-- settings:KEY -->` and `<!-- /settings:KEY -->` in `page`, if the
/// markers are there.
pub fn section<'p>(page: &'p str, key: &str) -> Option<&'p str> {
    let (open, close) = (format!("<!-- settings:{key} -->\n"), format!("<!-- /settings:{key} -->"));
    let start = page.find(&open)? + open.len();
    let end = start + page[start..].find(&close)?;
    Some(&page[start..end])
}

/// `page` with the section `key` replaced by `table` (what a test writes when asked to).
pub fn with_section(page: &str, key: &str, table: &str) -> Option<String> {
    let current = section(page, key)?;
    let start = current.as_ptr() as usize - page.as_ptr() as usize;
    Some(format!("{}{}{}", &page[..start], table, &page[start + current.len()..]))
}

/// A docs page whose settings table is not the code's.
#[derive(Debug, thiserror::Error)]
pub enum DocsDrift {
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{path}: no <!-- settings:{key} --> … <!-- /settings:{key} --> section")]
    NoSection { path: String, key: String },
    #[error(
        "{path}'s settings table {key} is not the one the code declares (SLUICE_WRITE_DOCS=1 rewrites it); expected:\n{expected}"
    )]
    Differs { path: String, key: String, expected: String },
}

/// Checks a docs page's section `key` against `table`. With `SLUICE_WRITE_DOCS=1` it writes
/// the table into the page instead (the check passes on the next run).
pub fn check_docs(path: &std::path::Path, key: &str, table: &str) -> Result<(), DocsDrift> {
    let shown = path.display().to_string();
    let io = |source| DocsDrift::Io { path: shown.clone(), source };
    let page = std::fs::read_to_string(path).map_err(io)?;
    let Some(current) = section(&page, key) else {
        return Err(DocsDrift::NoSection { path: shown, key: key.into() });
    };
    if current == table {
        return Ok(());
    }
    if std::env::var("SLUICE_WRITE_DOCS").is_ok_and(|v| v == "1") {
        let page = with_section(&page, key, table).unwrap_or(page);
        return std::fs::write(path, page).map_err(io);
    }
    Err(DocsDrift::Differs { path: shown, key: key.into(), expected: table.into() })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &[Setting] = &[
        Setting { name: "BROKERS", kind: "host:port list", default: Default::Required, what: "Kafka", why: "" },
        Setting {
            name: "LIMIT",
            kind: "integer",
            default: Default::Value("5"),
            what: "at most this many",
            why: "measured: a | b",
        },
    ];

    #[test]
    fn the_table_renders_as_markdown_and_help() {
        let md = markdown("S_", &[TABLE]);
        assert!(md.contains("| `BROKERS` | host:port list | required | Kafka |\n"), "{md}");
        assert!(md.contains("| `LIMIT` | integer | `5` | at most this many *Why:* measured: a \\| b |\n"), "{md}");
        let help = help("S_", &[TABLE]);
        assert!(help.contains("  S_LIMIT  (integer; 5)\n      at most this many\n"), "{help}");
    }

    #[test]
    fn a_section_is_found_and_replaced() {
        let page = "intro\n<!-- settings:x -->\nold\n<!-- /settings:x -->\nend\n";
        assert_eq!(section(page, "x"), Some("old\n"));
        assert_eq!(section(page, "y"), None);
        let new = with_section(page, "x", "new\n").expect("replaced");
        assert_eq!(new, "intro\n<!-- settings:x -->\nnew\n<!-- /settings:x -->\nend\n");
    }
}
