//! `bessemerd`: the BESS-compatible gRPC control daemon for Bessemer.
//!
//! * [`pb`]: the `bess.pb` messages and the tonic client/server generated from
//!   `proto/bess/*.proto` (compiled at build time by protox, no system `protoc`);
//! * [`convert`]: `google.protobuf.Any` <-> [`bessemer_core::Value`] through prost-reflect;
//! * [`memory`]: giving memory freed by large requests back to the system;
//! * [`observe`]: counter snapshots, drop rates, Prometheus `/metrics` and the web view;
//! * [`service`]: the `BESSControl` service on top of [`bessemer_core::Engine`];
//! * [`server`]: listening (TCP or unix socket), pid file, signals and clean shutdown.

pub mod convert;
pub mod listen;
pub mod memory;
pub mod nic_plan;
pub mod observe;
pub mod offload;
mod secret;
pub mod server;
pub mod service;

/// Generated code of BESS's `bess.pb` package.
pub mod bess {
    /// Generated `bess.pb` messages, client (`bess_control_client`) and server.
    pub mod pb {
        #![allow(clippy::all, missing_docs)]
        tonic::include_proto!("bess.pb");
    }
}

/// Generated code of Bessemer's own `bessemer.pb` package (`proto/bess/ext/`).
pub mod bessemer {
    /// Bessemer's messages and its `BessemerControl` service (client and server).
    pub mod pb {
        #![allow(clippy::all, missing_docs)]
        tonic::include_proto!("bessemer.pb");
    }
}

pub use bess::pb;
