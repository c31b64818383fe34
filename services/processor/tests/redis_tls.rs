//! Every service on the Redis production teams are given: TLS with a CA of its own and a
//! client certificate the server requires, and an ACL user, set as the chart sets them
//! (`REDIS_URL=rediss://…`, `REDIS_USERNAME`, `REDIS_PASSWORD`, `REDIS_TLS_*_FILE`). On the
//! test stack's TLS port: the processor drains a fed chain with every effect exactly once,
//! the scheduler runs its heartbeat, the ingest takes its lease and records its cursor,
//! `sluice-ops rebuild` plans; every connection they opened there is the ACL user's, whom
//! the stack lets touch only keys and channels under `tls-` (this test's prefix). The port
//! also refuses a client without the CA, without a client certificate or with a wrong
//! password, so the settings are what made the difference.

mod jepsen;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use jepsen::Scenario;
use sluice_chainsim::server::{ChainNode, ServerOptions};
use sluice_chainsim::{Chain, ChainConfig};
use sluice_coord::endpoint::RedisEndpoint;
use sluice_core::clock::now_ms;
use sluice_kafka::ensure_topics;
use sluice_kafka::topics::TopicSpec;
use sluice_testkit::process::Spawned;
use sluice_testkit::{SecureRedis, free_port, http_get, secure_redis};

fn endpoint(secure: &SecureRedis) -> RedisEndpoint {
    RedisEndpoint {
        url: secure.url.clone(),
        username: Some(secure.username.clone()),
        password: Some(secure.password.clone()),
        ca_file: Some(secure.ca.clone().into()),
        client_cert: Some((secure.cert.clone().into(), secure.key.clone().into())),
    }
}

async fn connect(endpoint: &RedisEndpoint) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
    let client = endpoint.client().expect("client");
    let connecting = client.get_multiplexed_async_connection();
    match tokio::time::timeout(Duration::from_secs(10), connecting).await {
        Ok(result) => result,
        Err(_) => panic!("connecting to {} took over 10 s", endpoint.url),
    }
}

/// A binary of this build beside the test's (cargo builds every workspace binary first).
fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary");
    let path = exe.parent().and_then(|deps| deps.parent()).expect("target dir").join(name);
    assert!(path.exists(), "{} is missing: build it first (cargo build --bins)", path.display());
    path
}

/// Starts `binary` with its `prefix`ed variables: the TLS Redis's and `vars`.
fn start(binary_name: &str, prefix: &str, secure: &SecureRedis, vars: &[(&str, String)], log: PathBuf) -> Spawned {
    let mut command = Command::new(binary(binary_name));
    command.env("SLUICE_LOG_FORMAT", "plain").env("SLUICE_LOG", "info");
    for (name, value) in secure.settings().iter().chain(vars) {
        command.env(format!("{prefix}{name}"), value);
    }
    Spawned::spawn(&mut command, log).unwrap_or_else(|e| panic!("starting {binary_name}: {e}"))
}

