//! Logging: lines in Triton's layouts, tracing's text or JSON, on stderr or appended to a file,
//! with severity switches, a level (and, for text, a layout) that `/v2/logging` and the gRPC
//! `LogSettings` RPC change at run time. Request payloads are never logged.
//!
//! - [`subscriber`]: the subscriber installed at start ([`init`]), the handle that changes it at
//!   run time ([`LogControl`]), and the settings as Triton reports them ([`LogSettings`]).
//! - [`line`]: log lines in Triton's two layouts, which its `log_format` setting names, and the
//!   helpers of the lines Triton writes (its tables, printable client text, a failed inference).
//! - [`update`]: changing the settings over REST and gRPC, as Triton does (the handlers are the
//!   REST front's `logging.rs` and the gRPC service).

pub mod line;
pub mod subscriber;
pub mod update;

pub use subscriber::{LogControl, LogSettings, init};
