//! Compiles `proto/` with protox (a protobuf compiler written in Rust), so a
//! fresh machine needs no `protoc` binary.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    let files = [
        root.join("sluice/dex/v1/dex.proto"),
        root.join("sluice/chain/v1/chain.proto"),
        root.join("sluice/scheduler/v1/scheduler.proto"),
    ];
    let descriptors = protox::compile(&files, [&root])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // Service code needs tonic; the messages alone need only prost.
        .client_mod_attribute(".", r#"#[cfg(feature = "grpc")]"#)
        .server_mod_attribute(".", r#"#[cfg(feature = "grpc")]"#)
        .compile_fds(descriptors)?;
    for file in &files {
        println!("cargo:rerun-if-changed={}", file.display());
    }
    Ok(())
}