async fn wait_until(what: &str, limit: Duration, mut check: impl AsyncFnMut() -> bool) {
    let started = Instant::now();
    while !check().await {
        assert!(started.elapsed() < limit, "not {what} within {limit:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The ACL user of every connection open on the TLS port (`CLIENT LIST`'s `laddr`).
async fn users_on_tls_port(conn: &mut redis::aio::MultiplexedConnection, port: &str) -> Vec<String> {
    let list: String = redis::cmd("CLIENT").arg("LIST").query_async(conn).await.expect("CLIENT LIST");
    let field = |line: &str, name: &str| {
        line.split(' ').find_map(|f| f.strip_prefix(name).map(str::to_string)).unwrap_or_default()
    };
    list.lines().filter(|l| field(l, "laddr=").ends_with(port)).map(|l| field(l, "user=")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_port_refuses_a_client_without_the_ca_a_certificate_or_the_password() {
    let secure = secure_redis();
    let good = endpoint(&secure);
    let mut conn = connect(&good).await.expect("with the CA, the client certificate and the password");
    let me: String = redis::cmd("ACL").arg("WHOAMI").query_async(&mut conn).await.expect("ACL WHOAMI");
    assert_eq!(me, secure.username, "logged in as the ACL user");
    let cases = [
        ("without the CA (the system's trust store)", RedisEndpoint { ca_file: None, ..good.clone() }),
        ("without a client certificate", RedisEndpoint { client_cert: None, ..good.clone() }),
        ("with a wrong password", RedisEndpoint { password: Some("not-the-password".into()), ..good.clone() }),
    ];
    for (what, endpoint) in cases {
        // A refused handshake may surface at the first command rather than at connecting.
        let refused = match connect(&endpoint).await {
            Err(_) => true,
            Ok(mut conn) => redis::cmd("PING").query_async::<String>(&mut conn).await.is_err(),
        };
        assert!(refused, "{what}: the TLS port let the client in");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_service_runs_on_a_tls_redis_as_its_acl_user() {
    let secure = secure_redis();
    let redis = endpoint(&secure);
    let s = Scenario::with_redis("tls", redis.clone(), 2_000).await;
    let (listener, addr) = ChainNode::bind(([127, 0, 0, 1], 0).into()).await.expect("bind");
    let live = Chain::new(ChainConfig { genesis_ms: now_ms() - 2_000, ..s.chain.clone() }).expect("chain");
    tokio::spawn(ChainNode::start(live, &ServerOptions::default()).serve(listener, std::future::pending()));
    let chain_url = format!("http://{addr}");
    let ingest_topic = format!("{}.ingested", s.input);
    ensure_topics(&s.kafka, &[TopicSpec::new(&ingest_topic, 3)], Duration::from_secs(60)).await.expect("topic");

    let fed = s.feed(4_000).await;
    let processor = s.spawn("a");
    let (scheduler_admin, ingest_admin) = (free_port(), free_port());
    let scheduler_vars = [
        ("REDIS_PREFIX", s.prefix.clone()),
        ("CHAIN_URL", chain_url.clone()),
        ("ADMIN_LISTEN", format!("127.0.0.1:{scheduler_admin}")),
        ("GRPC_LISTEN", format!("127.0.0.1:{}", free_port())),
        ("ADMIN_INSECURE", "true".into()),
        ("JOB_HEARTBEAT_SCHEDULE", "* * * * * *".into()),
        ("JOB_TOKEN_REFRESH_ENABLED", "false".into()),
        ("JOB_POOL_RECONCILE_ENABLED", "false".into()),
    ];
    let scheduler =
        start("sluice-scheduler", "SLUICE_SCHEDULER_", &secure, &scheduler_vars, s.logs.join("scheduler.log"));
    let ingest_vars = [
        ("KAFKA_BROKERS", s.kafka.brokers.clone()),
        ("REDIS_PREFIX", s.prefix.clone()),
        ("CHAIN_URL", chain_url.clone()),
        ("TOPIC", ingest_topic.clone()),
        ("ADMIN_LISTEN", format!("127.0.0.1:{ingest_admin}")),
    ];
    let ingest = start("sluice-ingest", "SLUICE_INGEST_", &secure, &ingest_vars, s.logs.join("ingest.log"));

    jepsen::wait_drained(&s, fed.records, Duration::from_secs(120)).await;
    let mut conn = connect(&redis).await.expect("redis");
    let heartbeat = format!("{}sched:heartbeat:effect:*", s.prefix);
    let ticks = async || {
        let keys: Vec<String> = redis::cmd("KEYS").arg(&heartbeat).query_async(&mut conn.clone()).await.expect("KEYS");
        keys.len() >= 2
    };
    wait_until("two heartbeats written by the scheduler", Duration::from_secs(30), ticks).await;
    let cursor = format!("{}ingest:cursor", s.prefix);
    let moved = async || {
        let at: Option<String> = redis::cmd("GET").arg(&cursor).query_async(&mut conn.clone()).await.expect("GET");
        at.is_some()
    };
    wait_until("the ingest's cursor recorded", Duration::from_secs(30), moved).await;
    for (name, port) in [("scheduler", scheduler_admin), ("ingest", ingest_admin)] {
        let ready = http_get(port, "/ready").map(|(code, _)| code);
        assert_eq!(ready, Some(200), "{name} is ready (it reaches its Redis)");
    }

    let tls_port = secure.url.rsplit(':').next().expect("a port").trim_end_matches('/').to_string();
    let users = users_on_tls_port(&mut conn, &format!(":{tls_port}")).await;
    // The processor's writer and its invalidation subscription, the scheduler's and the
    // ingest's managers, and this test's own connections at least.
    assert!(users.len() >= 5, "connections on the TLS port: {users:?}");
    assert!(users.iter().all(|u| *u == secure.username), "every connection is the ACL user's: {users:?}");
    eprintln!("redis-tls: {} connections on the TLS port, all {}'s", users.len(), secure.username);

    let plan = jepsen::ops(&s, &["rebuild", "--chain-url", &chain_url, "--redis-prefix", &s.prefix]);
    assert_eq!(plan["dry_run"], true, "{plan}");
    assert_eq!(plan["plan"]["case"], "live", "the plan read the live store over TLS: {plan}");

    drop((scheduler, ingest));
    let report = jepsen::finish(&s, &fed, vec![processor]).await;
    report.assert_exactly_once_effects("tls");
}
