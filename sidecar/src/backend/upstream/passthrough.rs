//! Client regions handed to the upstream: when a client places an input in its own shared-memory
//! region, or asks for an output there, the sidecar registers that region with the upstream
//! (once, under a name of its own) and lets the upstream read the input or write the output
//! there, so the bytes are never copied by the sidecar.
//!
//! System regions only where the staging pool is active, which proves the upstream sees this
//! container's `/dev/shm`; CUDA regions where the upstream offers `cuda_shared_memory` (the IPC
//! handle goes to it as the client gave it). A region the upstream cannot open is remembered and
//! served the ordinary way — except a CUDA region this container cannot open either
//! ([`Region::CudaForwarded`]), which is registered with the upstream when the client registers
//! it, so that the client gets the upstream's refusal then.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use infergate_proto::inference::{
    CudaSharedMemoryRegisterRequest, CudaSharedMemoryStatusRequest,
    CudaSharedMemoryUnregisterRequest, SystemSharedMemoryRegisterRequest,
    SystemSharedMemoryStatusRequest, SystemSharedMemoryUnregisterRequest,
};
use parking_lot::Mutex;

use super::answer::upstream_error;
use super::transport::Link;
use crate::error::Result;
use crate::shm::registry::Region;

/// Prefix of every region name the sidecar registers with the upstream.
pub const NAME_PREFIX: &str = "infergate_";

struct Entry {
    /// The client's registration; dead once the client unregistered and no request holds it.
    region: Weak<Region>,
    /// The name the upstream knows it by; `None` when the upstream could not open it.
    upstream_name: Option<String>,
    /// What the upstream was given under that name.
    given: Given,
}

/// A region as the upstream knows it, which is also what its status lists.
#[derive(PartialEq)]
enum Given {
    /// A system region: its key (registered from the object's start) and size.
    System { key: String, byte_size: u64 },
    /// A CUDA region, registered (and unregistered) through the CUDA shared-memory API.
    Cuda { byte_size: u64 },
}

impl Given {
    fn is_cuda(&self) -> bool {
        matches!(self, Given::Cuda { .. })
    }
}

impl Entry {
    /// Whether the upstream still holds this entry's name, as the sidecar registered it.
    fn held_by(&self, held: &[(String, Given)]) -> bool {
        self.upstream_name
            .as_ref()
            .is_some_and(|name| held.iter().any(|(n, g)| n == name && *g == self.given))
    }
}

#[derive(Default)]
pub struct Passthrough {
    entries: Mutex<Vec<Entry>>,
    /// Held while a region is registered with the upstream. Requests that first use a region at
    /// the same moment would otherwise each register its key, and the upstream refuses a key
    /// under a second name (Triton: `Invalid shared memory region`): the first outcome is the
    /// one every request waits for and reads.
    registering: tokio::sync::Mutex<()>,
    next: AtomicU64,
    /// Output bytes the upstream wrote straight into clients' regions.
    pub output_bytes: AtomicU64,
    /// Input bytes the upstream read straight from clients' regions.
    pub input_bytes: AtomicU64,
}

impl Passthrough {
    /// The upstream's name for `region`, registering it on first use, and where the client's
    /// registration starts in it (add it to offsets inside the client's region); `None` when the
    /// upstream could not open it. Asked only for a region the upstream can open
    /// (`Upstream::can_open`).
    pub async fn upstream_name(
        &self,
        upstream: Link<'_>,
        region: &Arc<Region>,
    ) -> Option<(String, u64)> {
        // Registered from the object's start, the client's offset added to each tensor's offset
        // instead: Triton 2.51 applies a registration offset twice when it reads a region, and
        // maps from it, so it must be page-aligned there; the client's may be anything.
        let base = match region.as_ref() {
            Region::System(system) => system.offset,
            Region::Cuda(_) | Region::CudaForwarded(_) => 0,
        };
        let name = match self.lookup(region) {
            Some(known) => known,
            None => {
                let _one_at_a_time = self.registering.lock().await;
                match self.lookup(region) {
                    Some(known) => known,
                    None => match self.register(upstream, region).await {
                        Ok(name) => Some(name),
                        Err((_, status)) => {
                            tracing::info!(%status, "the upstream cannot open a client region; its bytes go through the sidecar");
                            None
                        }
                    },
                }
            }
        };
        name.map(|name| (name, base))
    }

