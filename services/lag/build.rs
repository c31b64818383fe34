//! Compiles KEDA's external scaler contract (`pkg/scalers/externalscaler/externalscaler.proto`)
//! from KEDA's released Go module, so the service sluice-lag serves is KEDA's own, never a
//! copy. The module is found with `go mod download` (Go's module cache, or the Go module
//! proxy), or at `SLUICE_KEDA_MODULE_DIR` (a directory holding the unpacked module).

use std::path::PathBuf;
use std::process::Command;

const KEDA_MODULE: &str = "github.com/kedacore/keda/v2";

fn keda_module_dir() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("SLUICE_KEDA_MODULE_DIR") {
        return Ok(PathBuf::from(dir));
    }
    let version = std::env::var("SLUICE_KEDA_VERSION").unwrap_or_else(|_| "v2.21.0".into());
    let out = std::env::var_os("OUT_DIR").ok_or("OUT_DIR is not set")?;
    let output = Command::new("go")
        .args(["mod", "download", "-json", &format!("{KEDA_MODULE}@{version}")])
        .current_dir(out)
        .output()
        .map_err(|e| {
            format!("running `go mod download` for KEDA's module: {e} (Go is needed to build sluice-lag, or set SLUICE_KEDA_MODULE_DIR)")
        })?;
    let text = String::from_utf8_lossy(&output.stdout);
    let dir = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("\"Dir\": \"").and_then(|d| d.strip_suffix("\",")))
        .ok_or_else(|| {
            format!(
                "`go mod download {KEDA_MODULE}@{version}` gave no directory: {}{}",
                text,
                String::from_utf8_lossy(&output.stderr)
            )
        })?;
    Ok(PathBuf::from(dir))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-env-changed=SLUICE_KEDA_MODULE_DIR");
    println!("cargo:rerun-if-env-changed=SLUICE_KEDA_VERSION");
    let root = keda_module_dir()?.join("pkg/scalers/externalscaler");
    let proto = root.join("externalscaler.proto");
    let descriptors = protox::compile([&proto], [&root])?;
    tonic_prost_build::configure().build_client(true).build_server(true).compile_fds(descriptors)?;
    println!("cargo:rerun-if-changed={}", proto.display());
    Ok(())
}
