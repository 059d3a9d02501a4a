//! The API calls the controller makes, as RBAC rules. The Helm chart's ClusterRole and Role must
//! grant exactly these (its test compares them with `infergate-operator rbac`), and the mock-API
//! tests check every request they see is covered.

use serde::Serialize;

/// One RBAC policy rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Rule {
    pub api_groups: &'static [&'static str],
    pub resources: &'static [&'static str],
    pub verbs: &'static [&'static str],
}

/// Cluster-wide rules (the ClusterRole): watching resources and managing their children.
pub const CLUSTER_RULES: &[Rule] = &[
    Rule {
        api_groups: &["infergate.dev"],
        resources: &["inferenceservices"],
        verbs: &["get", "list", "watch"],
    },
    Rule {
        api_groups: &["infergate.dev"],
        resources: &["inferenceservices/status"],
        verbs: &["patch"],
    },
    Rule {
        api_groups: &["apps"],
        resources: &["deployments"],
        // delete: a canary's Deployment goes with the canary.
        verbs: &["get", "list", "watch", "create", "patch", "delete"],
    },
    Rule {
        api_groups: &[""],
        resources: &["services"],
        verbs: &["get", "list", "watch", "create", "patch", "delete"],
    },
    Rule {
        api_groups: &[""],
        resources: &["configmaps"],
        verbs: &["get", "list", "watch", "create", "patch", "delete"],
    },
    Rule {
        api_groups: &["policy"],
        resources: &["poddisruptionbudgets"],
        verbs: &["get", "list", "watch", "create", "patch", "delete"],
    },
    Rule {
        api_groups: &["autoscaling"],
        resources: &["horizontalpodautoscalers"],
        verbs: &["get", "create", "patch", "delete"],
    },
    Rule {
        api_groups: &["networking.k8s.io"],
        resources: &["networkpolicies"],
        verbs: &["get", "create", "patch", "delete"],
    },
    Rule {
        api_groups: &["keda.sh"],
        resources: &["scaledobjects"],
        verbs: &["get", "create", "patch", "delete"],
    },
    Rule {
        api_groups: &["monitoring.coreos.com"],
        resources: &["podmonitors"],
        verbs: &["get", "create", "patch", "delete"],
    },
    Rule {
        api_groups: &["cert-manager.io"],
        resources: &["certificates"],
        verbs: &["get", "create", "patch", "delete"],
    },
    Rule {
        api_groups: &["gateway.networking.k8s.io"],
        resources: &["httproutes", "grpcroutes"],
        verbs: &["get", "create", "patch", "delete"],
    },
    // Sidecars that route sequences watch their peers' EndpointSlices: the operator gives their
    // pods a Role for that, and may grant only what it holds itself.
    Rule {
        api_groups: &[""],
        resources: &["serviceaccounts"],
        verbs: &["get", "create", "patch", "delete"],
    },
    Rule {
        api_groups: &["rbac.authorization.k8s.io"],
        resources: &["roles", "rolebindings"],
        verbs: &["get", "create", "patch", "delete"],
    },
    // Never called: held only so that the activator's Role may grant it (RBAC lets the
    // operator grant only what it holds); the operator-writes policy refuses the operator any
    // use of it.
    Rule {
        api_groups: &["apps"],
        resources: &["deployments/scale"],
        verbs: &["get", "patch"],
    },
    Rule {
        api_groups: &["discovery.k8s.io"],
        resources: &["endpointslices"],
        verbs: &["get", "list", "watch", "create", "patch", "delete"],
    },
    // Sidecars that check callers' identities ask LocalSubjectAccessReviews: the operator gives
    // their pods a Role for that, and may grant only what it holds itself.
    Rule {
        api_groups: &["authorization.k8s.io"],
        resources: &["localsubjectaccessreviews"],
        verbs: &["create"],
    },
    Rule {
        api_groups: &[""],
        resources: &["pods"],
        verbs: &["list"],
    },
    Rule {
        api_groups: &["events.k8s.io"],
        resources: &["events"],
        verbs: &["create", "patch"],
    },
];

/// Rules in the operator's own namespace (a Role): the leader-election Lease.
pub const LEADER_ELECTION_RULES: &[Rule] = &[Rule {
    api_groups: &["coordination.k8s.io"],
    resources: &["leases"],
    verbs: &["get", "create", "update"],
}];

/// Whether `rules` allow `verb` on `resource` of `group`.
pub fn allows(rules: &[Rule], group: &str, resource: &str, verb: &str) -> bool {
    rules.iter().any(|r| {
        r.api_groups.contains(&group) && r.resources.contains(&resource) && r.verbs.contains(&verb)
    })
}