    /// A CUDA region this container cannot open: registered with the upstream now, so that a
    /// handle the upstream refuses is refused to the client, with the upstream's reason.
    pub async fn adopt(
        &self,
        upstream: Link<'_>,
        client_name: &str,
        region: &Arc<Region>,
    ) -> Result<()> {
        let _one_at_a_time = self.registering.lock().await;
        match self.register(upstream, region).await {
            Ok(name) => {
                tracing::info!(region = client_name, upstream_region = %name, "CUDA shared memory registered with the model server");
                Ok(())
            }
            Err((ours, status)) => {
                let mut error = upstream_error(status, upstream.url);
                // The upstream names the region by the sidecar's name for it.
                error.message = error.message.replace(&ours, client_name);
                Err(error)
            }
        }
    }

    /// Registers `region` with the upstream under a new name of the sidecar's, and remembers
    /// the outcome either way (a region the upstream refused is not offered to it again).
    /// Called with `registering` held.
    async fn register(
        &self,
        upstream: Link<'_>,
        region: &Arc<Region>,
    ) -> std::result::Result<String, (String, tonic::Status)> {
        // A client that let go of a region and registered the same key again (perf_analyzer
        // does at every start) is refused by the upstream while the old registration stands,
        // and the probe's sweep may be seconds away: let go of the dead ones first.
        self.sweep(upstream).await;
        let name = format!(
            "{NAME_PREFIX}client_{}_{}",
            std::process::id(),
            self.next.fetch_add(1, Ordering::Relaxed)
        );
        let client = upstream.client;
        let given = match region.as_ref() {
            Region::System(system) => Given::System {
                key: system.key.clone(),
                byte_size: system.offset.saturating_add(system.byte_size),
            },
            Region::Cuda(_) | Region::CudaForwarded(_) => Given::Cuda {
                byte_size: region.byte_size(),
            },
        };
        let call = async {
            match &given {
                Given::System { key, byte_size } => {
                    client
                        .system_shared_memory_register(SystemSharedMemoryRegisterRequest {
                            name: name.clone(),
                            key: key.clone(),
                            offset: 0,
                            byte_size: *byte_size,
                        })
                        .await
                }
                Given::Cuda { byte_size } => {
                    let (raw_handle, device_id) = region
                        .cuda_handle()
                        .map(|(h, d)| (h.to_vec().into(), i64::try_from(d).unwrap_or(i64::MAX)))
                        .unwrap_or_default();
                    client
                        .cuda_shared_memory_register(CudaSharedMemoryRegisterRequest {
                            name: name.clone(),
                            raw_handle,
                            device_id,
                            byte_size: *byte_size,
                        })
                        .await
                }
            }
        };
        // A hung upstream must not hold a client's request or registration for ever.
        let registered = tokio::time::timeout(upstream.timeout, call)
            .await
            .unwrap_or_else(|_| {
                Err(tonic::Status::deadline_exceeded(
                    "the upstream did not answer the registration in time",
                ))
            });
        self.entries.lock().push(Entry {
            region: Arc::downgrade(region),
            upstream_name: registered.is_ok().then(|| name.clone()),
            given,
        });
        match registered {
            Ok(()) => Ok(name),
            Err(status) => Err((name, status)),
        }
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
    pub async fn sweep(&self, upstream: Link<'_>) {
        let gone: Vec<(String, bool)> = {
            let mut entries = self.entries.lock();
            let mut gone = Vec::new();
            entries.retain(|e| {
                let alive = e.region.strong_count() > 0;
                if !alive && let Some(name) = &e.upstream_name {
                    gone.push((name.clone(), e.given.is_cuda()));
                }
                alive
            });
            gone
        };
        for (name, cuda) in gone {
            let gone = unregister(upstream, name, cuda);
            let _ = tokio::time::timeout(upstream.timeout, gone).await;
        }
    }

    /// At shutdown: the upstream forgets every client region registered through the sidecar.
    pub async fn release(&self, upstream: Link<'_>) {
        self.unregister_all(upstream, std::time::Duration::from_secs(2))
            .await;
    }

    /// The upstream lost the staging pool or refused a region a call named: it restarted, or
    /// one of its own clients unregistered regions there (perf_analyzer unregisters them all
    /// when it starts and ends). The clients' regions it no longer holds are registered again on
    /// their next use; those it still holds are kept as they are. Unregistering those too would
    /// race with the calls using them: Triton refuses to let go of a region a call is reading or
    /// writing ("currently in use"), keeps the name, and then refuses the client's key under a
    /// new one, so that region's bytes would go through the sidecar from then on.
    pub async fn forget_lost(&self, upstream: Link<'_>) {
        // No registration starts before the lost names are forgotten.
        let _one_at_a_time = self.registering.lock().await;
        let cuda = self.entries.lock().iter().any(|e| e.given.is_cuda());
        match regions_held(upstream, cuda).await {
            Ok(held) => self.entries.lock().retain(|e| e.held_by(&held)),
            // What the upstream holds is unknown: let go of every name.
            Err(status) => {
                tracing::debug!(%status, "the upstream's shared-memory status is unknown; every client region is registered again");
                self.unregister_all(upstream, upstream.timeout).await;
            }
        }
    }

    /// Forgets every entry and unregisters the names the upstream was given; a name it no
    /// longer knows (it restarted) is refused, which changes nothing.
    async fn unregister_all(&self, upstream: Link<'_>, limit: std::time::Duration) {
        let names: Vec<(String, bool)> = self
            .entries
            .lock()
            .drain(..)
            .filter_map(|e| Some((e.upstream_name?, e.given.is_cuda())))
            .collect();
        for (name, cuda) in names {
            let _ = tokio::time::timeout(limit, unregister(upstream, name, cuda)).await;
        }
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

/// The regions the upstream holds, by name (CUDA ones asked for only when `cuda`).
async fn regions_held(
    upstream: Link<'_>,
    cuda: bool,
) -> std::result::Result<Vec<(String, Given)>, tonic::Status> {
    let client = upstream.client;
    let ask = async {
        let system = client
            .system_shared_memory_status(SystemSharedMemoryStatusRequest::default())
            .await?;
        let mut held: Vec<(String, Given)> = system
            .regions
            .into_values()
            .map(|r| {
                let given = Given::System {
                    key: r.key,
                    byte_size: r.byte_size,
                };
                (r.name, given)
            })
            .collect();
        if cuda {
            let status = client
                .cuda_shared_memory_status(CudaSharedMemoryStatusRequest::default())
                .await?;
            held.extend(status.regions.into_values().map(|r| {
                let given = Given::Cuda {
                    byte_size: r.byte_size,
                };
                (r.name, given)
            }));
        }
        Ok(held)
    };
    tokio::time::timeout(upstream.timeout, ask)
        .await
        .unwrap_or_else(|_| Err(tonic::Status::deadline_exceeded("no answer in time")))
}

/// Makes the upstream forget a region the sidecar registered with it.
async fn unregister(
    upstream: Link<'_>,
    name: String,
    cuda: bool,
) -> std::result::Result<(), tonic::Status> {
    let client = upstream.client;
    if cuda {
        client
            .cuda_shared_memory_unregister(CudaSharedMemoryUnregisterRequest { name })
            .await
    } else {
        client
            .system_shared_memory_unregister(SystemSharedMemoryUnregisterRequest { name })
            .await
    }
}
