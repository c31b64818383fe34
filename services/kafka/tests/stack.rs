//! The local stack end to end: `deploy/local/stack.sh up` starts a real
//! Kafka and a real Redis on ports of this test's own, a second `up` is a
//! no-op that says so, the project creates its topics, a record goes through
//! the broker and back, Redis reads and writes, and `down` leaves no process.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use redis::AsyncCommands;
use sluice_kafka::topics::TopicSpec;
use sluice_kafka::{KafkaConfig, PipelinedProducer, ensure_topics};
use sluice_testkit::{consume, repo_root, unique};

struct Stack {
    dir: PathBuf,
    kafka_port: u16,
    controller_port: u16,
    secure_port: u16,
    /// Given too, or it would be the Kafka port + 7, which another process
    /// may hold (CI once found it taken).
    jmx_port: u16,
    redis_port: u16,
    /// Given too, or it would be the Redis port + 1 (CI once found it taken).
    redis_tls_port: u16,
}

impl Stack {
    fn run(&self, command: &str) -> Output {
        Command::new("bash")
            .arg(repo_root().join("deploy/local/stack.sh"))
            .arg(command)
            .env("SLUICE_STACK_DIR", &self.dir)
            .env("SLUICE_KAFKA_PORT", self.kafka_port.to_string())
            .env("SLUICE_KAFKA_CONTROLLER_PORT", self.controller_port.to_string())
            .env("SLUICE_KAFKA_SECURE_PORT", self.secure_port.to_string())
            .env("SLUICE_KAFKA_JMX_PORT", self.jmx_port.to_string())
            .env("SLUICE_REDIS_PORT", self.redis_port.to_string())
            .env("SLUICE_REDIS_TLS_PORT", self.redis_tls_port.to_string())
            .output()
            .expect("running deploy/local/stack.sh")
    }
}

/// Stops the stack even when an assertion fails half-way.
impl Drop for Stack {
    fn drop(&mut self) {
        let _ = self.run("down");
    }
}

/// `N` distinct free ports: each listener is held until all are chosen, so
/// the kernel cannot hand the same port out twice.
fn free_ports<const N: usize>() -> [u16; N] {
    let listeners: Vec<TcpListener> = (0..N).map(|_| TcpListener::bind("127.0.0.1:0").expect("a free port")).collect();
    std::array::from_fn(|i| listeners[i].local_addr().expect("its address").port())
}

fn text(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

fn pid(dir: &Path, name: &str) -> u32 {
    let raw = std::fs::read_to_string(dir.join(format!("{name}.pid"))).expect("pid file after up");
    raw.trim().parse().expect("a pid")
}

/// Alive means present in /proc and not a zombie waiting to be reaped.
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'),
        Err(_) => false,
    }
}

fn answers(port: u16) -> bool {
    TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(500)).is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stack_up_is_idempotent_serves_kafka_and_redis_and_down_leaves_nothing() {
    let [kafka_port, controller_port, secure_port, jmx_port, redis_port, redis_tls_port] = free_ports();
    let stack = Stack {
        dir: std::env::temp_dir().join(unique("sluice-stack-test")),
        kafka_port,
        controller_port,
        secure_port,
        jmx_port,
        redis_port,
        redis_tls_port,
    };

    let first = stack.run("up");
    assert!(first.status.success(), "up failed:\n{}", text(&first));
    let brokers = format!("127.0.0.1:{}", stack.kafka_port);
    assert!(answers(stack.secure_port), "the SASL_SSL listener answers on {}", stack.secure_port);
    assert!(answers(stack.redis_tls_port), "Redis's TLS port answers on {}", stack.redis_tls_port);
    assert!(text(&first).contains(&brokers), "up prints where Kafka is:\n{}", text(&first));

    let second = stack.run("up");
    assert!(second.status.success(), "second up failed:\n{}", text(&second));
    assert!(text(&second).contains("already running"), "second up:\n{}", text(&second));

    // The project creates its topics; doing it twice is fine.
    let kafka = KafkaConfig::new(&brokers);
    let prefix = format!("{}.", unique("stack"));
    let specs = TopicSpec::project(&prefix, 12);
    ensure_topics(&kafka, &specs, Duration::from_secs(60)).await.expect("topics created");
    ensure_topics(&kafka, &specs, Duration::from_secs(60)).await.expect("topics re-ensured");

    // A record through the real broker and back.
    let topic = &specs[0].name;
    let mut producer = PipelinedProducer::new(&kafka, 16).expect("producer");
    producer.send(topic, b"pool-1", b"hello", 7u8).await.expect("send");
    let acked = producer.flush().await.expect("flush");
    assert_eq!(acked.len(), 1);
    assert_eq!(acked[0].tag, 7);
    let records = consume(&kafka, topic, 1, Duration::from_secs(60)).await;
    assert_eq!(records.len(), 1, "the record came back");
    assert_eq!((records[0].key.as_slice(), records[0].payload.as_slice()), (&b"pool-1"[..], &b"hello"[..]));
    assert_eq!(records[0].partition, acked[0].partition);

    // The real Redis reads and writes.
    let client = redis::Client::open(format!("redis://127.0.0.1:{}", stack.redis_port)).expect("redis url");
    let mut conn = client.get_multiplexed_async_connection().await.expect("redis connection");
    let _: () = conn.set("sluice:stack-test", "ok").await.expect("SET");
    let value: String = conn.get("sluice:stack-test").await.expect("GET");
    assert_eq!(value, "ok");
    drop(conn);

    let (kafka_pid, redis_pid) = (pid(&stack.dir, "kafka"), pid(&stack.dir, "redis"));
    assert!(alive(kafka_pid) && alive(redis_pid));
    let down = stack.run("down");
    assert!(down.status.success(), "down failed:\n{}", text(&down));
    assert!(!alive(kafka_pid), "kafka (pid {kafka_pid}) still running after down");
    assert!(!alive(redis_pid), "redis (pid {redis_pid}) still running after down");
    for port in [stack.kafka_port, stack.controller_port, stack.secure_port, stack.redis_port, stack.redis_tls_port] {
        assert!(!answers(port), "port {port} still answers after down");
    }
    let status = stack.run("status");
    assert_eq!(status.status.code(), Some(3), "status after down:\n{}", text(&status));
    let _ = std::fs::remove_dir_all(&stack.dir);
}
