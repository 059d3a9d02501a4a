//! The process's liveness, readiness and draining, which the ports report and the upstream
//! discovery keeps.

use std::sync::atomic::{AtomicBool, Ordering};

/// Liveness and readiness. Readiness turns false while draining and once shutdown begins.
///
/// Draining comes first when the pod terminates: the model container's preStop hook calls the
/// admin port's `/drain` (see `admin.rs`), and from then on clients are asked to take their calls
/// elsewhere (gRPC connections get GOAWAY, HTTP/1.1 answers `Connection: close`) while every call
/// that still arrives is served. SIGTERM, after the hook, then stops the ports.
#[derive(Default)]
pub struct Health {
    ready: AtomicBool,
    shutting_down: AtomicBool,
    draining: tokio::sync::watch::Sender<bool>,
}

impl Health {
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::SeqCst);
    }
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst) && !self.is_shutting_down() && !self.is_draining()
    }
    pub fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
    }
    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }
    /// Starts or ends draining; true when this changed it.
    pub fn set_draining(&self, draining: bool) -> bool {
        self.draining.send_if_modified(|current| {
            let changed = *current != draining;
            *current = draining;
            changed
        })
    }
    pub fn is_draining(&self) -> bool {
        *self.draining.borrow()
    }
    /// Follows draining, for the ports' accept loops.
    pub fn draining(&self) -> tokio::sync::watch::Receiver<bool> {
        self.draining.subscribe()
    }
}
