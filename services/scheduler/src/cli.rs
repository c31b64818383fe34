//! `sluice-scheduler admin …`: the admin gRPC API from a shell (for
//! operators, e.g. through `kubectl exec`), so no gRPC tool is needed.

use chrono::DateTime;
use sluice_proto::scheduler::v1 as api;
use sluice_proto::scheduler::v1::scheduler_admin_client::SchedulerAdminClient;
use tonic::Request;

/// The admin commands.
#[derive(Debug, clap::Parser)]
#[command(name = "sluice-scheduler admin", about = "Talk to a running scheduler's admin API")]
pub struct AdminArgs {
    /// The scheduler's gRPC address.
    #[arg(long, env = "SLUICE_SCHEDULER_ADMIN_URL", default_value = "http://127.0.0.1:50061")]
    url: String,
    /// Bearer token: the scheduler's ADMIN_TOKEN (none only for one started with ADMIN_INSECURE).
    #[arg(long, env = "SLUICE_SCHEDULER_ADMIN_TOKEN", hide_env_values = true)]
    token: Option<String>,
    #[command(subcommand)]
    command: AdminCommand,
}

#[derive(Debug, clap::Subcommand)]
enum AdminCommand {
    /// Every job: schedule, policies, pause state, next ticks, last run.
    List,
    /// A job's newest runs.
    Runs {
        job: String,
        #[arg(long, default_value_t = 20)]
        limit: u32,
    },
    /// Runs a job now (same claim, lease and fencing as a tick).
    Trigger { job: String },
    /// Pauses a job on every replica.
    Pause {
        job: String,
        #[arg(default_value = "")]
        reason: String,
    },
    /// Resumes a paused job.
    Resume { job: String },
}

fn time(ms: i64) -> String {
    if ms <= 0 {
        return "-".into();
    }
    DateTime::from_timestamp_millis(ms)
        .map_or_else(|| ms.to_string(), |t| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
}

fn run_line(run: &api::Run) -> String {
    let span = if run.ticks > 1 {
        format!(" (+{} ticks to {})", run.ticks - 1, time(run.last_tick_ms))
    } else {
        String::new()
    };
    let took = if run.ended_ms > 0 { format!("{} ms", run.ended_ms - run.started_ms) } else { "-".into() };
    format!(
        "{}{} {:<10} owner {} token {} took {} items {} applied {} drift {}/{} stale {}{}{}",
        time(run.tick_ms),
        span,
        run.outcome,
        run.owner,
        run.token,
        took,
        run.items,
        run.applied,
        run.drift_found,
        run.drift_repaired,
        run.stale_writes,
        if run.manual { " manual" } else { "" },
        if run.reason.is_empty() { String::new() } else { format!(": {}", run.reason) }
    )
}

/// `message` with the bearer token, if any.
fn request<T>(token: Option<&str>, message: T) -> Request<T> {
    let mut request = Request::new(message);
    if let Some(token) = token
        && let Ok(value) = format!("Bearer {token}").parse()
    {
        request.metadata_mut().insert("authorization", value);
    }
    request
}

/// Runs one admin command; the output goes to stdout.
pub async fn run(args: AdminArgs) -> anyhow::Result<String> {
    let mut client = SchedulerAdminClient::connect(args.url.clone()).await?;
    let token = args.token.as_deref();
    let mut out = String::new();
    match args.command {
        AdminCommand::List => {
            let jobs = client.list_jobs(request(token, api::ListJobsRequest {})).await?.into_inner().jobs;
            for job in jobs {
                out.push_str(&format!(
                    "{}  [{}]{}\n  {}\n  overlap {:?}, misfire {:?} (catch-up {} ms), timeout {} ms, jitter {} ms\n  next: {}\n  last success: {}\n",
                    job.name,
                    job.schedule,
                    if job.paused { format!("  PAUSED: {}", job.paused_reason) } else { String::new() },
                    job.description,
                    job.overlap(),
                    job.misfire(),
                    job.catch_up_window_ms,
                    job.timeout_ms,
                    job.jitter_ms,
                    job.next_ticks_ms.iter().map(|t| time(*t)).collect::<Vec<_>>().join(", "),
                    time(job.last_success_ms),
                ));
                if let Some(last) = &job.last_run {
                    out.push_str(&format!("  last run: {}\n", run_line(last)));
                }
            }
        }
        AdminCommand::Runs { job, limit } => {
            let runs = client.get_runs(request(token, api::GetRunsRequest { job, limit })).await?.into_inner().runs;
            for run in &runs {
                out.push_str(&run_line(run));
                out.push('\n');
            }
        }
        AdminCommand::Trigger { job } => {
            let t = client.trigger_now(request(token, api::TriggerNowRequest { job })).await?.into_inner();
            out.push_str(&format!(
                "tick {}: {}{}\n",
                time(t.tick_ms),
                if t.started { "started" } else { "not started" },
                if t.reason.is_empty() { String::new() } else { format!(" ({})", t.reason) }
            ));
        }
        AdminCommand::Pause { job, reason } => {
            client.pause(request(token, api::PauseRequest { job: job.clone(), reason })).await?;
            out.push_str(&format!("{job} paused\n"));
        }
        AdminCommand::Resume { job } => {
            client.resume(request(token, api::ResumeRequest { job: job.clone() })).await?;
            out.push_str(&format!("{job} resumed\n"));
        }
    }
    Ok(out)
}
