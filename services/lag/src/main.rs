//! sluice-lag: polls the configured Kafka groups' offsets and record
//! timestamps, exports them (`/metrics`, `/groups`), and never depends on the
//! consumers it watches. `sluice-lag describe --group G` prints one group
//! from a running instance; `sluice-lag check-trigger key=value…` reads a
//! ScaledObject's trigger metadata as the scaler would; `sluice-lag simulate` replays a trace through the
//! autoscaling engine. Configuration: `SLUICE_LAG_…` (docs/operating.md and
//! `sluice_lag::config`); a bad or unknown variable stops it with status 2.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use sluice_lag::config::LagConfig;
use sluice_lag::metrics::Metrics;
use sluice_lag::picture::Picture;
use sluice_lag::poller::{Poller, next_wait};
use sluice_service::env::EnvReader;
use sluice_service::settings;
use sluice_service::{signal, telemetry};
use tokio::sync::watch;

const PREFIX: &str = "SLUICE_LAG_";

/// `--help`: the subcommands, then every setting.
fn help() -> String {
    let usage = "sluice-lag: watches consumer groups' offsets and record timestamps; exports them \
                 (/metrics, /groups) and serves KEDA's external scaler.\n\
                 \n  sluice-lag                      run (settings below)\
                 \n  sluice-lag describe --group G   one group, from a running instance\
                 \n  sluice-lag check-trigger k=v…   a ScaledObject's trigger metadata, as the scaler reads it\
                 \n  sluice-lag simulate --help      replay a trace through the autoscaling engine\n\
                 \nIts settings are environment variables (a bad or unknown one stops it with status 2):\n";
    format!("{usage}{}", settings::help(PREFIX, &[sluice_lag::config::settings::SETTINGS]))
}

fn main() -> anyhow::Result<()> {
    if std::env::args().nth(1).is_some_and(|a| a == "--help" || a == "-h") {
        use std::io::Write;
        return Ok(std::io::stdout().write_all(help().as_bytes())?);
    }
    if std::env::args().nth(1).as_deref() == Some("describe") {
        use clap::Parser;
        let args = sluice_lag::cli::DescribeArgs::parse_from(std::env::args().skip(1));
        use std::io::Write;
        return match sluice_lag::cli::describe(&args) {
            Ok(text) => Ok(std::io::stdout().write_all(text.as_bytes())?),
            Err(e) => anyhow::bail!(e),
        };
    }
    if std::env::args().nth(1).as_deref() == Some("check-trigger") {
        // `sluice-lag check-trigger key=value…`: a ScaledObject's trigger metadata as the scaler reads it.
        use std::io::Write;
        let meta: std::collections::HashMap<String, String> =
            std::env::args().skip(2).filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.into(), v.into()))).collect();
        match sluice_lag::scaler::TriggerSpec::from_metadata(&meta) {
            Ok(spec) => return Ok(writeln!(std::io::stdout(), "{} {:?}", spec.metric_name(), spec.settings.trigger)?),
            Err(e) => {
                eprintln!("{e}");
                std::process::exit(2);
            }
        }
    }
    if std::env::args().nth(1).as_deref() == Some("simulate") {
        use std::io::Write;
        let args: Vec<String> = std::env::args().skip(2).collect();
        return match sluice_lag::simulate::run(&args) {
            Ok(text) => Ok(writeln!(std::io::stdout(), "{text}")?),
            Err(e) => anyhow::bail!(e),
        };
    }
    telemetry::init();
    let tokio = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting tokio")?;
    let result = tokio.block_on(run());
    tokio.shutdown_timeout(Duration::from_secs(1));
    result
}

