//! Secure defaults for the containers the user describes: the model server and `pod.containers`.
//!
//! Namespaces that enforce the `restricted` Pod Security Standard refuse a pod unless every
//! container forbids privilege escalation, drops all capabilities, runs as non-root and has a
//! seccomp profile. The sidecar always does; the user's containers get the same settings for every
//! field the user leaves unset, in the container's or the pod's security context. A field the user
//! sets is kept as written, so any default can be overridden (`runAsUser: 0` runs as root, and then
//! `runAsNonRoot` is not defaulted, since it would stop the container).
//!
//! The default user is the sidecar's (`sidecar.runAsUser`, 65532, with the same group): clients'
//! shared-memory regions and the sidecar's staging pool are created mode 0600/0660 by their
//! owner, so the containers that share `/dev/shm` must run as one user to open each other's
//! regions. It also lets the kubelet verify `runAsNonRoot` for images whose `USER` is root or a
//! name. A user of the user's choice (not root) keeps the sidecar's group unless a group is
//! given: the model server then still opens the staging pool (0660), but no longer clients'
//! regions (0600), which the sidecar then copies (docs/operator.md, "Security").

use k8s_openapi::api::core::v1::{
    Capabilities, PodSecurityContext, SeccompProfile, SecurityContext,
};

/// The user's security context with the restricted profile's settings filled in where neither
/// the container nor the pod sets them.
pub(super) fn restricted_defaults(
    container: Option<&SecurityContext>,
    pod: Option<&PodSecurityContext>,
    default_user: i64,
) -> SecurityContext {
    let mut sc = container.cloned().unwrap_or_default();
    let pod = pod.cloned().unwrap_or_default();

    sc.allow_privilege_escalation.get_or_insert(false);
    sc.capabilities
        .get_or_insert_with(Capabilities::default)
        .drop
        .get_or_insert_with(|| vec!["ALL".to_string()]);
    if sc.seccomp_profile.is_none() && pod.seccomp_profile.is_none() {
        sc.seccomp_profile = Some(SeccompProfile {
            type_: "RuntimeDefault".to_string(),
            ..SeccompProfile::default()
        });
    }
    if sc.run_as_user.is_none() && pod.run_as_user.is_none() {
        sc.run_as_user = Some(default_user);
    }
    // A user of its own keeps the sidecar's group, unless a group is given: the staging pool
    // (mode 0660) stays shared, while clients' regions (0600) are no longer the model server's
    // to open, so the sidecar copies their bytes instead of passing the regions through.
    let chosen_root = sc.run_as_user == Some(0);
    if sc.run_as_group.is_none()
        && pod.run_as_group.is_none()
        && pod.run_as_user.is_none()
        && !chosen_root
    {
        sc.run_as_group = Some(default_user);
    }
    let user = sc.run_as_user.or(pod.run_as_user);
    if sc.run_as_non_root.is_none() && pod.run_as_non_root.is_none() && user != Some(0) {
        sc.run_as_non_root = Some(true);
    }
    sc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_set_gives_the_restricted_profile_as_the_sidecars_user() {
        let sc = restricted_defaults(None, None, 65532);
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert_eq!(
            sc.capabilities.and_then(|c| c.drop),
            Some(vec!["ALL".to_string()])
        );
        assert_eq!(
            sc.seccomp_profile.map(|p| p.type_),
            Some("RuntimeDefault".to_string())
        );
        assert_eq!(sc.run_as_user, Some(65532));
        assert_eq!(sc.run_as_group, Some(65532));
        assert_eq!(sc.run_as_non_root, Some(true));
    }

    #[test]
    fn fields_the_user_sets_are_kept() {
        let user = SecurityContext {
            allow_privilege_escalation: Some(true),
            capabilities: Some(Capabilities {
                add: Some(vec!["IPC_LOCK".to_string()]),
                ..Capabilities::default()
            }),
            run_as_user: Some(1000),
            privileged: Some(false),
            ..SecurityContext::default()
        };
        let sc = restricted_defaults(Some(&user), None, 65532);
        assert_eq!(sc.allow_privilege_escalation, Some(true));
        let caps = sc.capabilities.unwrap_or_default();
        assert_eq!(caps.add, Some(vec!["IPC_LOCK".to_string()]));
        assert_eq!(caps.drop, Some(vec!["ALL".to_string()]));
        assert_eq!(sc.run_as_user, Some(1000));
        // A user of its own shares the sidecar's group (the staging pool is 0660), unless a
        // group is given.
        assert_eq!(sc.run_as_group, Some(65532));
        let grouped = SecurityContext {
            run_as_group: Some(3000),
            ..user.clone()
        };
        assert_eq!(
            restricted_defaults(Some(&grouped), None, 65532).run_as_group,
            Some(3000)
        );
        assert_eq!(sc.run_as_non_root, Some(true));
        assert_eq!(sc.privileged, Some(false));
    }

    #[test]
    fn root_by_choice_is_not_made_non_root() {
        let user = SecurityContext {
            run_as_user: Some(0),
            ..SecurityContext::default()
        };
        let sc = restricted_defaults(Some(&user), None, 65532);
        assert_eq!(sc.run_as_user, Some(0));
        assert_eq!(sc.run_as_non_root, None);
        assert_eq!(sc.run_as_group, None);
    }

    #[test]
    fn the_pods_settings_are_not_overridden_by_container_defaults() {
        let pod = PodSecurityContext {
            run_as_user: Some(2000),
            run_as_non_root: Some(true),
            seccomp_profile: Some(SeccompProfile {
                type_: "Localhost".to_string(),
                localhost_profile: Some("model.json".to_string()),
            }),
            ..PodSecurityContext::default()
        };
        let sc = restricted_defaults(None, Some(&pod), 65532);
        assert_eq!(sc.run_as_user, None);
        assert_eq!(sc.run_as_group, None);
        assert_eq!(sc.run_as_non_root, None);
        assert_eq!(sc.seccomp_profile, None);
        // Container-only fields are still defaulted.
        assert_eq!(sc.allow_privilege_escalation, Some(false));
    }

    #[test]
    fn root_from_the_pod_is_not_made_non_root() {
        let pod = PodSecurityContext {
            run_as_user: Some(0),
            ..PodSecurityContext::default()
        };
        let sc = restricted_defaults(None, Some(&pod), 65532);
        assert_eq!(sc.run_as_non_root, None);
    }
}
