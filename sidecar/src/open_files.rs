//! The open-file limit, raised at start. Every connection, shared-memory region and upstream
//! call holds a descriptor, and all ports share the process's limit: with the usual soft limit of
//! 1024, a flood on one port would stop the others long before the connection caps
//! (`limits.max_connections`) are reached. The soft limit is raised to the hard one, which the
//! container runtime sets (and only a privileged process could raise further).

use nix::sys::resource::{Resource, getrlimit, setrlimit};

/// The soft limit before and after raising it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Raised {
    pub before: u64,
    pub now: u64,
}

/// Raises the soft limit on open files to the hard limit.
pub fn raise() -> nix::Result<Raised> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard)?;
    }
    let (now, _) = getrlimit(Resource::RLIMIT_NOFILE)?;
    Ok(Raised { before: soft, now })
}

/// Descriptors the ports may hold at once with their caps: two client ports, two small ones.
pub fn needed_by_ports(limits: &infergate_config::Limits) -> u64 {
    2 * u64::from(limits.max_connections) + 2 * u64::from(limits.max_admin_connections)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_ends_at_the_hard_limit() {
        let raised = raise().unwrap();
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        assert_eq!(soft, hard);
        assert_eq!(raised.now, hard);
        assert!(raised.before <= raised.now);
    }
}