async fn run() -> anyhow::Result<()> {
    let mut env = EnvReader::from_env(PREFIX);
    let config = LagConfig::read(&mut env);
    // A missing required setting is one of the problems `finish` reports.
    let config = match (env.finish(), config) {
        (Ok(()), Some(config)) => Arc::new(config),
        (result, _) => {
            tracing::error!("{}", result.err().map_or_else(|| "invalid configuration".to_string(), |e| e.to_string()));
            std::process::exit(2);
        }
    };
    let metrics = Metrics::with_burrow(config.burrow_cluster.as_deref());
    sluice_service::connections::declare("kafka", &config.brokers);
    let (picture_tx, picture_rx) = watch::channel(Arc::new(Picture::default()));
    // Ready while polls succeed: the last clean poll is recent.
    let last_ok = Arc::new(AtomicI64::new(0));
    let stale_ms = (config.poll_interval * 3 + config.request_timeout).as_millis() as i64;
    let (stop_tx, stop_rx) = watch::channel(false);
    let scalers = sluice_lag::scaler::Scalers::new(config.rate_window.as_millis() as i64);
    let routes = sluice_lag::http::routes(picture_rx.clone(), scalers.clone(), config.burrow_cluster.clone());
    let ready = ready_check(Arc::clone(&last_ok), stale_ms);
    let (addr, admin) = sluice_service::admin::serve_with(
        config.admin_listen,
        "lag",
        (metrics.registry.clone(), Some(Arc::new(metrics.append_readings()))),
        ready,
        routes,
        stopped(stop_rx),
    )
    .await
    .with_context(|| format!("binding the admin port {}", config.admin_listen))?;
    tracing::info!(%addr, groups = ?config.groups, pattern = ?config.groups_regex.as_ref().map(|r| r.as_str()), "sluice-lag serving");
    let scaler = match config.scaler_listen {
        Some(listen) => {
            let service = sluice_lag::scaler::grpc::Service {
                scalers,
                picture: picture_rx,
                stale_ms,
                metrics: sluice_lag::scaler::grpc::ScalerMetrics::register(&metrics.registry)
                    .context("registering the scaler's metrics")?,
            };
            let stopped = stopped(stop_tx.subscribe());
            let (addr, task) =
                sluice_lag::scaler::grpc::serve(listen, config.scaler_tls.clone(), service, stopped).await?;
            tracing::info!(%addr, tls = config.scaler_tls.is_some(), "KEDA external scaler serving");
            Some(task)
        }
        None => None,
    };
    poll_until_shutdown(&config, &metrics, &last_ok, &picture_tx).await;
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(2), admin).await;
    if let Some(task) = scaler {
        let _ = tokio::time::timeout(Duration::from_secs(2), task).await;
    }
    tracing::info!("sluice-lag stopped");
    Ok(())
}

/// Resolves once `stop` says so.
async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Ready while the last complete poll (its time in `last_ok`) is at most `stale_ms` old.
fn ready_check(last_ok: Arc<AtomicI64>, stale_ms: i64) -> sluice_service::admin::ReadyCheck {
    Arc::new(move || {
        use sluice_service::admin::NotReady;
        let at = last_ok.load(Ordering::SeqCst);
        if at == 0 {
            return Err(NotReady::new("no complete poll yet"));
        }
        let age = sluice_core::clock::now_ms() - at;
        if age > stale_ms { Err(NotReady::new(format!("the last complete poll was {age} ms ago"))) } else { Ok(()) }
    })
}

/// Polls every interval, publishing each picture, until SIGTERM or SIGINT.
async fn poll_until_shutdown(
    config: &Arc<LagConfig>,
    metrics: &Metrics,
    last_ok: &AtomicI64,
    picture_tx: &watch::Sender<Arc<Picture>>,
) {
    let mut poller = Poller::new(Arc::clone(config));
    let shutdown = signal::shutdown();
    tokio::pin!(shutdown);
    loop {
        let started = Instant::now();
        let (picture, errors) = poller.poll(sluice_core::clock::now_ms()).await;
        let took = started.elapsed();
        metrics.publish(&picture, took.as_secs_f64(), &errors);
        metrics.count_requests(&poller.requests());
        if errors.is_empty() {
            last_ok.store(picture.at_ms, Ordering::SeqCst);
        } else {
            tracing::warn!(?errors, "Poll incomplete");
        }
        picture_tx.send_replace(Arc::new(picture));
        // From the poll's start, publishing included: polls start every interval.
        tokio::select! {
            () = tokio::time::sleep(next_wait(config.poll_interval, started.elapsed())) => {}
            () = &mut shutdown => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_lag::config::settings::SETTINGS;

    #[test]
    fn reads_exactly_its_table() {
        let vars = [("BROKERS", "k:9092"), ("GROUPS", "g")];
        let mut env = EnvReader::from_vars(PREFIX, vars.map(|(k, v)| (format!("{PREFIX}{k}"), v.to_string())));
        LagConfig::read(&mut env).expect("complete");
        assert_eq!(env.names_read(), settings::names(&[SETTINGS]));
        env.finish().expect("valid");
    }

    #[test]
    fn the_docs_table_is_the_code_s() {
        let page = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/operating.md");
        if let Err(e) = settings::check_docs(&page, "lag", &settings::markdown(PREFIX, &[SETTINGS])) {
            panic!("{e}");
        }
    }
}
