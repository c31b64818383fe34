//! Shutdown signals, and waiting for a dependency without ignoring them.

/// Resolves on SIGTERM (Kubernetes) or SIGINT (Ctrl-C).
pub async fn shutdown() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    () = ctrl_c => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => ctrl_c.await,
        }
    }
    #[cfg(not(unix))]
    ctrl_c.await;
}

/// Calls `connect` until it succeeds, backing off from 200 ms to 5 s and
/// logging each failure; `None` if `shutdown` resolves first (a dependency
/// that is down at start delays readiness, it does not crash the service).
pub async fn until_connected<T, E, F>(
    what: &str,
    mut connect: impl FnMut() -> F,
    mut shutdown: std::pin::Pin<&mut impl Future<Output = ()>>,
) -> Option<T>
where
    E: std::fmt::Display,
    F: Future<Output = Result<T, E>>,
{
    let mut delay = std::time::Duration::from_millis(200);
    loop {
        tokio::select! {
            result = connect() => match result {
                Ok(value) => return Some(value),
                Err(e) => tracing::warn!(error = %e, "{what} not reachable; retrying"),
            },
            () = &mut shutdown => return None,
        }
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = &mut shutdown => return None,
        }
        delay = (delay * 2).min(std::time::Duration::from_secs(5));
    }
}
