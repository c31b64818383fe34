//! Rust types generated from the protobuf contracts in `proto/`.
//!
//! The generated code is not edited by hand; see `build.rs`. Service clients
//! and servers are behind the `grpc` feature so that IO-free crates can use
//! the messages without pulling in tonic.

#![allow(missing_debug_implementations, unused_qualifications, clippy::all)]

/// DEX domain records: swaps, pool states, token and pool registries.
pub mod dex {
    /// Version 1 of the DEX records.
    pub mod v1 {
        include!(concat!(env!("OUT_DIR"), "/sluice.dex.v1.rs"));
    }
}

/// The chain node contract: transactions and the `Chain` service.
pub mod chain {
    /// Version 1 of the chain contract.
    pub mod v1 {
        include!(concat!(env!("OUT_DIR"), "/sluice.chain.v1.rs"));
    }
}

/// The scheduler's admin API.
pub mod scheduler {
    /// Version 1 of the admin API.
    pub mod v1 {
        include!(concat!(env!("OUT_DIR"), "/sluice.scheduler.v1.rs"));
    }
}
