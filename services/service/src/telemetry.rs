//! Tracing setup, in one place for every service.

use std::io::IsTerminal;

/// Logs to stderr: plain with colours on a terminal, JSON otherwise (in a
/// container) or when `SLUICE_LOG_FORMAT=json`. `SLUICE_LOG` is an
/// `EnvFilter` directive (default `info`).
pub fn init() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SLUICE_LOG").unwrap_or_else(|_| "info".into());
    let terminal = std::io::stderr().is_terminal();
    let json = match std::env::var("SLUICE_LOG_FORMAT").as_deref() {
        Ok("json") => true,
        Ok("plain") => false,
        _ => !terminal,
    };
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.with_ansi(terminal).init();
    }
}
