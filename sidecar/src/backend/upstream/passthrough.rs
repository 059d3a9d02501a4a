//! Client regions handed to the upstream: when a client places an input in its own system
//! shared-memory region, or asks for an output there, the sidecar registers that region with the
//! upstream (once, under a name of its own) and lets the upstream read the input or write the
//! output there, so the bytes are never copied by the sidecar. Only where the staging pool is active, which proves the upstream sees this container's
//! `/dev/shm`; a region the upstream cannot open is remembered and served the ordinary way.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use infergate_proto::inference::{
    SystemSharedMemoryRegisterRequest, SystemSharedMemoryUnregisterRequest,
};
use parking_lot::Mutex;

use super::Upstream;
use crate::shm::registry::Region;

/// Prefix of every region name the sidecar registers with the upstream.
pub const NAME_PREFIX: &str = "infergate_";

struct Entry {
    /// The client's registration; dead once the client unregistered and no request holds it.
    region: Weak<Region>,
    /// The name the upstream knows it by; `None` when the upstream could not open it.
    upstream_name: Option<String>,
}

#[derive(Default)]
pub struct Passthrough {
    entries: Mutex<Vec<Entry>>,
    next: AtomicU64,
    /// Output bytes the upstream wrote straight into clients' regions.
    pub output_bytes: AtomicU64,
    /// Input bytes the upstream read straight from clients' regions.
    pub input_bytes: AtomicU64,
}

impl Passthrough {
    /// The upstream's name for `region`, registering it on first use, and where the client's
    /// registration starts in it (add it to offsets inside the client's region); `None` when it
    /// is not a system region or the upstream cannot use it.
    pub async fn upstream_name(
        &self,
        upstream: &Upstream,
        region: &Arc<Region>,
    ) -> Option<(String, u64)> {
        let Region::System(system) = region.as_ref() else {
            return None;
        };
        if let Some(known) = self.lookup(region) {
            return known.map(|name| (name, system.offset));
        }
        let name = format!(
            "{NAME_PREFIX}client_{}_{}",
            std::process::id(),
            self.next.fetch_add(1, Ordering::Relaxed)
        );
        // Registered from the object's start, the client's offset added to each tensor's offset
        // instead: Triton 2.51 applies a registration offset twice when it reads a region, and
        // maps from it, so it must be page-aligned there; the client's may be anything.
        let client = upstream.client();
        let registered = client
            .system_shared_memory_register(SystemSharedMemoryRegisterRequest {
                name: name.clone(),
                key: system.key.clone(),
                offset: 0,
                byte_size: system.offset.saturating_add(system.byte_size),
            })
            .await;
        let upstream_name = match registered {
            Ok(_) => Some(name),
            Err(status) => {
                tracing::info!(region = %system.name, %status, "the upstream cannot open this client region; its outputs go through the sidecar");
                None
            }
        };
        self.entries.lock().push(Entry {
            region: Arc::downgrade(region),
            upstream_name: upstream_name.clone(),
        });
        upstream_name.map(|name| (name, system.offset))
    }

    fn lookup(&self, region: &Arc<Region>) -> Option<Option<String>> {
        self.entries
            .lock()
            .iter()
            .find(|e| {
                std::ptr::eq(e.region.as_ptr(), Arc::as_ptr(region)) && e.region.strong_count() > 0
            })
            .map(|e| e.upstream_name.clone())
    }

    /// Unregisters from the upstream the regions clients have let go of. Called on every probe.
    pub async fn sweep(&self, upstream: &Upstream) {
        let gone: Vec<String> = {
            let mut entries = self.entries.lock();
            let mut gone = Vec::new();
            entries.retain(|e| {
                let alive = e.region.strong_count() > 0;
                if !alive && let Some(name) = &e.upstream_name {
                    gone.push(name.clone());
                }
                alive
            });
            gone
        };
        let client = upstream.client();
        for name in gone {
            let _ = client
                .system_shared_memory_unregister(SystemSharedMemoryUnregisterRequest { name })
                .await;
        }
    }

    /// At shutdown: the upstream forgets every client region registered through the sidecar.
    pub async fn release(&self, upstream: &Upstream) {
        let names: Vec<String> = self
            .entries
            .lock()
            .drain(..)
            .filter_map(|e| e.upstream_name)
            .collect();
        let client = upstream.client();
        for name in names {
            let unregister = client
                .system_shared_memory_unregister(SystemSharedMemoryUnregisterRequest { name });
            let _ = tokio::time::timeout(std::time::Duration::from_secs(2), unregister).await;
        }
    }

    /// The upstream restarted: it knows none of the regions any more.
    pub fn forget_all(&self) {
        self.entries.lock().clear();
    }

    pub fn count_input(&self, len: u64) {
        if len > 0 {
            self.input_bytes.fetch_add(len, Ordering::Relaxed);
        }
    }

    pub fn count_output(&self, len: u64) {
        self.output_bytes.fetch_add(len, Ordering::Relaxed);
    }
}
