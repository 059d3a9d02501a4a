//! Lease-based leader election (coordination.k8s.io/v1), as client-go's leaderelection does it:
//! one replica holds the Lease and renews it; the others wait until it expires. Writes use the
//! Lease's resourceVersion, so two candidates cannot both win a race.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;

/// Election settings.
#[derive(Clone, Debug)]
pub struct Election {
    pub lease_name: String,
    pub identity: String,
    /// How long a Lease stays valid without renewal.
    pub lease_duration: Duration,
    /// How often the holder renews (and candidates retry).
    pub retry_period: Duration,
}

/// Whether `identity` holds the Lease after one attempt.
#[derive(Debug, PartialEq, Eq)]
pub enum Attempt {
    Leader,
    Follower { holder: String },
}

impl Election {
    /// One acquire-or-renew round.
    pub async fn try_acquire(&self, api: &Api<Lease>) -> Result<Attempt, kube::Error> {
        let now = Timestamp::now();
        let seconds = i32::try_from(self.lease_duration.as_secs()).unwrap_or(i32::MAX);
        let Some(mut lease) = api.get_opt(&self.lease_name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.lease_name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(seconds),
                    acquire_time: Some(MicroTime(now)),
                    renew_time: Some(MicroTime(now)),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(Attempt::Leader),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(self.follower("another candidate")),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let held_by_us = holder == self.identity;
        let expired = spec.renew_time.as_ref().is_none_or(|renewed| {
            let valid = i64::from(spec.lease_duration_seconds.unwrap_or(seconds));
            renewed.0.as_second().saturating_add(valid) < now.as_second()
        });
        if !held_by_us && !holder.is_empty() && !expired {
            return Ok(Attempt::Follower { holder });
        }
        if !held_by_us {
            spec.holder_identity = Some(self.identity.clone());
            spec.acquire_time = Some(MicroTime(now));
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        }
        spec.lease_duration_seconds = Some(seconds);
        spec.renew_time = Some(MicroTime(now));
        match api
            .replace(&self.lease_name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(Attempt::Leader),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(self.follower("a newer holder")),
            Err(e) => Err(e),
        }
    }

    /// Gives the Lease up if this candidate holds it, so that a successor need not wait for it
    /// to expire (a rolling update, an uninstall). As client-go does it: the holder is cleared
    /// and the duration shortened, with the Lease's resourceVersion, so a Lease another
    /// candidate has taken meanwhile is left alone. Returns whether it was released.
    pub async fn release(&self, api: &Api<Lease>) -> Result<bool, kube::Error> {
        let Some(mut lease) = api.get_opt(&self.lease_name).await? else {
            return Ok(false);
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(false);
        };
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(false);
        }
        let now = Timestamp::now();
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.acquire_time = Some(MicroTime(now));
        spec.renew_time = Some(MicroTime(now));
        match api
            .replace(&self.lease_name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn follower(&self, holder: &str) -> Attempt {
        Attempt::Follower {
            holder: holder.to_string(),
        }
    }

    /// Waits until this candidate holds the Lease.
    pub async fn acquire(&self, api: &Api<Lease>) {
        let mut last_holder = String::new();
        loop {
            match self.try_acquire(api).await {
                Ok(Attempt::Leader) => {
                    tracing::info!(lease = %self.lease_name, identity = %self.identity, "became leader");
                    return;
                }
                Ok(Attempt::Follower { holder }) => {
                    if holder != last_holder {
                        tracing::info!(lease = %self.lease_name, %holder, "waiting for the leader's lease to expire");
                        last_holder = holder;
                    }
                }
                Err(e) => {
                    tracing::warn!(lease = %self.lease_name, error = %e, "leader election failed; retrying")
                }
            }
            tokio::time::sleep(self.retry_period).await;
        }
    }

    /// Renews the Lease until a renewal has failed for a whole lease duration (or another
    /// candidate took it); then returns, and the caller must stop acting as leader.
    pub async fn hold(&self, api: &Api<Lease>) {
        let mut last_renewal = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(self.retry_period).await;
            match self.try_acquire(api).await {
                Ok(Attempt::Leader) => last_renewal = tokio::time::Instant::now(),
                Ok(Attempt::Follower { holder }) => {
                    tracing::error!(lease = %self.lease_name, %holder, "leadership lost to another candidate");
                    return;
                }
                Err(e) => {
                    tracing::warn!(lease = %self.lease_name, error = %e, "lease renewal failed");
                    if last_renewal.elapsed() >= self.lease_duration {
                        tracing::error!(lease = %self.lease_name, "leadership lost: the lease could not be renewed in time");
                        return;
                    }
                }
            }
        }
    }
}
